/**
 * The loss plot: turning metric records into series, and series into an SVG chart. Pure: no JupyterLab imports;
 * the chart is returned as SVG markup whose colours come from CSS classes (see style/index.css), so it follows the
 * light and dark themes.
 */
import { IMetricRecord } from './model';

export interface IPoint {
  x: number;
  y: number;
}

/** One finished epoch. */
export interface IEpochPoint {
  /** Zero-based epoch index. */
  epoch: number;
  /** Global step at the end of the epoch (or epoch + 1 when no batches were seen). */
  x: number;
  logs: { [key: string]: number };
}

export interface ILossSeries {
  /** Loss of each step, recovered from Keras' running means. */
  step: IPoint[];
  /** Exponential moving average of `step`. */
  smooth: IPoint[];
  /** Per-epoch training loss at the end of each epoch. */
  epochLoss: IPoint[];
  /** Per-epoch validation loss at the end of each epoch. */
  epochValLoss: IPoint[];
  /** Every epoch's logs, for the table under the chart. */
  epochs: IEpochPoint[];
  /** Global steps where epochs ended. */
  boundaries: number[];
  /** Steps per epoch when known. */
  stepsPerEpoch: number | null;
  /** Epochs planned, when known. */
  epochsPlanned: number | null;
  /** 'step' when there were batch records, else 'epoch'. */
  xUnit: 'step' | 'epoch';
  /** Whether every rank that began has ended. */
  ended: boolean;
  /** Where the job restarted from a checkpoint after a failure (x where the new run began). */
  restarts: IRestartMark[];
}

export interface IRestartMark {
  x: number;
  attempt: number;
  reason: string;
}

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/**
 * Accumulates metric records (in order, possibly page by page) into the loss series.
 *
 * Keras reports running means within the epoch in batch logs; the loss of step k is recovered as
 * `k * mean_k - (k - 1) * mean_(k-1)`, like the notebook live view does. When a step is missing the running mean is
 * used as it is.
 */
export class LossSeriesBuilder {
  constructor(
    readonly key = 'loss',
    readonly smoothing = 0.9
  ) {}

  /** Adds records; returns whether anything plotted changed. */
  add(records: ReadonlyArray<IMetricRecord>): boolean {
    let changed = false;
    for (const record of records) {
      switch (record.kind) {
        case 'begin':
          this._begin(record);
          break;
        case 'batch':
          changed = this._batch(record) || changed;
          break;
        case 'epoch':
          changed = this._epoch(record) || changed;
          break;
        case 'end':
          if (finite(record.rank)) {
            this._ended.add(record.rank);
          }
          changed = true;
          break;
        case 'restart':
          // The next run begins at its checkpoint's epoch; its 'begin' record says which.
          this._pendingRestart = {
            attempt: finite(record.attempt) ? record.attempt : this._restarts.length + 1,
            reason: typeof record.reason === 'string' ? record.reason : ''
          };
          this._ended.clear();
          changed = true;
          break;
        default:
          break;
      }
    }
    return changed;
  }

  get series(): ILossSeries {
    return {
      step: this._step,
      smooth: this._smooth,
      epochLoss: this._epochLoss,
      epochValLoss: this._epochVal,
      epochs: this._epochs,
      boundaries: this._boundaries,
      stepsPerEpoch: this._stepsPerEpoch,
      epochsPlanned: this._epochsPlanned,
      xUnit: this._batches > 0 ? 'step' : 'epoch',
      ended: this._began.size > 0 && [...this._began].every(r => this._ended.has(r)),
      restarts: this._restarts
    };
  }

  private _begin(record: IMetricRecord): void {
    if (finite(record.rank)) {
      this._began.add(record.rank);
    }
    if (finite(record.steps) && record.steps > 0) {
      this._stepsPerEpoch = record.steps;
    }
    if (this._pendingRestart !== null) {
      this._resumeAt(finite(record.initial_epoch) ? record.initial_epoch : 0);
    }
    if (finite(record.epochs) && record.epochs > 0) {
      this._epochsPlanned = record.epochs;
    }
  }

  /** Forget what was drawn after the checkpoint the restarted run resumes from: it is trained again. */
  private _resumeAt(epoch: number): void {
    const kept = this._epochs.filter(e => e.epoch < epoch);
    const cut =
      this._stepsPerEpoch !== null && this._batches > 0
        ? epoch * this._stepsPerEpoch
        : kept.length
          ? kept[kept.length - 1].x
          : 0;
    const before = (p: IPoint): boolean => p.x <= cut;
    this._epochs = kept;
    this._boundaries = this._boundaries.filter(b => b <= cut);
    this._step = this._step.filter(before);
    this._smooth = this._smooth.filter(before);
    this._epochLoss = this._epochLoss.filter(before);
    this._epochVal = this._epochVal.filter(before);
    this._ema = this._smooth.length ? this._smooth[this._smooth.length - 1].y : null;
    this._prevEpoch = this._prevStep = this._prevMean = null;
    this._lastX = cut;
    this._restarts.push({ x: cut, ...this._pendingRestart! });
    this._pendingRestart = null;
  }

  private _x(epoch: number, step: number): number {
    if (this._stepsPerEpoch !== null) {
      return epoch * this._stepsPerEpoch + step;
    }
    return this._batches;
  }

  private _batch(record: IMetricRecord): boolean {
    const epoch = finite(record.epoch) ? record.epoch : 0;
    const step = finite(record.step) ? record.step : 0;
    if (finite(record.steps) && record.steps > 0) {
      this._stepsPerEpoch = record.steps;
    }
    this._batches += 1;
    const mean = record.logs?.[this.key];
    const consecutive = this._prevEpoch === epoch && this._prevStep === step - 1;
    const prevMean = this._prevMean;
    this._prevEpoch = epoch;
    this._prevStep = step;
    this._prevMean = finite(mean) ? mean : null;
    if (!finite(mean)) {
      return false;
    }
    let value = mean;
    if (step > 1 && consecutive && prevMean !== null) {
      value = step * mean - (step - 1) * prevMean;
    }
    const x = this._x(epoch, step);
    this._step.push({ x, y: value });
    this._ema =
      this._ema === null ? value : this.smoothing * this._ema + (1 - this.smoothing) * value;
    this._smooth.push({ x, y: this._ema });
    this._lastX = x;
    return true;
  }

  private _epoch(record: IMetricRecord): boolean {
    const epoch = finite(record.epoch) ? record.epoch : this._epochs.length;
    let x: number;
    if (this._batches === 0) {
      x = epoch + 1;
    } else if (this._stepsPerEpoch !== null) {
      x = (epoch + 1) * this._stepsPerEpoch;
    } else {
      x = this._lastX;
    }
    const logs: { [key: string]: number } = {};
    for (const [k, v] of Object.entries(record.logs ?? {})) {
      if (finite(v)) {
        logs[k] = v;
      }
    }
    this._epochs.push({ epoch, x, logs });
    this._boundaries.push(x);
    const loss = logs[this.key];
    if (finite(loss)) {
      this._epochLoss.push({ x, y: loss });
    }
    const val = logs[`val_${this.key}`];
    if (finite(val)) {
      this._epochVal.push({ x, y: val });
    }
    return true;
  }

  private _step: IPoint[] = [];
  private _smooth: IPoint[] = [];
  private _epochLoss: IPoint[] = [];
  private _epochVal: IPoint[] = [];
  private _epochs: IEpochPoint[] = [];
  private _boundaries: number[] = [];
  private _stepsPerEpoch: number | null = null;
  private _epochsPlanned: number | null = null;
  private _batches = 0;
  private _lastX = 0;
  private _prevEpoch: number | null = null;
  private _prevStep: number | null = null;
  private _prevMean: number | null = null;
  private _ema: number | null = null;
  private _began = new Set<number>();
  private _ended = new Set<number>();
  private _restarts: IRestartMark[] = [];
  private _pendingRestart: { attempt: number; reason: string } | null = null;
}

/**
 * About `count` round tick values (1, 2 or 5 times a power of ten) covering [min, max].
 */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!finite(min) || !finite(max)) {
    return [];
  }
  if (min > max) {
    [min, max] = [max, min];
  }
  if (min === max) {
    return [min];
  }
  const raw = (max - min) / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const fraction = raw / power;
  // Rounded to the nearest of 1, 2, 5, 10 (geometrically), as d3 does.
  const nice =
    fraction >= Math.sqrt(50) ? 10 : fraction >= Math.sqrt(10) ? 5 : fraction >= Math.SQRT2 ? 2 : 1;
  const step = nice * power;
  const start = Math.ceil(min / step - 1e-9) * step;
  const ticks: number[] = [];
  for (let v = start; v <= max + step * 1e-9; v += step) {
    // Strip floating point noise such as 0.30000000000000004.
    ticks.push(Number(v.toPrecision(12)));
  }
  return ticks;
}

/**
 * At most about `buckets * 2` points: each bucket of consecutive points keeps its lowest and highest, so spikes
 * survive downsampling.
 */
export function downsample(points: ReadonlyArray<IPoint>, buckets: number): IPoint[] {
  if (buckets <= 0 || points.length <= buckets * 2) {
    return points.slice();
  }
  const size = points.length / buckets;
  const out: IPoint[] = [];
  for (let b = 0; b < buckets; b++) {
    const from = Math.floor(b * size);
    const to = Math.min(points.length, Math.floor((b + 1) * size));
    if (from >= to) {
      continue;
    }
    let lo = points[from];
    let hi = points[from];
    for (let i = from + 1; i < to; i++) {
      if (points[i].y < lo.y) {
        lo = points[i];
      }
      if (points[i].y > hi.y) {
        hi = points[i];
      }
    }
    if (lo === hi) {
      out.push(lo);
    } else if (lo.x <= hi.x) {
      out.push(lo, hi);
    } else {
      out.push(hi, lo);
    }
  }
  return out;
}

/** Escapes text for SVG/HTML markup. */
export function escapeXml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** A short tick label. */
export function tickLabel(value: number): string {
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e5)) {
    return value.toExponential(1);
  }
  return String(Number(value.toPrecision(6)));
}

export const r2 = (v: number): number => Math.round(v * 100) / 100;  // SVG coordinates to 2 decimals

/** An SVG path through `points` in chart coordinates. */
/** Horizontal gridlines at `ticks` (plot coordinates from `sy`) and their labels right-aligned at `labelX`:
 * the grid and y-tick groups the resource and compare charts share. */
export function yGridAndTicks(
  ticks: ReadonlyArray<number>,
  sy: (y: number) => number,
  left: number,
  width: number,
  labelX: number
): string[] {
  const parts = ['<g class="jp-dl-chart-grid">'];
  for (const t of ticks) {
    parts.push(`<line x1="${left}" x2="${left + width}" y1="${r2(sy(t))}" y2="${r2(sy(t))}"/>`);
  }
  parts.push('</g><g class="jp-dl-chart-ticks">');
  for (const t of ticks) {
    parts.push(
      `<text x="${labelX}" y="${r2(sy(t))}" text-anchor="end" dominant-baseline="middle">${escapeXml(tickLabel(t))}</text>`
    );
  }
  return parts;
}

export function linePath(
  points: ReadonlyArray<IPoint>,
  sx: (x: number) => number,
  sy: (y: number) => number
): string {
  let d = '';
  let penDown = false;
  for (const p of points) {
    const X = sx(p.x);
    const Y = sy(p.y);
    if (!finite(X) || !finite(Y)) {
      penDown = false;
      continue;
    }
    d += `${penDown ? 'L' : 'M'}${r2(X)} ${r2(Y)}`;
    penDown = true;
  }
  return d;
}

export interface IChartOptions {
  width: number;
  height: number;
  /** Logarithmic loss axis (only used when every value is positive). */
  logY?: boolean;
  /** Draw the raw per-step loss beside its moving average. */
  showRaw?: boolean;
}

/**
 * The loss chart as SVG markup: per-step loss (raw and smoothed), per-epoch loss and val_loss with markers,
 * dotted epoch boundaries, axes with round ticks and a legend. Returns a placeholder text when there is no data.
 */
export function lossChartSvg(series: ILossSeries, options: IChartOptions): string {
  const width = Math.max(120, Math.floor(options.width));
  const height = Math.max(100, Math.floor(options.height));
  const open = `<svg xmlns="http://www.w3.org/2000/svg" class="jp-dl-chart" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="Loss per step and per epoch">`;
  const all = [...series.step, ...series.epochLoss, ...series.epochValLoss];
  if (all.length === 0) {
    return (
      open +
      `<text class="jp-dl-chart-placeholder" x="${width / 2}" y="${height / 2}" text-anchor="middle">No loss reported yet</text></svg>`
    );
  }
  const margin = { left: 56, right: 16, top: 28, bottom: 36 };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;

  let xmin = Infinity;
  let xmax = -Infinity;
  let ymin = Infinity;
  let ymax = -Infinity;
  for (const p of all) {
    xmin = Math.min(xmin, p.x);
    xmax = Math.max(xmax, p.x);
    ymin = Math.min(ymin, p.y);
    ymax = Math.max(ymax, p.y);
  }
  if (series.xUnit === 'step') {
    xmin = Math.min(xmin, 0);
  } else {
    xmin = Math.min(xmin, 1);
  }
  if (xmax === xmin) {
    xmax = xmin + 1;
  }
  const logY = !!options.logY && ymin > 0;
  const ty = (v: number): number => (logY ? Math.log10(v) : v);
  let lo = ty(ymin);
  let hi = ty(ymax);
  if (hi === lo) {
    const padY = Math.abs(lo) * 0.1 || 1;
    lo -= padY;
    hi += padY;
  } else {
    const padY = (hi - lo) * 0.05;
    hi += padY;
    if (!logY && ymin >= 0) {
      lo = Math.max(0, lo - padY);
    } else {
      lo -= padY;
    }
  }
  const sx = (x: number): number => margin.left + ((x - xmin) / (xmax - xmin)) * plotW;
  const sy = (y: number): number => margin.top + (1 - (ty(y) - lo) / (hi - lo)) * plotH;

  const parts: string[] = [open];
  // Grid and y ticks.
  const yTicks = logY
    ? niceTicks(lo, hi, 4).filter(t => Number.isInteger(t)).map(t => Math.pow(10, t))
    : niceTicks(lo, hi, 5);
  const yTickValues = yTicks.length ? yTicks : logY ? [Math.pow(10, lo)] : [lo];
  parts.push('<g class="jp-dl-chart-grid">');
  for (const t of yTickValues) {
    const y = r2(sy(t));
    parts.push(
      `<line x1="${margin.left}" x2="${margin.left + plotW}" y1="${y}" y2="${y}"/>`
    );
  }
  parts.push('</g>');
  // Epoch boundaries.
  if (series.xUnit === 'step' && series.boundaries.length) {
    parts.push('<g class="jp-dl-chart-epochs">');
    for (const b of series.boundaries) {
      const x = r2(sx(b));
      parts.push(`<line x1="${x}" x2="${x}" y1="${margin.top}" y2="${margin.top + plotH}"/>`);
    }
    parts.push('</g>');
  }
  // Restarts: where each restarted run resumed from its checkpoint.
  if (series.restarts.length) {
    parts.push('<g class="jp-dl-chart-restarts">');
    for (const r of series.restarts) {
      const x = r2(sx(r.x));
      parts.push(
        `<line x1="${x}" x2="${x}" y1="${margin.top}" y2="${margin.top + plotH}"><title>${escapeXml(r.reason)}</title></line>` +
          `<text x="${x + 3}" y="${margin.top + 10}">${escapeXml(`restart ${r.attempt}`)}</text>`
      );
    }
    parts.push('</g>');
  }
  // Axes.
  parts.push(
    `<g class="jp-dl-chart-axis"><line x1="${margin.left}" x2="${margin.left}" y1="${margin.top}" y2="${margin.top + plotH}"/>` +
      `<line x1="${margin.left}" x2="${margin.left + plotW}" y1="${margin.top + plotH}" y2="${margin.top + plotH}"/></g>`
  );
  parts.push('<g class="jp-dl-chart-ticks">');
  for (const t of yTickValues) {
    parts.push(
      `<text x="${margin.left - 6}" y="${r2(sy(t))}" text-anchor="end" dominant-baseline="middle">${escapeXml(tickLabel(t))}</text>`
    );
  }
  const xTicks = niceTicks(xmin, xmax, Math.max(2, Math.floor(plotW / 80))).filter(
    t => series.xUnit === 'step' || Number.isInteger(t)
  );
  for (const t of xTicks) {
    parts.push(
      `<text x="${r2(sx(t))}" y="${margin.top + plotH + 16}" text-anchor="middle">${escapeXml(tickLabel(t))}</text>`
    );
  }
  parts.push(
    `<text class="jp-dl-chart-xlabel" x="${r2(margin.left + plotW / 2)}" y="${height - 2}" text-anchor="middle">${series.xUnit}</text>`
  );
  parts.push('</g>');
  // Series.
  const budget = Math.max(50, Math.floor(plotW));
  if (series.step.length) {
    if (options.showRaw !== false) {
      parts.push(
        `<path class="jp-dl-chart-step" d="${linePath(downsample(series.step, budget), sx, sy)}"/>`
      );
    }
    parts.push(
      `<path class="jp-dl-chart-smooth" d="${linePath(downsample(series.smooth, budget), sx, sy)}"/>`
    );
  }
  const markers = (points: IPoint[], cls: string): void => {
    if (!points.length) {
      return;
    }
    parts.push(`<path class="${cls}" d="${linePath(points, sx, sy)}"/>`);
    parts.push(`<g class="${cls}-markers">`);
    for (const p of points) {
      parts.push(
        `<circle cx="${r2(sx(p.x))}" cy="${r2(sy(p.y))}" r="3"><title>${escapeXml(tickLabel(p.y))}</title></circle>`
      );
    }
    parts.push('</g>');
  };
  markers(series.epochLoss, 'jp-dl-chart-epoch-loss');
  markers(series.epochValLoss, 'jp-dl-chart-epoch-val');
  // Legend.
  const legend: Array<[string, string]> = [];
  if (series.step.length) {
    if (options.showRaw !== false) {
      legend.push(['jp-dl-chart-step', 'loss per step']);
    }
    legend.push(['jp-dl-chart-smooth', 'smoothed']);
  }
  if (series.epochLoss.length) {
    legend.push(['jp-dl-chart-epoch-loss', 'epoch loss']);
  }
  if (series.epochValLoss.length) {
    legend.push(['jp-dl-chart-epoch-val', 'epoch val_loss']);
  }
  parts.push('<g class="jp-dl-chart-legend">');
  let lx = margin.left;
  for (const [cls, label] of legend) {
    parts.push(
      `<line class="${cls}" x1="${lx}" x2="${lx + 16}" y1="12" y2="12"/>` +
        `<text x="${lx + 20}" y="12" dominant-baseline="middle">${escapeXml(label)}</text>`
    );
    lx += 36 + label.length * 7;
  }
  parts.push('</g></svg>');
  return parts.join('');
}
