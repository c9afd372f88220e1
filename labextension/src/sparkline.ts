/**
 * The inline loss sparkline. Pure: no JupyterLab imports.
 */

const round = (v: number): number => Math.round(v * 100) / 100;

/** Positive values spanning more than this ratio are drawn on a log scale. */
export const LOG_SCALE_RATIO = 4;

/**
 * Where a value goes on the sparkline's vertical scale: its logarithm when every value is positive and they span
 * more than LOG_SCALE_RATIO (a loss falls fast and then slowly: on a linear scale everything after the first drop
 * is flat), else itself.
 */
export function sparklineScale(values: ReadonlyArray<number>): (v: number) => number {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  return min > 0 && max / min > LOG_SCALE_RATIO ? Math.log : (v: number) => v;
}

/**
 * An SVG path (`d` attribute) drawing `values` left to right inside a `width` x `height` box with `pad` pixels of
 * margin, larger values higher up (on sparklineScale). Non-finite values leave a gap. A single value, or a flat
 * series, draws a horizontal line through the middle. Returns '' when there is nothing to draw.
 */
export function sparklinePath(
  values: ReadonlyArray<number | null | undefined> | null | undefined,
  width: number,
  height: number,
  pad = 1
): string {
  if (!values || values.length === 0 || !(width > 0) || !(height > 0)) {
    return '';
  }
  const good = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  if (good.length === 0) {
    return '';
  }
  const scale = sparklineScale(good);
  let min = Infinity;
  let max = -Infinity;
  for (const v of good) {
    min = Math.min(min, scale(v));
    max = Math.max(max, scale(v));
  }
  const innerW = Math.max(0, width - 2 * pad);
  const innerH = Math.max(0, height - 2 * pad);
  const y = (v: number): number => (max === min ? pad + innerH / 2 : pad + ((max - scale(v)) / (max - min)) * innerH);

  if (values.length === 1) {
    const yy = round(y(good[0]));
    return `M${round(pad)} ${yy}L${round(pad + innerW)} ${yy}`;
  }
  const step = innerW / (values.length - 1);
  let d = '';
  let penDown = false;
  values.forEach((v, i) => {
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      penDown = false;
      return;
    }
    d += `${penDown ? 'L' : 'M'}${round(pad + i * step)} ${round(y(v))}`;
    penDown = true;
  });
  return d;
}

/** The last finite value of `values`, or null. */
export function lastValue(values: ReadonlyArray<number | null | undefined> | null | undefined): number | null {
  if (!values) {
    return null;
  }
  for (let i = values.length - 1; i >= 0; i--) {
    const v = values[i];
    if (typeof v === 'number' && Number.isFinite(v)) {
      return v;
    }
  }
  return null;
}
