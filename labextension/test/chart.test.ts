import { describe, expect, it } from 'vitest';

import {
  LossSeriesBuilder,
  downsample,
  escapeXml,
  lossChartSvg,
  niceTicks
} from '../src/chart';
import { IMetricRecord } from '../src/model';

/** Batch records for one epoch whose per-step losses are `losses` (sent as Keras running means). */
function epochRecords(epoch: number, losses: number[], epochLogs: { [k: string]: number }) {
  const records: IMetricRecord[] = [];
  let sum = 0;
  losses.forEach((loss, i) => {
    sum += loss;
    records.push({
      kind: 'batch',
      t: i,
      epoch,
      step: i + 1,
      steps: losses.length,
      logs: { loss: sum / (i + 1) }
    });
  });
  records.push({ kind: 'epoch', t: 99, epoch, logs: epochLogs });
  return records;
}

describe('LossSeriesBuilder', () => {
  it('recovers per-step loss from running means and places epochs at their last step', () => {
    const b = new LossSeriesBuilder();
    b.add([{ kind: 'begin', rank: 0, epochs: 2, steps: 3 }]);
    b.add(epochRecords(0, [3, 2, 1], { loss: 2, val_loss: 2.5 }));
    b.add(epochRecords(1, [1, 0.5, 0.3], { loss: 0.6, val_loss: 0.9, accuracy: 0.8 }));
    const s = b.series;
    expect(s.xUnit).toBe('step');
    expect(s.stepsPerEpoch).toBe(3);
    expect(s.epochsPlanned).toBe(2);
    expect(s.step.map(p => p.x)).toEqual([1, 2, 3, 4, 5, 6]);
    s.step.forEach((p, i) => expect(p.y).toBeCloseTo([3, 2, 1, 1, 0.5, 0.3][i], 9));
    expect(s.epochLoss).toEqual([
      { x: 3, y: 2 },
      { x: 6, y: 0.6 }
    ]);
    expect(s.epochValLoss).toEqual([
      { x: 3, y: 2.5 },
      { x: 6, y: 0.9 }
    ]);
    expect(s.boundaries).toEqual([3, 6]);
    expect(s.epochs[1].logs.accuracy).toBe(0.8);
    expect(s.smooth).toHaveLength(6);
    expect(s.smooth[0].y).toBe(3);
    expect(s.ended).toBe(false);
    b.add([{ kind: 'end', rank: 0 }]);
    expect(b.series.ended).toBe(true);
  });

  it('after a restart, drops what the resumed run trains again and marks where it began', () => {
    const b = new LossSeriesBuilder();
    b.add([{ kind: 'begin', rank: 0, epochs: 3, steps: 3 }]);
    b.add(epochRecords(0, [3, 2, 1], { loss: 2 }));
    // The second epoch fails after two steps; the checkpoint holds epoch 0.
    b.add(epochRecords(1, [1, 0.9, 0.8], { loss: 0 }).slice(0, 2));
    b.add([{ kind: 'restart', attempt: 1, reason: 'rank 1 failed (EngineError)' }]);
    expect(b.series.ended).toBe(false);
    b.add([{ kind: 'begin', rank: 0, epochs: 3, steps: 3, initial_epoch: 1 }]);
    b.add(epochRecords(1, [0.8, 0.7, 0.6], { loss: 0.7 }));
    const s = b.series;
    expect(s.step.map(p => p.x)).toEqual([1, 2, 3, 4, 5, 6]);
    s.step.forEach((p, i) => expect(p.y).toBeCloseTo([3, 2, 1, 0.8, 0.7, 0.6][i], 9));
    expect(s.epochs.map(e => e.epoch)).toEqual([0, 1]);
    expect(s.boundaries).toEqual([3, 6]);
    expect(s.restarts).toEqual([{ x: 3, attempt: 1, reason: 'rank 1 failed (EngineError)' }]);
    const svg = lossChartSvg(s, { width: 600, height: 300 });
    expect(svg).toContain('jp-dl-chart-restarts');
    expect(svg).toContain('restart 1');
    expect(svg).toContain('<title>rank 1 failed (EngineError)</title>');
  });

  it('gives the same series when records arrive page by page', () => {
    const records = [
      { kind: 'begin', rank: 0, steps: 4 },
      ...epochRecords(0, [4, 3, 2, 1], { loss: 2.5 })
    ];
    const whole = new LossSeriesBuilder();
    whole.add(records);
    const paged = new LossSeriesBuilder();
    for (const r of records) {
      paged.add([r]);
    }
    expect(paged.series).toEqual(whole.series);
  });

  it('falls back to the running mean across a missing step', () => {
    const b = new LossSeriesBuilder();
    b.add([
      { kind: 'batch', epoch: 0, step: 1, steps: 10, logs: { loss: 2 } },
      { kind: 'batch', epoch: 0, step: 3, steps: 10, logs: { loss: 1.5 } }
    ]);
    expect(b.series.step).toEqual([
      { x: 1, y: 2 },
      { x: 3, y: 1.5 }
    ]);
  });

  it('counts steps when steps per epoch are unknown, and uses epochs alone when there are no batches', () => {
    const b = new LossSeriesBuilder();
    b.add([
      { kind: 'batch', epoch: 0, step: 1, logs: { loss: 1 } },
      { kind: 'batch', epoch: 0, step: 2, logs: { loss: 1 } },
      { kind: 'epoch', epoch: 0, logs: { loss: 1 } }
    ]);
    expect(b.series.step.map(p => p.x)).toEqual([1, 2]);
    expect(b.series.epochLoss).toEqual([{ x: 2, y: 1 }]);

    const e = new LossSeriesBuilder();
    e.add([
      { kind: 'epoch', epoch: 0, logs: { loss: 1, val_loss: 2 } },
      { kind: 'epoch', epoch: 1, logs: { loss: 0.5 } },
      { kind: 'throughput', rank: 0, epoch: 1 }
    ]);
    expect(e.series.xUnit).toBe('epoch');
    expect(e.series.epochLoss.map(p => p.x)).toEqual([1, 2]);
    expect(e.series.epochValLoss).toEqual([{ x: 1, y: 2 }]);
  });

  it('ignores batches without the key and non-finite epoch values', () => {
    const b = new LossSeriesBuilder();
    expect(b.add([{ kind: 'batch', epoch: 0, step: 1, logs: { acc: 1 } }])).toBe(false);
    b.add([{ kind: 'epoch', epoch: 0, logs: { loss: NaN } as any }]);
    expect(b.series.step).toEqual([]);
    expect(b.series.epochLoss).toEqual([]);
    expect(b.series.epochs).toHaveLength(1);
  });
});

describe('niceTicks', () => {
  it('picks round steps', () => {
    expect(niceTicks(0, 1, 5)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0.13, 2.71, 5)).toEqual([0.5, 1, 1.5, 2, 2.5]);
    expect(niceTicks(0, 1000, 4)).toEqual([0, 200, 400, 600, 800, 1000]);
    expect(niceTicks(0, 1000, 2)).toEqual([0, 500, 1000]);
    expect(niceTicks(5, 5)).toEqual([5]);
    expect(niceTicks(2, 0, 2)).toEqual([0, 1, 2]);
    expect(niceTicks(NaN, 1)).toEqual([]);
  });
});

describe('downsample', () => {
  it('keeps short series and the extremes of long ones', () => {
    const short = [{ x: 0, y: 1 }];
    expect(downsample(short, 10)).toEqual(short);
    const long = Array.from({ length: 1000 }, (_, i) => ({ x: i, y: i === 517 ? 100 : 1 }));
    const d = downsample(long, 50);
    expect(d.length).toBeLessThanOrEqual(100);
    expect(d.some(p => p.y === 100)).toBe(true);
    for (let i = 1; i < d.length; i++) {
      expect(d[i].x).toBeGreaterThan(d[i - 1].x);
    }
  });
});

describe('lossChartSvg', () => {
  it('shows a placeholder without data', () => {
    const svg = lossChartSvg(new LossSeriesBuilder().series, { width: 400, height: 200 });
    expect(svg).toContain('No loss reported yet');
    expect(svg.startsWith('<svg')).toBe(true);
  });

  it('draws step and epoch series with a legend', () => {
    const b = new LossSeriesBuilder();
    b.add([{ kind: 'begin', rank: 0, steps: 3 }]);
    b.add(epochRecords(0, [3, 2, 1], { loss: 2, val_loss: 2.5 }));
    b.add(epochRecords(1, [1, 0.5, 0.3], { loss: 0.6, val_loss: 0.9 }));
    const svg = lossChartSvg(b.series, { width: 600, height: 300 });
    expect(svg).toMatch(/class="jp-dl-chart-step" d="M[^"]+"/);
    expect(svg).toMatch(/class="jp-dl-chart-smooth" d="M[^"]+"/);
    expect(svg).toMatch(/class="jp-dl-chart-epoch-loss" d="M[^"]+L[^"]+"/);
    expect(svg).toMatch(/class="jp-dl-chart-epoch-val" d="M[^"]+L[^"]+"/);
    expect(svg).toContain('epoch val_loss');
    expect(svg).not.toContain('NaN');
    expect(svg.match(/<circle/g)).toHaveLength(4);
    // Every coordinate stays inside the box.
    for (const m of svg.matchAll(/[ML]([\d.-]+) ([\d.-]+)/g)) {
      expect(Number(m[1])).toBeGreaterThanOrEqual(0);
      expect(Number(m[1])).toBeLessThanOrEqual(600);
      expect(Number(m[2])).toBeGreaterThanOrEqual(0);
      expect(Number(m[2])).toBeLessThanOrEqual(300);
    }
    const noRaw = lossChartSvg(b.series, { width: 600, height: 300, showRaw: false });
    expect(noRaw).not.toContain('jp-dl-chart-step');
    const log = lossChartSvg(b.series, { width: 600, height: 300, logY: true });
    expect(log).not.toContain('NaN');
  });

  it('draws a single epoch point without dividing by zero', () => {
    const b = new LossSeriesBuilder();
    b.add([{ kind: 'epoch', epoch: 0, logs: { loss: 0.5 } }]);
    const svg = lossChartSvg(b.series, { width: 300, height: 200 });
    expect(svg).not.toContain('NaN');
    expect(svg).not.toContain('Infinity');
    expect(svg).toContain('<circle');
  });

  it('escapes markup', () => {
    expect(escapeXml('<a href="x">&\'')).toBe('&lt;a href=&quot;x&quot;&gt;&amp;&#39;');
  });
});
