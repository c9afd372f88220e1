import { describe, expect, it } from 'vitest';

import { EtaSmoother } from '../src/eta';
import { formatFinalMetrics, formatPercent, formatStartTime, startedAt, tabTitle } from '../src/format';
import { sparklinePath } from '../src/sparkline';

describe('job rows', () => {
  it('reads the percent the bar shows', () => {
    expect(formatPercent(0.057)).toBe('5.7%'); // was 5% beside a 5.7% bar
    expect(formatPercent(0.426)).toBe('43%');
    expect(formatPercent(0.996)).toBe('99%'); // 100% only when done
    expect(formatPercent(1)).toBe('100%');
  });

  it('tells runs of one cell apart by their start time', () => {
    const now = new Date(2025, 0, 15, 18, 0, 0);
    const today = new Date(2025, 0, 15, 14, 3, 12).getTime() / 1000;
    expect(formatStartTime(today, now)).toBe('14:03:12');
    const earlier = new Date(2025, 0, 13, 9, 5, 0).getTime() / 1000;
    expect(formatStartTime(earlier, now)).toMatch(/ 09:05$/);
    expect(formatStartTime(null, now)).toBe('');
    expect(startedAt({ created: 5, timestamps: { starting: 7 } })).toBe(7);
    expect(startedAt({ created: 5 })).toBe(5);
  });

  it('shows a finished job its final metrics, the loss first', () => {
    expect(formatFinalMetrics({ val_loss: 0.5, accuracy: 0.9712, loss: 0.01234 })).toBe(
      'loss 0.01234 · accuracy 0.9712'
    );
    expect(formatFinalMetrics({})).toBe('');
    expect(formatFinalMetrics(null)).toBe('');
  });

  it('titles tabs of two jobs with one name differently', () => {
    const a = { id: 'aaa', name: 'ui-cancel', created: 1_700_000_000 };
    const b = { id: 'bbb', name: 'ui-cancel', created: 1_700_000_095 };
    expect(tabTitle('Loss', a)).not.toBe(tabTitle('Loss', b));
    expect(tabTitle('Loss', a)).toMatch(/^Loss: ui-cancel · /);
  });
});

describe('EtaSmoother', () => {
  it('counts down and follows new estimates without jumping', () => {
    const eta = new EtaSmoother(10);
    const raw = [318, 449, 512, 240]; // what the walk-through saw within 8 s
    const shown = raw.map((value, i) => eta.update('job', value, i * 2.5) as number);
    expect(shown[0]).toBe(318);
    for (let i = 1; i < shown.length; i++) {
      expect(Math.abs(shown[i] - shown[i - 1])).toBeLessThan(60);
    }
    expect(eta.update('job', null, 11)).toBeNull();
    expect(eta.update('job', 100, 12)).toBe(100); // after an unknown, starts afresh
  });

  it('forgets jobs no longer listed', () => {
    const eta = new EtaSmoother(10);
    eta.update('gone', 50, 0);
    eta.retain(['other']);
    expect(eta.update('gone', 500, 1)).toBe(500);
  });
});

describe('sparkline scale', () => {
  it('keeps the tail of a long loss curve visible (log scale past the first drop)', () => {
    // A loss that falls from 2.3 to 0.1 in the first 10% and then keeps improving slowly.
    const values = Array.from({ length: 60 }, (_, i) => (i < 6 ? 2.3 - i * 0.4 : 0.1 / (1 + (i - 6) / 10)));
    const ys = [...sparklinePath(values, 72, 18, 2).matchAll(/[ML][\d.]+ ([\d.]+)/g)].map(m => Number(m[1]));
    const tail = ys.slice(6);
    // On a linear scale the last 54 points span under 0.6 px; on the log scale they use a third of the height.
    expect(Math.max(...tail) - Math.min(...tail)).toBeGreaterThan(14 / 3);
  });
});
