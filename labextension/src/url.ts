/**
 * Building jupyter-dl API paths. Pure: no JupyterLab imports.
 */

/** The API root, relative to the server's base URL. */
export const API_ROOT = 'jupyter-dl/api';

export type QueryValue = string | number | boolean | null | undefined | ReadonlyArray<string | number>;

/**
 * The query string for `query`, with a leading `?`, or '' when nothing is set.
 *
 * Null, undefined and empty arrays are left out; arrays are joined with commas (`state=running,queued`).
 */
export function queryString(query?: { [key: string]: QueryValue }): string {
  if (!query) {
    return '';
  }
  const parts: string[] = [];
  for (const key of Object.keys(query)) {
    const value = query[key];
    if (value === null || value === undefined) {
      continue;
    }
    let encoded: string;
    if (Array.isArray(value)) {
      if (value.length === 0) {
        continue;
      }
      encoded = value.map(v => encodeURIComponent(String(v))).join(',');
    } else {
      encoded = encodeURIComponent(String(value));
    }
    parts.push(`${encodeURIComponent(key)}=${encoded}`);
  }
  return parts.length ? `?${parts.join('&')}` : '';
}

/**
 * The path of an API endpoint relative to the server's base URL, e.g.
 * `apiPath(['jobs', id, 'logs'], {rank: 0})` -> `jupyter-dl/api/jobs/<id>/logs?rank=0`.
 * Each segment is percent-encoded, so ids can never add path components.
 */
export function apiPath(segments: ReadonlyArray<string | number>, query?: { [key: string]: QueryValue }): string {
  const path = [API_ROOT, ...segments.map(s => encodeURIComponent(String(s)))].join('/');
  return path + queryString(query);
}

/** `base` and `path` joined with exactly one slash between them. */
export function joinUrl(base: string, path: string): string {
  if (!base) {
    return path;
  }
  return base.replace(/\/+$/, '') + '/' + path.replace(/^\/+/, '');
}
