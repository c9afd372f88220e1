/**
 * Shapes of the jupyter-dl REST API (served by the jupyter_server extension).
 *
 * Types only: no JupyterLab imports, so the pure helpers and their unit tests can use them.
 */

/** Every state a job can be in; the last four are final. */
export type JobState = 'queued' | 'starting' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'lost';

export const JOB_STATES: readonly JobState[] = [
  'queued',
  'starting',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'lost'
];

export const ACTIVE_STATES: readonly JobState[] = ['queued', 'starting', 'running'];

export const FINAL_STATES: readonly JobState[] = ['succeeded', 'failed', 'cancelled', 'lost'];

/** Live progress of a job; any field may be missing or null before training reports. */
export interface IJobProgress {
  fraction?: number | null;
  /** One-based epoch in progress; 0 before the first batch. */
  epoch?: number | null;
  epochs?: number | null;
  step?: number | null;
  steps?: number | null;
  samples_per_s?: number | null;
  eta_s?: number | null;
  global_step?: number | null;
  total_steps?: number | null;
  /** Unix seconds of the last progress update. */
  updated?: number | null;
  /** Recent loss values, at most 60. */
  sparkline?: number[] | null;
  /** While queued for GPUs in the pool: the place in the queue (1 = next) and why it waits. */
  queue_position?: number | null;
  reason?: string | null;
}

/** One distributed run, as `GET jupyter-dl/api/jobs` lists it. */
export interface IJob {
  id: string;
  name: string;
  user?: string;
  /**
   * The notebook's path relative to the server root (what `docmanager:open` takes), or null when the job was not
   * started from a notebook or its notebook lies outside the server root.
   */
  notebook?: string | null;
  /** The notebook's file as the kernel recorded it (absolute); set whenever the job came from a notebook. */
  notebook_file?: string | null;
  kernel_id?: string | null;
  state: JobState | string;
  /** Unix seconds. */
  created: number;
  /** State -> unix seconds when it was entered. */
  timestamps?: { [state: string]: number };
  /** Number of ranks. */
  n: number;
  hosts?: string[];
  gpus?: Array<string | number>;
  options?: { [key: string]: unknown };
  error?: string | null;
  /** Seconds. */
  elapsed?: number | null;
  progress?: IJobProgress | null;
  /** One entry per restart after a failure (--restarts). */
  restarts?: Array<{ attempt: number; reason: string; t: number }>;
  /** An elastic job (-n MIN:MAX): one entry per group, the first ("started") included, with why it changed. */
  membership?: Array<{ n: number; reason: string; t: number }>;
  /** A succeeded job: the names of the models it kept (`jupyter_dl.load_job(id).models`); others: absent. */
  models?: string[];
  /** A finished job's last epoch logs (rank 0), when it reported any. */
  final_metrics?: { [name: string]: number } | null;
}

export interface IJobList {
  jobs: IJob[];
}

/** `DELETE jupyter-dl/api/jobs/{id}` reply. */
export interface ICancelReply {
  id: string;
  state: string;
}

export type LogStream = 'stdout' | 'stderr';

export interface ILogsReply {
  rank: number;
  ranks: number[];
  stream: LogStream | string;
  text: string;
}

export interface ICluster {
  cluster_id: string;
  profile: string;
  engines: number;
  running: boolean;
  /** Engine count per host ('slurm allocation' and the like where a scheduler places them). */
  engines_by_host?: { [host: string]: number };
  /** The kernel that started it (jupyter-dl clusters) and its notebook, relative to the server root. */
  owner?: { kernel_pid: number; notebook: string | null } | null;
}

export interface IGpu {
  index: number;
  name: string;
  /** Percent, 0..100. */
  utilization?: number | null;
  memory_used_mb?: number | null;
  memory_total_mb?: number | null;
}

export interface IClusterInfo {
  clusters: ICluster[];
  gpus: IGpu[];
}

/** The error body the server sends with a non-2xx status. */
export interface IErrorBody {
  code: string;
  message: string;
}

/** A plotly figure as plotly.py writes it (`Figure.to_plotly_json`): drawn by JupyterLab's plotly mime renderer. */
export interface IPlotlyFigure {
  data: Array<{ name?: string; visible?: boolean | 'legendonly'; [key: string]: unknown }>;
  layout: { [key: string]: any };
  config?: { [key: string]: unknown };
}

/** One row of the loss tab's epoch table: the epoch's logs (rank 0). */
export interface IEpochRow {
  /** Zero-based epoch index. */
  epoch: number;
  logs: { [key: string]: number };
}

/**
 * `GET jupyter-dl/api/jobs/{id}/figures?theme=&version=` (jupyter_dl/live/job_figures.py): the cell's loss and
 * resources figures, the last epochs' logs and the status line's numbers; only `{version, unchanged: true}` when
 * nothing changed since the version asked with.
 */
export interface IJobFigures {
  version: string;
  unchanged?: boolean;
  loss?: IPlotlyFigure;
  /** Why there is nothing to draw (`no data: the job ended before its first step`), shown instead; else null. */
  note?: string | null;
  /** Null until a rank's CPU and memory samples draw a line. */
  resources?: IPlotlyFigure | null;
  /** Oldest first, at most the last 50. */
  epochs?: IEpochRow[];
  status?: {
    state: string;
    epochs_done: number;
    epochs: number | null;
    /** Optimizer steps so far (global). */
    steps: number;
    /** Restarts after a failure (--restarts). */
    restarts: number;
    /** An elastic job's group sizes in order (empty for a fixed-size job; absent from older servers). */
    ranks?: number[];
  };
}

export type Theme = 'light' | 'dark';

export type CompareAxis = 'step' | 'epoch' | 'time';

/** `GET jupyter-dl/api/compare?ids=a,b&x=step` (jupyter_dl/comparison.py `compare_jobs`). */
export interface ICompareReply {
  x: CompareAxis;
  x_titles: { [axis: string]: string };
  runs: Array<{
    id: string;
    name: string;
    label: string;
    state: string;
    ranks: number;
    cell: string | null;
    elapsed: number | null;
  }>;
  /** One per run and metric; every curve carries all three x axes. */
  curves: Array<{
    run: string;
    metric: string;
    kind: 'batch' | 'epoch';
    step: number[];
    epoch: number[];
    time: number[];
    y: number[];
  }>;
  table: Array<{ section: string; name: string; values: unknown[]; text: string[] }>;
  /** The figure `%dl_compare` draws of these curves, against `x`. */
  figure: IPlotlyFigure;
}
