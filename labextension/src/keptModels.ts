/**
 * What the panel offers for a model a succeeded job kept: the cell that loads it and the path it downloads from.
 * Pure: no JupyterLab imports.
 */
import { apiPath } from './url';

/**
 * The code of the cell "Load model into notebook" inserts. Both strings go in as JSON string literals, which are
 * valid Python string literals too, so no id or name can break out of them.
 */
export function loadModelCode(jobId: string, name: string): string {
  // No blank line: a two-line cell reads as one step.
  return `import jupyter_dl\nmodel = jupyter_dl.load_job(${JSON.stringify(jobId)}).models[${JSON.stringify(name)}]`;
}

/** The download endpoint of a kept model, relative to the server's base URL. */
export function modelDownloadPath(jobId: string, name: string): string {
  return apiPath(['jobs', jobId, 'results', 'model', name]);
}
