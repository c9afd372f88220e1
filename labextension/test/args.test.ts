import { describe, expect, it } from 'vitest';

import { compareRestoreName, isRestoring, jobIdArg, jobIdsArg, readTabConfig } from '../src/args';

describe('jobIdArg', () => {
  it('reads a string id and nothing else', () => {
    expect(jobIdArg({ id: 'abc123' })).toBe('abc123');
    expect(jobIdArg({ id: 42 })).toBe('');
    expect(jobIdArg({})).toBe('');
    expect(jobIdArg(undefined)).toBe('');
    expect(jobIdArg(null)).toBe('');
  });
});

describe('jobIdsArg', () => {
  it('wants two or more ids, as strings', () => {
    expect(jobIdsArg({ ids: ['a', 'b'] })).toEqual(['a', 'b']);
    expect(jobIdsArg({ ids: ['a', 2, 'c'] })).toEqual(['a', '2', 'c']);
    expect(jobIdsArg({ ids: ['a'] })).toBeNull();
    expect(jobIdsArg({ ids: 'a,b' })).toBeNull();
    expect(jobIdsArg({})).toBeNull();
    expect(jobIdsArg(undefined)).toBeNull();
  });
});

describe('isRestoring', () => {
  it('is true only for the flag the restorer passes', () => {
    expect(isRestoring({ id: 'a', restoring: true })).toBe(true);
    expect(isRestoring({ id: 'a', restoring: 'yes' })).toBe(false);
    expect(isRestoring({ id: 'a' })).toBe(false);
    expect(isRestoring(undefined)).toBe(false);
  });
});

describe('compareRestoreName', () => {
  it('keeps the jobs and their order', () => {
    expect(compareRestoreName(['b', 'a'])).toBe('b,a');
    expect(compareRestoreName(['a', 'b'])).not.toBe(compareRestoreName(['b', 'a']));
  });
});

describe('readTabConfig', () => {
  const defaults = { pollInterval: 2000, logTailLines: 500 };

  it('takes the settings when they are numbers', () => {
    expect(readTabConfig(1000, 200, defaults, 500)).toEqual({ pollInterval: 1000, logTailLines: 200 });
    expect(readTabConfig('1500', '300', defaults, 500)).toEqual({ pollInterval: 1500, logTailLines: 300 });
  });

  it('polls no faster than the minimum and shows whole, positive line counts', () => {
    expect(readTabConfig(10, 12.7, defaults, 500)).toEqual({ pollInterval: 500, logTailLines: 12 });
    expect(readTabConfig(1000, 0, defaults, 500).logTailLines).toBe(500);
    expect(readTabConfig(1000, -3, defaults, 500).logTailLines).toBe(500);
  });

  it('falls back to the defaults for what is not a number', () => {
    expect(readTabConfig(undefined, 'many', defaults, 500)).toEqual(defaults);
    expect(readTabConfig(NaN, Infinity, defaults, 500)).toEqual(defaults);
  });
});
