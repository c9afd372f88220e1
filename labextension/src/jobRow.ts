/**
 * One job's row in the sidebar: name and state, notebook, start time and ranks, progress, a loss sparkline, speed
 * and times, the error if any, and its actions (logs, plot, notebook, cancel, kept models).
 */
import { h, setAttr, setText, svg, toggleChild } from './dom';
import {
  basename,
  clampFraction,
  formatDuration,
  formatEpochStep,
  formatEta,
  formatFinalMetrics,
  formatMetric,
  formatPercent,
  formatQueue,
  formatRanks,
  formatRate,
  formatStartTime,
  formatTimestamp,
  isActive,
  isFinal,
  RATE_HELP,
  shortJobId,
  startedAt,
  stateBadgeClass
} from './format';
import { IJob } from './model';
import { lastValue, sparklinePath } from './sparkline';

/** What a row's buttons do; the plugin wires these to commands. */
export interface IRowActions {
  cancel(job: IJob): void;
  logs(job: IJob): void;
  plot(job: IJob): void;
  openNotebook(job: IJob): void;
  /** Inserts a cell loading the kept model `name` below the active cell of the current notebook. */
  loadModel(job: IJob, name: string): void;
  /** The URL a kept model downloads from. */
  modelUrl(job: IJob, name: string): string;
}

// The row's loss sparkline stays a hand-drawn SVG path, not a plotly figure: measured in headless Chromium on a 2-core
// machine, redrawing 10 rows took 50-300 ms with plotly (Plotly.react on static 72x18 plots; 250-400 ms to create
// them, plus the renderer's PNG snapshot of each) against 0.3-3 ms as SVG paths, every 2 s poll while jobs run.
const SPARK_W = 72;
const SPARK_H = 18;

/** One job's row; built once, updated in place on every poll so buttons keep focus. */
export class JobRow {
  constructor(
    private readonly _actions: IRowActions,
    onSelect: (jobId: string, on: boolean) => void
  ) {
    this._select = h('input', {
      className: 'jp-dl-select',
      type: 'checkbox',
      title: 'Select to compare with other jobs'
    });
    this._select.addEventListener('click', event => event.stopPropagation());
    this._select.addEventListener('change', () => {
      if (this._job) {
        onSelect(this._job.id, this._select.checked);
      }
    });
    this._name = h('span', { className: 'jp-dl-job-name' });
    this._shortId = h('span', { className: 'jp-dl-job-id jp-dl-muted' });
    this._badge = h('span', {});
    this._notebook = h('span', { className: 'jp-dl-job-notebook' });
    this._ranks = h('span', { className: 'jp-dl-job-ranks' });
    this._started = h('span', { className: 'jp-dl-job-started' });
    this._final = h('span', { className: 'jp-dl-job-final' });
    this._fill = h('div', { className: 'jp-dl-job-progress-fill' });
    this._progress = h(
      'div',
      {
        className: 'jp-dl-job-progress',
        role: 'progressbar',
        'aria-valuemin': 0,
        'aria-valuemax': 100
      },
      this._fill
    );
    this._percent = h('span', { className: 'jp-dl-job-percent' });
    this._sparkPath = svg('path', { class: 'jp-dl-sparkline-path' });
    this._spark = svg('svg', {
      class: 'jp-dl-sparkline',
      width: SPARK_W,
      height: SPARK_H,
      viewBox: `0 0 ${SPARK_W} ${SPARK_H}`
    });
    this._sparkTitle = svg('title');
    this._spark.append(this._sparkTitle, this._sparkPath);
    this._epoch = h('span', { className: 'jp-dl-job-epoch' });
    this._elapsed = h('span', { className: 'jp-dl-job-elapsed' });
    this._eta = h('span', { className: 'jp-dl-job-eta' });
    this._rate = h('span', { className: 'jp-dl-job-rate' });
    this._error = h('div', { className: 'jp-dl-job-error' });

    this._logs = this._button('jp-dl-logs', 'Logs', 'Show the ranks’ output', job => this._actions.logs(job));
    this._plot = this._button('jp-dl-plot', 'Plot', 'Plot loss per step and per epoch', job => this._actions.plot(job));
    this._open = this._button('jp-dl-open', 'Notebook', 'Open the notebook that started this job', job =>
      this._actions.openNotebook(job)
    );
    this._cancel = this._button('jp-dl-cancel', 'Cancel', 'Cancel this job', job => this._actions.cancel(job));
    this._actionBar = h('div', { className: 'jp-dl-job-actions' }, this._logs, this._plot);
    this._models = h('div', { className: 'jp-dl-job-models' });

    this._stats = h('div', { className: 'jp-dl-job-stats' }, this._spark, this._epoch, this._final);
    // Speed and time on a line of their own: beside the epoch and step they were cut to a few letters each.
    this._timing = h('div', { className: 'jp-dl-job-timing' }, this._rate, this._elapsed, this._eta);
    this.node = h(
      'li',
      { className: 'jp-dl-job' },
      h('div', { className: 'jp-dl-job-head' }, this._select, this._name, this._badge),
      h('div', { className: 'jp-dl-job-meta' }, this._notebook, this._started, this._shortId, this._ranks),
      h('div', { className: 'jp-dl-job-progress-row' }, this._progress, this._percent),
      this._stats,
      this._timing,
      this._actionBar
    );
  }

  /** Load and download actions per kept model; rebuilt only when the kept models change. */
  private _updateModels(job: IJob): void {
    const names = job.state === 'succeeded' ? (job.models ?? []) : [];
    const key = `${job.id}\u0000${names.join('\u0000')}`;
    if (key !== this._modelsKey) {
      this._modelsKey = key;
      this._models.textContent = '';
      for (const name of names) {
        const suffix = names.length > 1 ? ` '${name}'` : '';
        const load = this._button(
          'jp-dl-load-model',
          `Load model${suffix} into notebook`,
          `Insert a cell loading ${name} from job ${job.id} below the active cell of the current notebook`,
          j => this._actions.loadModel(j, name)
        );
        const download = h(
          'a',
          {
            className: 'jp-dl-link-button jp-dl-download-model',
            href: this._actions.modelUrl(job, name),
            download: `${job.id}-${name}.keras`,
            title: `Download ${name} as a .keras file`
          },
          `Download model${suffix}`
        );
        setAttr(load, 'data-model', name);
        setAttr(download, 'data-model', name);
        this._models.append(load, download);
      }
    }
    toggleChild(this.node, this._models, names.length > 0);
  }

  readonly node: HTMLLIElement;

  set selected(on: boolean) {
    if (this._select.checked !== on) {
      this._select.checked = on;
    }
  }

  update(job: IJob, cancelling: boolean, etaS: number | null = job.progress?.eta_s ?? null): void {
    this._job = job;
    const node = this.node;
    setAttr(node, 'data-job-id', job.id);
    setAttr(node, 'data-state', job.state);
    node.classList.toggle('jp-mod-cancelling', cancelling);
    node.classList.toggle('jp-mod-active', isActive(job.state));
    this._updateHead(job, cancelling);
    this._updateMeta(job);
    this._updateProgress(job);
    this._updateStats(job, etaS);
    this._updateActions(job, cancelling);
  }

  /** Name (details in its tooltip) and state badge. */
  private _updateHead(job: IJob, cancelling: boolean): void {
    setText(this._name, job.name || job.id);
    const details = [
      `id ${job.id}`,
      job.user ? `user ${job.user}` : '',
      job.created ? `created ${formatTimestamp(job.created)}` : '',
      job.hosts?.length ? `hosts ${job.hosts.join(', ')}` : '',
      job.gpus?.length ? `GPUs ${job.gpus.join(', ')}` : ''
    ].filter(Boolean);
    setAttr(this._name, 'title', `${job.name}\n${details.join('\n')}`);
    // Runs of one cell share a name: a few characters of the id tell them apart (as %dl_jobs lists them).
    setText(this._shortId, shortJobId(job.id));
    setAttr(this._shortId, 'title', `job id ${job.id}`);

    const badgeClass = stateBadgeClass(job.state);
    if (this._badge.className !== badgeClass) {
      this._badge.className = badgeClass;
    }
    setText(this._badge, cancelling && isActive(job.state) ? 'cancelling' : job.state);
  }

  /** Notebook, start time and ranks. */
  private _updateMeta(job: IJob): void {
    const notebook = job.notebook ?? job.notebook_file ?? null;
    setText(this._notebook, notebook ? basename(notebook) : 'no notebook');
    setAttr(
      this._notebook,
      'title',
      job.notebook
        ? job.notebook
        : notebook
          ? `${notebook} (outside this server's root folder)`
          : 'Not started from a notebook'
    );
    this._notebook.classList.toggle('jp-dl-muted', !notebook);
    const started = startedAt(job);
    setText(this._started, formatStartTime(started));
    setAttr(this._started, 'title', started === null ? null : `started ${formatTimestamp(started)}`);
    setText(this._ranks, formatRanks(job));
    const lastRestart = job.restarts?.length ? job.restarts[job.restarts.length - 1] : null;
    const ranks = formatRanks(job);
    // An elastic job's tooltip lists each change with its reason (grew: 2 engines free; lost rank 3 on host-b).
    const changes = (job.membership ?? []).slice(1).map(change => `${change.n} ranks: ${change.reason}`);
    const notes = [lastRestart ? `last restart: ${lastRestart.reason}` : '', ...changes].filter(Boolean);
    setAttr(this._ranks, 'title', notes.length ? `${ranks}; ${notes.join('; ')}` : ranks);
  }

  /** The progress bar, its percent and the loss sparkline. */
  private _updateProgress(job: IJob): void {
    const progress = job.progress ?? {};
    const fraction = clampFraction(progress.fraction);
    setAttr(this._progress, 'data-fraction', fraction === null ? '' : String(fraction));
    setAttr(this._progress, 'aria-valuenow', fraction === null ? null : String(Math.round(fraction * 100)));
    this._progress.classList.toggle('jp-mod-indeterminate', fraction === null && isActive(job.state));
    const width = `${((fraction ?? 0) * 100).toFixed(1)}%`;
    if (this._fill.style.width !== width) {
      this._fill.style.width = width;
    }
    setText(this._percent, formatPercent(fraction));
    setAttr(this._percent, 'title', fraction === null ? null : `${formatPercent(fraction)} of the planned steps`);

    const spark = progress.sparkline ?? [];
    setAttr(this._sparkPath, 'd', sparklinePath(spark, SPARK_W, SPARK_H, 2));
    const last = lastValue(spark);
    setText(this._sparkTitle, last === null ? 'no loss yet' : `loss ${formatMetric(last)}`);
    this._spark.classList.toggle('jp-mod-empty', spark.length === 0);
  }

  /** Epoch and step (or the queue, or the final metrics), speed, elapsed time and ETA. */
  private _updateStats(job: IJob, etaS: number | null): void {
    const progress = job.progress ?? {};
    const queued = formatQueue(job);
    const final = isFinal(job.state) ? formatFinalMetrics(job.final_metrics) : '';
    // Every text here may be cut short in a narrow sidebar: each carries itself whole in its tooltip.
    const epochStep = final ? '' : queued || formatEpochStep(progress);
    setText(this._epoch, epochStep);
    setAttr(this._epoch, 'title', queued ? (progress.reason ?? queued) : epochStep || null);
    setText(this._final, final);
    setAttr(this._final, 'title', final ? `final metrics (last epoch, rank 0): ${final}` : null);
    const rate = isActive(job.state) ? formatRate(progress.samples_per_s) : '';
    setText(this._rate, rate);
    setAttr(this._rate, 'title', rate ? `${RATE_HELP} Now: ${rate}.` : RATE_HELP);
    const elapsed = formatDuration(job.elapsed);
    setText(this._elapsed, elapsed);
    setAttr(this._elapsed, 'title', `elapsed ${elapsed}`);
    const eta = formatEta(etaS, job.state);
    setText(this._eta, eta);
    setAttr(this._eta, 'title', eta ? `${eta} (estimated time left)` : null);
  }

  /** The error line, kept models and the buttons that apply to the job's state. */
  private _updateActions(job: IJob, cancelling: boolean): void {
    setText(this._error, job.error ?? '');
    setAttr(this._error, 'title', job.error ?? null);
    toggleChild(this.node, this._error, !!job.error, this._actionBar);

    this._updateModels(job);
    toggleChild(this._actionBar, this._open, !!job.notebook, this._cancel);
    toggleChild(this._actionBar, this._cancel, isActive(job.state));
    this._cancel.disabled = cancelling;
    setText(this._cancel, cancelling ? 'Cancelling…' : 'Cancel');
  }

  private _button(cls: string, label: string, title: string, action: (job: IJob) => void): HTMLButtonElement {
    const button = h('button', { className: `jp-dl-text-button ${cls}`, type: 'button', title }, label);
    button.addEventListener('click', event => {
      event.stopPropagation();
      if (this._job) {
        action(this._job);
      }
    });
    return button;
  }

  private _job: IJob | null = null;
  private _select: HTMLInputElement;
  private _name: HTMLElement;
  private _shortId: HTMLElement;
  private _badge: HTMLElement;
  private _notebook: HTMLElement;
  private _ranks: HTMLElement;
  private _started: HTMLElement;
  private _final: HTMLElement;
  private _progress: HTMLElement;
  private _fill: HTMLElement;
  private _percent: HTMLElement;
  private _spark: SVGSVGElement;
  private _sparkPath: SVGPathElement;
  private _sparkTitle: SVGTitleElement;
  private _stats: HTMLElement;
  private _timing: HTMLElement;
  private _epoch: HTMLElement;
  private _rate: HTMLElement;
  private _elapsed: HTMLElement;
  private _eta: HTMLElement;
  private _error: HTMLElement;
  private _actionBar: HTMLElement;
  private _models: HTMLElement;
  private _modelsKey = '';
  private _logs: HTMLButtonElement;
  private _plot: HTMLButtonElement;
  private _open: HTMLButtonElement;
  private _cancel: HTMLButtonElement;
}
