import { describe, expect, it } from 'vitest';

import { IMetricRecord } from '../src/model';
import { ResourceSeriesBuilder, resourceChartSvg } from '../src/resources';

const sample = (rank: number, t: number, extra: Partial<IMetricRecord> = {}): IMetricRecord => ({
  kind: 'resources',
  rank,
  t,
  cpu: 50 + rank,
  rss_mb: 100 * (rank + 1) + t,
  ...extra
});

describe('ResourceSeriesBuilder', () => {
  it('keeps one series per rank and field, in seconds since the first sample, skipping other kinds', () => {
    const builder = new ResourceSeriesBuilder();
    expect(builder.add([{ kind: 'batch', t: 1, logs: { loss: 1 } }])).toBe(false);
    expect(builder.add([sample(0, 10), sample(1, 10.25), sample(0, 10.5)])).toBe(true);
    const rss = builder.series.get('rss_mb')!;
    expect([...rss.keys()]).toEqual([0, 1]);
    expect(rss.get(0)).toEqual([
      { x: 0, y: 110 },
      { x: 0.5, y: 110.5 }
    ]);
    expect(builder.series.has('gpu_util')).toBe(false); // no GPU fields: no GPU series
  });
});

describe('resourceChartSvg', () => {
  it('draws one line per rank with a legend, and nothing for a field no rank reported', () => {
    const builder = new ResourceSeriesBuilder();
    builder.add([sample(0, 0), sample(1, 0), sample(0, 1), sample(1, 1, { gpu_util: 80 })]);
    const svg = resourceChartSvg(builder.series, 'cpu', { width: 300, height: 120 });
    expect(svg.match(/class="jp-dl-resource-line"/g)).toHaveLength(2);
    expect(svg).toContain('data-rank="1"');
    expect(svg).toContain('rank 0');
    expect(svg).toContain('CPU (%)');
    expect(resourceChartSvg(builder.series, 'gpu_util', { width: 300, height: 120 })).toContain('GPU utilisation');
    expect(resourceChartSvg(builder.series, 'gpu_mem_mb', { width: 300, height: 120 })).toBe('');
  });
});
