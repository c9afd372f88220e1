/**
 * Formatting for the jobs panel. Pure: no JupyterLab imports.
 */
import { ACTIVE_STATES, FINAL_STATES, IJob, JOB_STATES } from './model';

function finite(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

const pad2 = (n: number): string => (n < 10 ? `0${n}` : `${n}`);

/**
 * A short duration: `42s`, `3m 05s`, `1h 02m`, `2d 03h`; `—` when unknown or negative.
 */
export function formatDuration(seconds: number | null | undefined): string {
  if (!finite(seconds) || seconds < 0) {
    return '—';
  }
  const s = Math.floor(seconds);
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m ${pad2(s % 60)}s`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)}h ${pad2(Math.floor((s % 3600) / 60))}m`;
  }
  return `${Math.floor(s / 86400)}d ${pad2(Math.floor((s % 86400) / 3600))}h`;
}

/**
 * `ETA 3m 05s` for a job that is still going and has an estimate, else ''.
 */
export function formatEta(etaSeconds: number | null | undefined, state: string): string {
  if (!isActive(state) || !finite(etaSeconds) || etaSeconds < 0) {
    return '';
  }
  return `ETA ${formatDuration(etaSeconds)}`;
}

/** Whether the job can still be cancelled (queued, starting or running). */
export function isActive(state: string): boolean {
  return (ACTIVE_STATES as readonly string[]).includes(state);
}

/** Whether the job has ended (succeeded, failed, cancelled or lost). */
export function isFinal(state: string): boolean {
  return (FINAL_STATES as readonly string[]).includes(state);
}

/**
 * The CSS classes of a state badge: `jp-dl-badge jp-dl-state-<state>`; unknown states get `jp-dl-state-unknown`.
 */
export function stateBadgeClass(state: string): string {
  const known = (JOB_STATES as readonly string[]).includes(state);
  return `jp-dl-badge jp-dl-state-${known ? state : 'unknown'}`;
}

/** A fraction clamped to 0..1, or null when unknown. */
export function clampFraction(fraction: number | null | undefined): number | null {
  if (!finite(fraction)) {
    return null;
  }
  return Math.min(1, Math.max(0, fraction));
}

/**
 * `5.7%` below 10% (so a 5.7% bar does not read 5%), whole percents above, `100%` only when complete; '' when
 * unknown.
 */
export function formatPercent(fraction: number | null | undefined): string {
  const f = clampFraction(fraction);
  if (f === null) {
    return '';
  }
  const percent = f * 100;
  if (percent < 10) {
    return `${percent.toFixed(1)}%`;
  }
  return f >= 1 ? '100%' : `${Math.min(99, Math.round(percent))}%`;
}

/**
 * When a job started, short: `14:03:12` today, `Mon 14:03` within a week, else the date and time. Three runs of
 * one cell differ by it.
 */
export function formatStartTime(unixSeconds: number | null | undefined, now: Date = new Date()): string {
  if (!finite(unixSeconds)) {
    return '';
  }
  const at = new Date(unixSeconds * 1000);
  const time = `${pad2(at.getHours())}:${pad2(at.getMinutes())}`;
  if (at.toDateString() === now.toDateString()) {
    return `${time}:${pad2(at.getSeconds())}`;
  }
  if (Math.abs(now.getTime() - at.getTime()) < 6 * 86400 * 1000) {
    return `${at.toLocaleDateString(undefined, { weekday: 'short' })} ${time}`;
  }
  return `${at.toLocaleDateString()} ${time}`;
}

/** When the job started (entered `starting`), else when it was created. */
export function startedAt(job: Pick<IJob, 'created' | 'timestamps'>): number | null {
  const t = job.timestamps?.starting ?? job.created;
  return finite(t) ? t : null;
}

/**
 * The final metrics of a finished job, the loss first: `loss 0.0123 · accuracy 0.97`, at most `limit` of them;
 * '' when none were recorded.
 */
export function formatFinalMetrics(metrics: { [name: string]: number } | null | undefined, limit = 2): string {
  if (!metrics) {
    return '';
  }
  const names = Object.keys(metrics).filter(name => finite(metrics[name]));
  const rank = (name: string): number => (name === 'loss' ? 0 : name.startsWith('val_') ? 2 : 1);
  names.sort((a, b) => rank(a) - rank(b));
  return names
    .slice(0, limit)
    .map(name => `${name} ${formatMetric(metrics[name])}`)
    .join(' · ');
}

/**
 * A main-area tab's title: `Loss: name · 14:03:12`. Two jobs may share a name (runs of one cell); their start
 * times tell the tabs apart.
 */
export function tabTitle(kind: string, job: Pick<IJob, 'id' | 'name' | 'created' | 'timestamps'>): string {
  const started = formatStartTime(startedAt(job));
  return `${kind}: ${job.name || job.id}${started ? ` · ${started}` : ''}`;
}

/**
 * `2 ranks · 2 GPUs` (GPUs left out when none were assigned); an elastic job whose group changed: `2→4 ranks`,
 * its groups' sizes in order.
 */
export function formatRanks(job: Pick<IJob, 'n' | 'gpus' | 'restarts' | 'membership'>): string {
  const n = finite(job.n) ? job.n : 0;
  const sizes = (job.membership ?? []).map(change => change.n);
  let text = sizes.length > 1 ? `${sizes.join('→')} ranks` : `${n} ${n === 1 ? 'rank' : 'ranks'}`;
  const gpus = job.gpus?.length ?? 0;
  if (gpus > 0) {
    text += ` · ${gpus} ${gpus === 1 ? 'GPU' : 'GPUs'}`;
  }
  const restarts = job.restarts?.length ?? 0;
  if (restarts > 0) {
    text += ` · restarted ${restarts}×`;
  }
  return text;
}

/**
 * `epoch 3/10 · step 40/100`, as much as is known; '' when nothing is. `progress.epoch` is one-based as the server
 * reports it (the epoch in progress), 0 before the first batch.
 */
export function formatEpochStep(progress: IJob['progress']): string {
  if (!progress) {
    return '';
  }
  const parts: string[] = [];
  if (finite(progress.epoch) && progress.epoch > 0) {
    const epochs = finite(progress.epochs) ? `/${progress.epochs}` : '';
    parts.push(`epoch ${progress.epoch}${epochs}`);
  }
  if (finite(progress.step) && progress.step > 0) {
    const steps = finite(progress.steps) ? `/${progress.steps}` : '';
    parts.push(`step ${progress.step}${steps}`);
  }
  return parts.join(' · ');
}

/** What the panel's samples/s is (the same figure as the cell's live label; the summary's is the average). */
export const RATE_HELP =
  'Samples per second over the last 3 s, all ranks together. The summary in the cell gives the average over ' +
  'the whole fit.';

/** `1.2k samples/s`; '' when unknown. */
export function formatRate(samplesPerSecond: number | null | undefined): string {
  if (!finite(samplesPerSecond) || samplesPerSecond < 0) {
    return '';
  }
  let value: string;
  if (samplesPerSecond >= 1e6) {
    value = `${(samplesPerSecond / 1e6).toFixed(1)}M`;
  } else if (samplesPerSecond >= 1e3) {
    value = `${(samplesPerSecond / 1e3).toFixed(1)}k`;
  } else if (samplesPerSecond >= 10) {
    value = `${Math.round(samplesPerSecond)}`;
  } else {
    value = samplesPerSecond.toFixed(1);
  }
  return `${value} samples/s`;
}

/** Megabytes as `812 MiB` or `10.2 GiB`; '?' when unknown. */
export function formatMemory(mb: number | null | undefined): string {
  if (!finite(mb) || mb < 0) {
    return '?';
  }
  if (mb >= 1024) {
    return `${(mb / 1024).toFixed(1)} GiB`;
  }
  return `${Math.round(mb)} MiB`;
}

/** A metric value for tables: four significant digits, exponent for very small or large values. */
export function formatMetric(value: number | null | undefined): string {
  if (!finite(value)) {
    return '—';
  }
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e5)) {
    return value.toExponential(2);
  }
  return String(Number(value.toPrecision(4)));
}

/** The last path component of a notebook path (`a/b/train.ipynb` -> `train.ipynb`). */
export function basename(path: string | null | undefined): string {
  if (!path) {
    return '';
  }
  const parts = path.split('/').filter(p => p.length > 0);
  return parts.length ? parts[parts.length - 1] : '';
}

/** A local date and time for unix seconds; '' when unknown. */
export function formatTimestamp(unixSeconds: number | null | undefined): string {
  if (!finite(unixSeconds)) {
    return '';
  }
  return new Date(unixSeconds * 1000).toLocaleString();
}

/** `position 2 in the GPU queue` for a job waiting in the pool; '' otherwise. */
export function formatQueue(job: Pick<IJob, 'state' | 'progress'>): string {
  const position = job.progress?.queue_position;
  if (job.state !== 'queued' || !finite(position)) {
    return '';
  }
  return `position ${position} in the GPU queue`;
}

/** The first characters of a job id, enough to tell runs of one cell apart: `3f2a1b`. */
export function shortJobId(id: string, length = 6): string {
  return id.slice(0, length);
}

/**
 * How the cluster section names where engines run: `host vm` for a machine, a scheduler's allocation as it is
 * (`slurm allocation`).
 */
export function hostLabel(host: string): string {
  return host.endsWith(' allocation') ? host : `host ${host}`;
}
