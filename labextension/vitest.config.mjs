import { defineConfig } from 'vitest/config';

// Unit tests of the pure helpers and of the jobs model (JupyterLab packages that need no DOM, e.g. an in-memory
// StateDB), run in node by `jlpm test`.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node'
  }
});
