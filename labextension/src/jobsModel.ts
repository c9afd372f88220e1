/**
 * The jobs list and cluster state, polled from the server while someone looks at them.
 */
import { IStateDB } from '@jupyterlab/statedb';
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { JobsApi, errorMessage } from './api';
import { isFinal } from './format';
import { IClusterInfo, IJob } from './model';

export const DEFAULT_POLL_INTERVAL = 2000;
export const MIN_POLL_INTERVAL = 500;
/** Longest wait between polls while the server keeps failing. */
export const MAX_BACKOFF = 30000;

export namespace JobsModel {
  export interface IOptions {
    api: JobsApi;
    /** Milliseconds between polls. */
    interval?: number;
    /** Whether anyone is looking; the poll stands by otherwise (and while the browser tab is hidden). */
    isVisible?: () => boolean;
    /** JupyterLab's state database, where the jobs cleared from the panel are kept; without it they come back on
     * reload. */
    state?: IStateDB | null;
  }
}

export class JobsModel implements IDisposable {
  constructor(options: JobsModel.IOptions) {
    this.api = options.api;
    this._isVisible = options.isVisible ?? (() => true);
    this._state = options.state ?? null;
    this._restored = this._restoreHidden();
    const interval = Math.max(MIN_POLL_INTERVAL, options.interval ?? DEFAULT_POLL_INTERVAL);
    this._poll = new Poll({
      auto: true,
      factory: () => this._fetch(),
      frequency: { interval, backoff: true, max: Math.max(MAX_BACKOFF, interval) },
      name: 'jupyter-dl:jobs',
      standby: () => (this._isVisible() ? 'when-hidden' : true)
    });
  }

  readonly api: JobsApi;

  /** Emitted after every poll, successful or not, and when local state (cancelling) changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The jobs, newest first, without those cleared from the panel. */
  get jobs(): ReadonlyArray<IJob> {
    return this._jobs.filter(job => !this._hidden.has(job.id));
  }

  /** How many listed jobs were cleared from the panel (they stay in the store, with their results). */
  get hiddenCount(): number {
    return this._jobs.filter(job => this._hidden.has(job.id)).length;
  }

  /** Clears the finished jobs from the panel; `%dl_jobs` and `jupyter_dl.load_job` still find them. */
  clearFinished(): void {
    for (const job of this._jobs) {
      if (isFinal(job.state)) {
        this._hidden.add(job.id);
      }
    }
    this._saveHidden();
    this._changed.emit();
  }

  /** Brings the cleared jobs back. */
  showCleared(): void {
    this._hidden.clear();
    this._saveHidden();
    this._changed.emit();
  }

  /** Whether a stop was requested for the cluster and it is still listed. */
  isStopping(clusterId: string): boolean {
    return this._stopping.has(clusterId);
  }

  markStopping(clusterId: string, on = true): void {
    if (on) {
      this._stopping.add(clusterId);
    } else {
      this._stopping.delete(clusterId);
    }
    this._changed.emit();
  }

  /** Whether the jobs list has been fetched at least once. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** Why the last jobs request failed, or null. */
  get error(): string | null {
    return this._error;
  }

  get cluster(): IClusterInfo | null {
    return this._cluster;
  }

  /** Why the last cluster request failed, or null. */
  get clusterError(): string | null {
    return this._clusterError;
  }

  get interval(): number {
    return this._poll.frequency.interval;
  }

  set interval(ms: number) {
    const interval = Math.max(MIN_POLL_INTERVAL, ms || DEFAULT_POLL_INTERVAL);
    this._poll.frequency = {
      ...this._poll.frequency,
      interval,
      max: Math.max(MAX_BACKOFF, interval)
    };
  }

  find(id: string): IJob | undefined {
    return this._jobs.find(job => job.id === id);
  }

  /** Whether a cancel was requested for the job and it has not ended yet. */
  isCancelling(id: string): boolean {
    return this._cancelling.has(id);
  }

  markCancelling(id: string, on = true): void {
    if (on) {
      this._cancelling.add(id);
    } else {
      this._cancelling.delete(id);
    }
    this._changed.emit();
  }

  /** Polls now (unless standing by). */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  /** Fetches now, whether or not anyone is looking, and waits for it. */
  async fetchNow(): Promise<void> {
    try {
      await this._fetch();
    } catch {
      // Already reported through `error`.
    }
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _fetch(): Promise<void> {
    await this._restored; // the first list shown already leaves the cleared jobs out
    const [jobs, cluster] = await Promise.allSettled([this.api.listJobs(), this.api.cluster()]);
    if (cluster.status === 'fulfilled') {
      this._cluster = {
        clusters: cluster.value?.clusters ?? [],
        gpus: cluster.value?.gpus ?? []
      };
      this._clusterError = null;
      const running = new Set(this._cluster.clusters.map(c => c.cluster_id));
      for (const id of [...this._stopping]) {
        if (!running.has(id)) {
          this._stopping.delete(id);
        }
      }
    } else {
      this._clusterError = errorMessage(cluster.reason);
    }
    if (jobs.status === 'fulfilled') {
      this._jobs = jobs.value;
      const listed = new Set(this._jobs.map(job => job.id));
      if ([...this._hidden].some(id => !listed.has(id))) {
        this._hidden = new Set([...this._hidden].filter(id => listed.has(id))); // pruned from the store
        this._saveHidden();
      }
      this._loaded = true;
      this._error = null;
      for (const id of [...this._cancelling]) {
        const job = this.find(id);
        if (!job || isFinal(job.state)) {
          this._cancelling.delete(id);
        }
      }
      this._changed.emit();
    } else {
      this._error = errorMessage(jobs.reason);
      this._changed.emit();
      // Rejecting makes the poll back off.
      throw jobs.reason;
    }
  }

  private _poll: Poll;
  private _isVisible: () => boolean;
  private _changed = new Signal<this, void>(this);
  private _jobs: IJob[] = [];
  private _loaded = false;
  private _error: string | null = null;
  private _cluster: IClusterInfo | null = null;
  private _clusterError: string | null = null;
  private _state: IStateDB | null;
  private _restored: Promise<void>;

  /** Reads the cleared jobs kept in the state database (never rejects: none read, none hidden). */
  private async _restoreHidden(): Promise<void> {
    if (!this._state) {
      return;
    }
    try {
      const ids = readClearedIds(await this._state.fetch(CLEARED_JOBS_KEY));
      if (ids.length) {
        this._hidden = new Set([...ids, ...this._hidden]);
        this._changed.emit();
      }
    } catch (reason) {
      console.warn('jupyter-dl: cannot read the cleared jobs', reason);
    }
  }

  private _saveHidden(): void {
    this._state?.save(CLEARED_JOBS_KEY, [...this._hidden]).catch(reason => {
      console.warn('jupyter-dl: cannot keep the cleared jobs', reason); // they come back on reload
    });
  }

  private _cancelling = new Set<string>();
  private _stopping = new Set<string>();
  private _hidden = new Set<string>();
}

/** The state database key of the ids of jobs cleared from the panel (kept in the workspace). */
export const CLEARED_JOBS_KEY = 'jupyter-dl:cleared-jobs';

/** The job ids in a value read from the state database: anything else reads as none. */
export function readClearedIds(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((id): id is string => typeof id === 'string') : [];
}
