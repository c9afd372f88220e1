/**
 * A steady ETA for the panel. Pure: no JupyterLab imports.
 *
 * The server's estimate is remaining steps over the last few seconds' speed, so it jumps with every slow or fast
 * stretch (5m18 -> 7m29 -> 8m32 -> 4m00 within 8 s). Shown instead: the previous value counted down with the
 * clock, moved toward each new estimate by a share that grows with the time since the last one.
 */
export const ETA_TIME_CONSTANT_S = 10;

export class EtaSmoother {
  constructor(readonly timeConstant = ETA_TIME_CONSTANT_S) {}

  /** The ETA to show for `key` given its newest raw estimate at `nowS` (seconds); null when unknown. */
  update(key: string, estimate: number | null | undefined, nowS: number): number | null {
    const finite = typeof estimate === 'number' && Number.isFinite(estimate) && estimate >= 0;
    const last = this._last.get(key);
    if (!finite) {
      this._last.delete(key);
      return null;
    }
    if (!last || estimate === 0) {
      this._last.set(key, { value: estimate, at: nowS });
      return estimate;
    }
    const elapsed = Math.max(0, nowS - last.at);
    const countedDown = Math.max(0, last.value - elapsed);
    const weight = this.timeConstant > 0 ? 1 - Math.exp(-elapsed / this.timeConstant) : 1;
    const value = countedDown + weight * (estimate - countedDown);
    this._last.set(key, { value, at: nowS });
    return value;
  }

  /** Forgets jobs that are no longer listed. */
  retain(keys: Iterable<string>): void {
    const keep = new Set(keys);
    for (const key of [...this._last.keys()]) {
      if (!keep.has(key)) {
        this._last.delete(key);
      }
    }
  }

  private _last = new Map<string, { value: number; at: number }>();
}
