import { describe, expect, it } from 'vitest';

import { lastValue, sparklinePath } from '../src/sparkline';

/** The [x, y] points of an M/L path. */
function points(d: string): number[][] {
  return [...d.matchAll(/[ML]([\d.-]+) ([\d.-]+)/g)].map(m => [Number(m[1]), Number(m[2])]);
}

describe('sparklinePath', () => {
  it('draws nothing for no data', () => {
    expect(sparklinePath([], 60, 16)).toBe('');
    expect(sparklinePath(null, 60, 16)).toBe('');
    expect(sparklinePath([NaN, null], 60, 16)).toBe('');
    expect(sparklinePath([1, 2], 0, 16)).toBe('');
  });

  it('spans the box, left to right, higher values higher up', () => {
    const d = sparklinePath([3, 1, 2], 100, 20, 0);
    expect(d).toBe('M0 0L50 20L100 10');
  });

  it('keeps the padding', () => {
    const pts = points(sparklinePath([1, 0.5, 0.25, 0.1], 60, 16, 2));
    expect(pts[0]).toEqual([2, 2]);
    expect(pts[pts.length - 1]).toEqual([58, 14]);
    for (const [x, y] of pts) {
      expect(x).toBeGreaterThanOrEqual(2);
      expect(x).toBeLessThanOrEqual(58);
      expect(y).toBeGreaterThanOrEqual(2);
      expect(y).toBeLessThanOrEqual(14);
    }
  });

  it('draws flat series and single values through the middle', () => {
    expect(sparklinePath([5, 5, 5], 10, 10, 0)).toBe('M0 5L5 5L10 5');
    expect(sparklinePath([0.3], 10, 10, 1)).toBe('M1 5L9 5');
  });

  it('leaves gaps for missing values', () => {
    const d = sparklinePath([1, null, 3, 2], 30, 10, 0);
    expect(d).toBe('M0 10M20 0L30 5');
  });

  it('finds the last finite value', () => {
    expect(lastValue([1, 2, NaN])).toBe(2);
    expect(lastValue([])).toBeNull();
    expect(lastValue(undefined)).toBeNull();
  });
});
