import { describe, expect, it } from 'vitest';

import { loadModelCode, modelDownloadPath } from '../src/keptModels';

describe('kept models', () => {
  it('loads the model by job id and name, with the import', () => {
    expect(loadModelCode('2026-abc', 'model')).toBe(
      'import jupyter_dl\nmodel = jupyter_dl.load_job("2026-abc").models["model"]'
    );
    expect(loadModelCode('a"b', 'm')).toContain('load_job("a\\"b")'); // quoted, never cut short
  });

  it('downloads from the results endpoint, each segment encoded', () => {
    expect(modelDownloadPath('abc', 'net')).toBe('jupyter-dl/api/jobs/abc/results/model/net');
    expect(modelDownloadPath('abc', '../x')).toBe('jupyter-dl/api/jobs/abc/results/model/..%2Fx');
  });
});
