/**
 * Shapes of the jupyter-dl REST API (served by the jupyter_server extension).
 *
 * Types only: no JupyterLab imports, so the pure helpers and their unit tests can use them.
 */

/** Every state a job can be in; the last four are final. */
export type JobState =
  | 'queued'
  | 'starting'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'cancelled'
  | 'lost';

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

/**
 * Every kind of metric record the kernel and ranks write; the same list as jupyter_dl/data/metric_kinds.json
 * (test/metricKinds.test.ts checks they agree).
 */
export const METRIC_KINDS = [
  'begin',
  'batch',
  'epoch',
  'throughput',
  'end',
  'resources',
  'stall',
  'restart'
] as const;

export type MetricKind = (typeof METRIC_KINDS)[number];

/** One record of `GET jupyter-dl/api/jobs/{id}/metrics`. */
export interface IMetricRecord {
  kind: MetricKind;
  t?: number;
  rank?: number;
  /** Zero-based epoch index (batch, epoch, throughput). */
  epoch?: number;
  /** One-based step within the epoch (batch). */
  step?: number;
  /** Steps per epoch when known (begin, batch). */
  steps?: number | null;
  /** Epochs (begin). */
  epochs?: number | null;
  /** batch: Keras running means within the epoch; epoch: the epoch's logs. */
  logs?: { [key: string]: number };
  [key: string]: unknown;
}

export interface IMetricsPage {
  records: IMetricRecord[];
  /** The `since` to ask for next time. */
  next: number;
  /** The page stopped at the `limit` asked for: more records are written already. */
  more?: boolean;
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
}
