/**
 * Per-rank resource charts for the job tab: CPU %, resident memory and, where the ranks saw a GPU, its utilisation
 * and memory, from the `resources` records each rank writes a few times a second. Pure: no JupyterLab imports.
 */
import { downsample, escapeXml, IPoint, linePath, niceTicks, tickLabel, yGridAndTicks } from './chart';
import { IMetricRecord } from './model';

/** What a resources record holds, with the label and unit each small chart shows. */
export const RESOURCE_FIELDS = [
  { key: 'cpu', label: 'CPU', unit: '%' },
  { key: 'rss_mb', label: 'Memory (resident)', unit: 'MB' },
  { key: 'gpu_util', label: 'GPU utilisation', unit: '%' },
  { key: 'gpu_mem_mb', label: 'GPU memory', unit: 'MB' }
] as const;

export type ResourceField = (typeof RESOURCE_FIELDS)[number]['key'];

/** field -> rank -> points (x: seconds since the job's first sample). */
export type ResourceSeries = Map<ResourceField, Map<number, IPoint[]>>;

/** Collects resources records as pages of metrics arrive; other kinds are skipped. */
export class ResourceSeriesBuilder {
  readonly series: ResourceSeries = new Map();

  /** Adds a page of records; true when any resources record was among them. */
  add(records: ReadonlyArray<IMetricRecord>): boolean {
    let changed = false;
    for (const r of records) {
      if (r.kind !== 'resources' || typeof r.t !== 'number') {
        continue;
      }
      if (this._t0 === null) {
        this._t0 = r.t;
      }
      const rank = typeof r.rank === 'number' ? r.rank : 0;
      for (const { key } of RESOURCE_FIELDS) {
        const y = r[key];
        if (typeof y !== 'number' || !Number.isFinite(y)) {
          continue;  // GPU fields only where the rank has a GPU
        }
        let byRank = this.series.get(key);
        if (!byRank) {
          byRank = new Map();
          this.series.set(key, byRank);
        }
        let points = byRank.get(rank);
        if (!points) {
          points = [];
          byRank.set(rank, points);
        }
        points.push({ x: r.t - this._t0, y });
        changed = true;
      }
    }
    return changed;
  }

  private _t0: number | null = null;
}

/** Line colours per rank, in order (rank 8 reuses rank 0's). */
const RANK_COLOURS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'];


/**
 * One small chart: `field` against seconds, one line per rank, with a y axis from 0 and a legend of ranks.
 * Empty string when no rank reported the field (no GPU: no GPU charts).
 */
export function resourceChartSvg(
  series: ResourceSeries,
  field: ResourceField,
  size: { width: number; height: number }
): string {
  const byRank = series.get(field);
  const spec = RESOURCE_FIELDS.find(f => f.key === field)!;
  if (!byRank || byRank.size === 0) {
    return '';
  }
  const width = Math.max(120, Math.floor(size.width));
  const height = Math.max(80, Math.floor(size.height));
  const margin = { left: 48, right: 8, top: 20, bottom: 20 };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const ranks = [...byRank.keys()].sort((a, b) => a - b);
  let xmax = 1;
  let ymax = spec.unit === '%' ? 100 : 1;  // percentages keep a 0..100 scale unless a rank goes above (cores)
  for (const points of byRank.values()) {
    for (const p of points) {
      xmax = Math.max(xmax, p.x);
      ymax = Math.max(ymax, p.y);
    }
  }
  const ticks = niceTicks(0, ymax, 3);
  ymax = Math.max(ymax, ticks[ticks.length - 1] ?? ymax);
  const sx = (x: number): number => margin.left + (x / xmax) * plotW;
  const sy = (y: number): number => margin.top + (1 - y / ymax) * plotH;
  const title = `${spec.label} (${spec.unit})`;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" class="jp-dl-chart jp-dl-resource-chart" data-field="${field}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${escapeXml(title)} per rank">`,
    `<text class="jp-dl-resource-title" x="${margin.left}" y="12">${escapeXml(title)}</text>`,
    ...yGridAndTicks(ticks, sy, margin.left, plotW, margin.left - 4)
  ];
  parts.push(
    `<text x="${margin.left + plotW}" y="${height - 4}" text-anchor="end">${escapeXml(tickLabel(Math.round(xmax)))} s</text></g>`
  );
  const budget = Math.max(50, Math.floor(plotW));
  ranks.forEach((rank, i) => {
    const colour = RANK_COLOURS[i % RANK_COLOURS.length];
    parts.push(
      `<path class="jp-dl-resource-line" data-rank="${rank}" fill="none" stroke="${colour}" stroke-width="1.5" d="${linePath(downsample(byRank.get(rank)!, budget), sx, sy)}"/>`
    );
  });
  // Legend: ranks, right of the title.
  let lx = margin.left + 12 + title.length * 6.5;
  parts.push('<g class="jp-dl-chart-legend">');
  ranks.forEach((rank, i) => {
    const colour = RANK_COLOURS[i % RANK_COLOURS.length];
    parts.push(
      `<line x1="${lx}" x2="${lx + 12}" y1="8" y2="8" stroke="${colour}" stroke-width="2"/>` +
        `<text x="${lx + 15}" y="12">${escapeXml(`rank ${rank}`)}</text>`
    );
    lx += 60;
  });
  parts.push('</g></svg>');
  return parts.join('');
}
