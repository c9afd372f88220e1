import { defineConfig } from 'vitest/config';

// Unit tests of the pure helpers (no JupyterLab imports), run in node by `jlpm test`.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node'
  }
});
