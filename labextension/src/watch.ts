/**
 * Shared by the logs and loss plot tabs: a poll that runs while its widget is visible and stops once the job has
 * ended and one more fetch has seen its final output.
 */
import { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { Widget } from '@lumino/widgets';

import { ApiError, JobsApi, errorMessage } from './api';
import { h, setText } from './dom';
import { isFinal } from './format';
import { IJob } from './model';
import { MAX_BACKOFF, MIN_POLL_INTERVAL } from './jobsModel';

function isNotFound(error: unknown): boolean {
  return error instanceof ApiError && error.status === 404;
}

/** What a watched tab provides: its data fetch, and where job updates and errors go. */
export interface IJobView {
  readonly isVisible: boolean;
  /** Fetches the tab's data; called on every tick. */
  fetchData(): Promise<void>;
  /** The job changed (state, progress). */
  onJob(job: IJob): void;
  /** A request failed; `fatal` when the job is gone and polling stopped. */
  showError(message: string, fatal: boolean): void;
}

export class JobWatcher {
  constructor(
    readonly api: JobsApi,
    protected job: IJob,
    private readonly _view: IJobView,
    interval: number
  ) {
    const ms = Math.max(MIN_POLL_INTERVAL, interval);
    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: { interval: ms, backoff: true, max: Math.max(MAX_BACKOFF, ms) },
      name: `jupyter-dl:watch:${job.id}`,
      standby: () => (this._view.isVisible ? 'when-hidden' : true)
    });
    this._done = isFinal(job.state);
  }

  /** Starts polling (the first tick fetches at once if the widget is visible). */
  start(): void {
    void this._poll.start();
  }

  /** Fetches now, out of turn, whether or not the job has ended. */
  async fetchNow(): Promise<void> {
    try {
      await this._tick(true);
    } catch {
      // Reported through onError.
    }
  }

  set interval(ms: number) {
    const interval = Math.max(MIN_POLL_INTERVAL, ms);
    this._poll.frequency = { ...this._poll.frequency, interval, max: Math.max(MAX_BACKOFF, interval) };
  }

  get stopped(): boolean {
    return this._stopped;
  }

  dispose(): void {
    this._poll.dispose();
  }

  private async _tick(manual = false): Promise<void> {
    const wasDone = this._done;
    const [data, job] = await Promise.allSettled([
      this._view.fetchData(),
      wasDone ? Promise.resolve(null) : this.api.getJob(this.job.id)
    ]);
    if (job.status === 'fulfilled' && job.value) {
      this.job = job.value;
      this._view.onJob(job.value);
      this._done = isFinal(job.value.state);
    }
    const failure = job.status === 'rejected' ? job.reason : data.status === 'rejected' ? data.reason : null;
    if (failure !== null) {
      // Only the job itself being gone is final; a 404 for the data (say, a rank with no log yet) is not.
      let gone = job.status === 'rejected' && isNotFound(job.reason);
      if (!gone && data.status === 'rejected' && isNotFound(data.reason) && wasDone) {
        gone = await this.api.getJob(this.job.id).then(
          () => false,
          reason => isNotFound(reason)
        );
      }
      if (gone) {
        this._stop();
      }
      this._view.showError(errorMessage(failure), gone);
      throw failure;
    }
    // The job had already ended before this fetch started, so this fetch saw everything: stop polling.
    if (wasDone && !manual) {
      this._stop();
    }
  }

  private _stop(): void {
    if (!this._stopped) {
      this._stopped = true;
      void this._poll.stop();
    }
  }

  private _poll: Poll;
  private _done: boolean;
  private _stopped = false;
}

/**
 * A main-area tab about one job (logs, loss plot): it holds the job, polls through a JobWatcher while visible, and
 * shows request errors on a message line. Subclasses build their DOM, then call `startWatching`.
 */
export abstract class JobTabView extends Widget implements IJobView {
  constructor(
    readonly api: JobsApi,
    protected _job: IJob,
    messageClass: string
  ) {
    super();
    this._message = h('div', { className: messageClass });
  }

  /** The id of the job this tab is about (what the layout restorer opens it again with). */
  get jobId(): string {
    return this._job.id;
  }

  set interval(ms: number) {
    this._watcher.interval = ms;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._watcher.dispose();
    super.dispose();
  }

  /** Called by the watcher on every tick. */
  abstract fetchData(): Promise<void>;

  onJob(job: IJob): void {
    this._job = job;
    this._updateStatus();
  }

  showError(message: string, fatal: boolean): void {
    setText(this._message, fatal ? `${message} (no longer polling)` : message);
    this._message.classList.add('jp-mod-error');
  }

  protected startWatching(interval: number): void {
    this._watcher = new JobWatcher(this.api, this._job, this, interval);
    this._updateStatus();
    this._watcher.start();
  }

  /** A fetch succeeded: any earlier error no longer applies. */
  protected clearError(): void {
    setText(this._message, '');
    this._message.classList.remove('jp-mod-error');
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this._watcher.fetchNow();
  }

  protected abstract _updateStatus(): void;

  protected readonly _message: HTMLElement;
  protected _watcher!: JobWatcher;
}
