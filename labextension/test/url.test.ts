import { describe, expect, it } from 'vitest';

import { API_ROOT, apiPath, joinUrl, queryString } from '../src/url';

describe('apiPath', () => {
  it('builds the endpoints of the contract', () => {
    expect(API_ROOT).toBe('jupyter-dl/api');
    expect(apiPath(['jobs'])).toBe('jupyter-dl/api/jobs');
    expect(apiPath(['jobs'], { state: ['running', 'queued'] })).toBe('jupyter-dl/api/jobs?state=running,queued');
    expect(apiPath(['jobs', 'abc123'])).toBe('jupyter-dl/api/jobs/abc123');
    expect(apiPath(['jobs', 'abc123', 'metrics'], { since: 0 })).toBe('jupyter-dl/api/jobs/abc123/metrics?since=0');
    expect(apiPath(['jobs', 'abc123', 'logs'], { rank: 1, tail: 200, stream: 'stderr' })).toBe(
      'jupyter-dl/api/jobs/abc123/logs?rank=1&tail=200&stream=stderr'
    );
    expect(apiPath(['cluster'])).toBe('jupyter-dl/api/cluster');
  });

  it('encodes segments so an id cannot add path components', () => {
    expect(apiPath(['jobs', '../x y'])).toBe('jupyter-dl/api/jobs/..%2Fx%20y');
  });

  it('leaves out unset parameters and encodes values', () => {
    expect(queryString({ state: undefined, since: null, s: [] })).toBe('');
    expect(queryString({ q: 'a&b=c', flag: true })).toBe('?q=a%26b%3Dc&flag=true');
    expect(queryString()).toBe('');
  });
});

describe('joinUrl', () => {
  it('joins with exactly one slash', () => {
    expect(joinUrl('/user/me/', 'jupyter-dl/api/jobs')).toBe('/user/me/jupyter-dl/api/jobs');
    expect(joinUrl('/user/me', '/jupyter-dl/api/jobs')).toBe('/user/me/jupyter-dl/api/jobs');
    expect(joinUrl('', 'a')).toBe('a');
  });
});
