/**
 * The comparison chart: every run's curves against one x axis, a colour per run and a dash per metric, with a
 * legend. Pure: no JupyterLab imports.
 */
import { downsample, escapeXml, IPoint, linePath, niceTicks, r2, tickLabel, yGridAndTicks } from './chart';
import { CompareAxis, ICompareReply } from './model';

const RUN_COLOURS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
const DASHES = ['', '6 3', '2 3', '8 3 2 3', '1 2'];


/** The legend text of one curve: the run's label and the metric. */
export function curveLabel(data: ICompareReply, curve: ICompareReply['curves'][number]): string {
  const run = data.runs.find(r => r.id === curve.run);
  return `${run?.label ?? curve.run} · ${curve.metric}`;
}

export function compareChartSvg(
  data: ICompareReply,
  x: CompareAxis,
  size: { width: number; height: number }
): string {
  const width = Math.max(240, Math.floor(size.width));
  const metrics = [...new Set(data.curves.map(c => c.metric))];
  const legendRows = data.curves.length;
  const legendH = 16 * legendRows + 8;
  const height = Math.max(160, Math.floor(size.height)) + legendH;
  const margin = { left: 56, right: 16, top: 12, bottom: 36 + legendH };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const open = `<svg xmlns="http://www.w3.org/2000/svg" class="jp-dl-chart jp-dl-compare-chart" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="Runs compared">`;
  const series = data.curves.map(c => ({
    curve: c,
    points: c[x].map((xv, i) => ({ x: xv, y: c.y[i] })).filter(p => Number.isFinite(p.x) && Number.isFinite(p.y))
  }));
  const all: IPoint[] = series.flatMap(s => s.points);
  if (all.length === 0) {
    return `${open}<text class="jp-dl-chart-placeholder" x="${width / 2}" y="${height / 2}" text-anchor="middle">No curves to compare</text></svg>`;
  }
  let [xmin, xmax, ymin, ymax] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const p of all) {
    [xmin, xmax, ymin, ymax] = [Math.min(xmin, p.x), Math.max(xmax, p.x), Math.min(ymin, p.y), Math.max(ymax, p.y)];
  }
  xmin = Math.min(xmin, 0);
  if (xmax === xmin) {
    xmax = xmin + 1;
  }
  if (ymax === ymin) {
    ymax = ymin + (Math.abs(ymin) || 1);
  }
  const sx = (v: number): number => margin.left + ((v - xmin) / (xmax - xmin)) * plotW;
  const sy = (v: number): number => margin.top + (1 - (v - ymin) / (ymax - ymin)) * plotH;
  const parts = [open, ...yGridAndTicks(niceTicks(ymin, ymax, 5), sy, margin.left, plotW, margin.left - 6)];
  for (const t of niceTicks(xmin, xmax, Math.max(2, Math.floor(plotW / 80)))) {
    parts.push(
      `<text x="${r2(sx(t))}" y="${margin.top + plotH + 16}" text-anchor="middle">${escapeXml(tickLabel(t))}</text>`
    );
  }
  parts.push(
    `<text class="jp-dl-chart-xlabel" x="${r2(margin.left + plotW / 2)}" y="${margin.top + plotH + 32}" text-anchor="middle">${escapeXml(data.x_titles[x] ?? x)}</text></g>`
  );
  const budget = Math.max(50, Math.floor(plotW));
  const runIndex = new Map(data.runs.map((r, i) => [r.id, i]));
  const style = (c: ICompareReply['curves'][number]): string => {
    const colour = RUN_COLOURS[(runIndex.get(c.run) ?? 0) % RUN_COLOURS.length];
    const dash = DASHES[metrics.indexOf(c.metric) % DASHES.length];
    return `stroke="${colour}"${dash ? ` stroke-dasharray="${dash}"` : ''}`;
  };
  for (const { curve, points } of series) {
    parts.push(
      `<path class="jp-dl-compare-line" data-run="${escapeXml(curve.run)}" data-metric="${escapeXml(curve.metric)}" fill="none" stroke-width="1.5" ${style(curve)} d="${linePath(downsample(points, budget), sx, sy)}"><title>${escapeXml(curveLabel(data, curve))}</title></path>`
    );
  }
  parts.push('<g class="jp-dl-chart-legend jp-dl-compare-legend">');
  data.curves.forEach((curve, i) => {
    const y = margin.top + plotH + 48 + i * 16;
    parts.push(
      `<line x1="${margin.left}" x2="${margin.left + 24}" y1="${y}" y2="${y}" stroke-width="2" ${style(curve)}/>` +
        `<text x="${margin.left + 30}" y="${y}" dominant-baseline="middle">${escapeXml(curveLabel(data, curve))}</text>`
    );
  });
  parts.push('</g></svg>');
  return parts.join('');
}
