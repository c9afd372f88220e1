/**
 * The "Distributed jobs" sidebar: the job list, the cluster and an empty state.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { refreshIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { h, placeAt, setAttr, setText, svg, toggleChild } from './dom';
import {
  basename,
  clampFraction,
  formatDuration,
  formatEpochStep,
  formatEta,
  formatFinalMetrics,
  formatMemory,
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
  startedAt,
  stateBadgeClass
} from './format';
import { EtaSmoother } from './eta';
import { jobsIcon } from './icons';
import { JobsModel } from './jobsModel';
import { ICluster, IClusterInfo, IJob } from './model';
import { PlotlyBox } from './plotlyBox';
import { lastValue, sparklinePath } from './sparkline';

export const PANEL_ID = 'jp-dl-jobs-panel';

// The row's loss sparkline stays a hand-drawn SVG path, not a plotly figure: measured in headless Chromium on a 2-core
// machine, redrawing 10 rows took 50-300 ms with plotly (Plotly.react on static 72x18 plots; 250-400 ms to create
// them, plus the renderer's PNG snapshot of each) against 0.3-3 ms as SVG paths, every 2 s poll while jobs run.
const SPARK_W = 72;
const SPARK_H = 18;

export namespace JobsPanel {
  /** What the row buttons do; the plugin wires these to commands. */
  export interface IActions {
    cancel(job: IJob): void;
    logs(job: IJob): void;
    plot(job: IJob): void;
    openNotebook(job: IJob): void;
    /** Inserts a cell loading the kept model `name` below the active cell of the current notebook. */
    loadModel(job: IJob, name: string): void;
    /** The URL a kept model downloads from. */
    modelUrl(job: IJob, name: string): string;
    /** Opens the comparison of these jobs (two or more, in list order). */
    compare(jobIds: string[]): void;
    stopCluster(cluster: ICluster): void;
    refresh(): void;
    gettingStarted(): void;
  }
}

export class JobsPanel extends Widget {
  constructor(
    readonly model: JobsModel,
    private readonly _actions: JobsPanel.IActions,
    private readonly _rendermime: IRenderMimeRegistry | null = null
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-dl-JobsPanel');
    this.title.icon = jobsIcon;
    this.title.caption = 'Distributed jobs';

    const refresh = h('button', {
      className: 'jp-dl-icon-button jp-dl-refresh',
      type: 'button',
      title: 'Refresh',
      'aria-label': 'Refresh distributed jobs'
    });
    refresh.appendChild(refreshIcon.element({ tag: 'span' }));
    refresh.addEventListener('click', () => this._actions.refresh());
    this._summary = h('span', { className: 'jp-dl-summary' });
    this._clear = h(
      'button',
      {
        className: 'jp-dl-text-button jp-dl-clear-finished',
        type: 'button',
        title: 'Clear finished jobs from this list (they stay in %dl_jobs, with their results)'
      },
      'Clear finished'
    );
    this._clear.addEventListener('click', () => this.model.clearFinished());
    this._compare = h(
      'button',
      {
        className: 'jp-dl-text-button jp-dl-compare',
        type: 'button',
        title: 'Compare the selected jobs: loss and metric curves, settings, final metrics, speed'
      },
      'Compare'
    );
    this._compare.addEventListener('click', () => {
      const ids = this.model.jobs.map(job => job.id).filter(id => this._selected.has(id));
      if (ids.length >= 2) {
        this._actions.compare(ids);
      }
    });
    const header = h(
      'div',
      { className: 'jp-dl-header' },
      h('h2', { className: 'jp-dl-title' }, 'Distributed jobs'),
      this._summary,
      this._compare,
      this._clear,
      refresh
    );
    this._showCleared = h('button', { className: 'jp-dl-link-button jp-dl-show-cleared', type: 'button' });
    this._showCleared.addEventListener('click', () => this.model.showCleared());

    this._errorBanner = h('div', { className: 'jp-dl-error-banner', role: 'alert' });
    this._loading = h('div', { className: 'jp-dl-loading' }, 'Loading jobs…');
    this._empty = this._buildEmpty();
    this._list = h('ul', { className: 'jp-dl-jobs', 'aria-label': 'Distributed jobs' });
    this._clusterBody = h('div', { className: 'jp-dl-cluster-body' });
    this._cluster = h(
      'details',
      { className: 'jp-dl-cluster', open: true },
      h('summary', {}, 'Cluster'),
      this._clusterBody
    );
    this._body = h('div', { className: 'jp-dl-body' }, this._loading);
    this.node.append(header, this._body);
    this._render();
    model.changed.connect(this._render, this);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.changed.disconnect(this._render, this);
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refresh();
    this._preloadPlotly();
  }

  /**
   * plotly.js takes a second or two to start on a slow machine, once per page: started when the browser is idle
   * after the panel first shows, so a loss tab opened from it draws at once. `data-plotly="ready"` says it is done.
   */
  private _preloadPlotly(): void {
    if (this.node.dataset.plotly) {
      return;
    }
    this.node.dataset.plotly = 'loading';
    const idle = (window as any).requestIdleCallback ?? ((fn: () => void) => setTimeout(fn, 500));
    idle(
      () =>
        void PlotlyBox.preload(this._rendermime).then(() => {
          this.node.dataset.plotly = 'ready';
        })
    );
  }

  private _buildEmpty(): HTMLElement {
    const start = h('button', { className: 'jp-dl-text-button', type: 'button' }, 'Getting started');
    start.addEventListener('click', () => this._actions.gettingStarted());
    return h(
      'div',
      { className: 'jp-dl-empty' },
      h('p', { className: 'jp-dl-empty-title' }, 'No distributed jobs yet'),
      h('p', {}, 'In a notebook, load the extension once:'),
      h('pre', {}, '%load_ext jupyter_dl'),
      h('p', {}, 'then put the magic on top of an unchanged Keras cell:'),
      h('pre', {}, '%%distribute -n 2\nmodel.fit(...)'),
      h('p', {}, 'The job shows up here with its progress, logs and loss plot.'),
      h(
        'p',
        { className: 'jp-dl-empty-hint' },
        'Seeing “Cell magic `%%distribute` not found”? The extension is not loaded in that kernel: run ' +
          '%load_ext jupyter_dl first, or load it in every kernel with this line in ' +
          '~/.ipython/profile_default/ipython_config.py:'
      ),
      h('pre', {}, "c.InteractiveShellApp.extensions = ['jupyter_dl']"),
      start
    );
  }

  private _render(): void {
    const model = this.model;
    const jobs = model.jobs;

    setText(this._errorBanner, model.error ? `Cannot list jobs: ${model.error}` : '');
    toggleChild(this._body, this._errorBanner, !!model.error, this._body.firstElementChild);
    toggleChild(this._body, this._loading, !model.loaded && !model.error);
    toggleChild(this._body, this._empty, model.loaded && jobs.length === 0 && !model.error);
    toggleChild(this._body, this._list, jobs.length > 0);
    // The cluster section always comes last.
    toggleChild(this._body, this._cluster, model.loaded || model.cluster !== null);
    if (this._cluster.parentElement === this._body && this._body.lastElementChild !== this._cluster) {
      this._body.appendChild(this._cluster);
    }

    const active = jobs.filter(job => isActive(job.state)).length;
    setText(this._summary, model.loaded ? `${active} active` : '');
    setAttr(this._summary, 'title', model.loaded ? `${active} active of ${jobs.length} jobs` : null);
    this._clear.hidden = !jobs.some(job => isFinal(job.state));
    const cleared = model.hiddenCount;
    setText(this._showCleared, `Show ${cleared} cleared ${cleared === 1 ? 'job' : 'jobs'}`);
    toggleChild(this._body, this._showCleared, cleared > 0, this._cluster);
    const now = Date.now() / 1000;
    this._eta.retain(jobs.map(job => job.id));

    const seen = new Set<string>();
    jobs.forEach((job, index) => {
      seen.add(job.id);
      let row = this._rows.get(job.id);
      if (!row) {
        row = new JobRow(this._actions, (id, on) => this._select(id, on));
        this._rows.set(job.id, row);
      }
      row.update(job, model.isCancelling(job.id), this._eta.update(job.id, job.progress?.eta_s, now));
      row.selected = this._selected.has(job.id);
      placeAt(this._list, row.node, index);
    });
    for (const [id, row] of this._rows) {
      if (!seen.has(id)) {
        row.node.remove();
        this._rows.delete(id);
      }
    }
    for (const id of [...this._selected]) {
      if (!seen.has(id)) {
        this._selected.delete(id); // a job no longer listed (cleared, pruned) is no longer selected
      }
    }
    this._updateCompare();
    this._renderCluster(model.cluster, model.clusterError);
  }

  private _select(jobId: string, on: boolean): void {
    if (on) {
      this._selected.add(jobId);
    } else {
      this._selected.delete(jobId);
    }
    this._updateCompare();
  }

  /** The Compare button shows once a row is selected, and works from two on. */
  private _updateCompare(): void {
    const count = this._selected.size;
    this._compare.hidden = count === 0;
    this._compare.disabled = count < 2;
    setText(this._compare, count >= 2 ? `Compare ${count}` : 'Compare');
    setAttr(this._compare, 'aria-disabled', count < 2 ? 'true' : null);
  }

  private _clusterRow(cluster: ICluster): HTMLElement {
    const engines = cluster.engines ?? 0;
    const stopping = this.model.isStopping(cluster.cluster_id);
    const owner = cluster.owner;
    const notebook = owner?.notebook ?? null;
    const stop = h(
      'button',
      {
        className: 'jp-dl-text-button jp-dl-cluster-stop',
        type: 'button',
        title: `Stop cluster ${cluster.cluster_id}: its engines and controller`
      },
      stopping ? 'Stopping…' : 'Stop'
    );
    stop.disabled = stopping;
    stop.addEventListener('click', () => this._actions.stopCluster(cluster));
    const hosts = Object.entries(cluster.engines_by_host ?? {});
    return h(
      'div',
      {
        className: 'jp-dl-cluster-row',
        'data-cluster-id': cluster.cluster_id,
        'data-running': String(!!cluster.running),
        title: `cluster ${cluster.cluster_id}${cluster.profile ? ` (profile ${cluster.profile})` : ''}`
      },
      h(
        'div',
        { className: 'jp-dl-cluster-head' },
        h('span', { className: `jp-dl-dot ${cluster.running ? 'jp-dl-dot-on' : 'jp-dl-dot-off'}` }),
        h(
          'span',
          {
            className: `jp-dl-cluster-owner${notebook ? '' : ' jp-dl-muted'}`,
            title: notebook
              ? `started by the kernel of ${notebook} (pid ${owner?.kernel_pid})`
              : owner
                ? `started by kernel pid ${owner.kernel_pid}, not a notebook of this server`
                : 'started outside jupyter-dl (ipcluster, a scheduler job, ...)'
          },
          notebook ? basename(notebook) : owner ? `kernel ${owner.kernel_pid}` : cluster.cluster_id
        ),
        h('span', { className: 'jp-dl-cluster-engines' }, `${engines} ${engines === 1 ? 'engine' : 'engines'}`),
        stop
      ),
      h(
        'ul',
        { className: 'jp-dl-cluster-hosts', 'aria-label': 'Engines by host' },
        ...hosts.map(([host, count]) =>
          h(
            'li',
            { className: 'jp-dl-cluster-host', 'data-host': host },
            h('span', { className: 'jp-dl-cluster-host-name' }, host),
            h('span', { className: 'jp-dl-cluster-host-engines' }, `${count} ${count === 1 ? 'engine' : 'engines'}`)
          )
        )
      )
    );
  }

  private _renderCluster(info: IClusterInfo | null, error: string | null): void {
    const stopping = info?.clusters.filter(c => this.model.isStopping(c.cluster_id)).map(c => c.cluster_id);
    const signature = JSON.stringify([info, error, stopping]);
    if (signature === this._clusterSignature) {
      return;
    }
    this._clusterSignature = signature;
    const body = this._clusterBody;
    body.textContent = '';
    if (error && !info) {
      body.appendChild(h('div', { className: 'jp-dl-muted' }, `Cluster status unavailable: ${error}`));
      return;
    }
    if (!info) {
      return;
    }
    if (info.clusters.length === 0) {
      body.appendChild(h('div', { className: 'jp-dl-muted' }, 'No cluster running; %%distribute starts one.'));
    }
    for (const cluster of info.clusters) {
      body.appendChild(this._clusterRow(cluster));
    }
    if (info.gpus.length === 0) {
      body.appendChild(h('div', { className: 'jp-dl-muted' }, 'No GPUs found (CPU only).'));
    }
    for (const gpu of info.gpus) {
      const util = clampFraction(typeof gpu.utilization === 'number' ? gpu.utilization / 100 : null);
      const used = gpu.memory_used_mb;
      const total = gpu.memory_total_mb;
      const mem = clampFraction(
        typeof used === 'number' && typeof total === 'number' && total > 0 ? used / total : null
      );
      body.appendChild(
        h(
          'div',
          { className: 'jp-dl-gpu', 'data-gpu-index': gpu.index },
          h('div', { className: 'jp-dl-gpu-name' }, `GPU ${gpu.index} · ${gpu.name}`),
          meter('util', util, util === null ? '?' : formatPercent(util)),
          meter('mem', mem, `${formatMemory(used)} / ${formatMemory(total)}`)
        )
      );
    }
  }

  private _summary: HTMLElement;
  private _compare: HTMLButtonElement;
  private _selected = new Set<string>();
  private _clear: HTMLButtonElement;
  private _showCleared: HTMLButtonElement;
  private _eta = new EtaSmoother();
  private _errorBanner: HTMLElement;
  private _loading: HTMLElement;
  private _empty: HTMLElement;
  private _list: HTMLUListElement;
  private _cluster: HTMLElement;
  private _clusterBody: HTMLElement;
  private _body: HTMLElement;
  private _rows = new Map<string, JobRow>();
  private _clusterSignature = '';
}

function meter(label: string, fraction: number | null, text: string): HTMLElement {
  const fill = h('div', { className: 'jp-dl-meter-fill' });
  fill.style.width = `${((fraction ?? 0) * 100).toFixed(1)}%`;
  return h(
    'div',
    { className: `jp-dl-meter jp-dl-meter-${label}`, 'data-fraction': fraction === null ? '' : fraction },
    h('span', { className: 'jp-dl-meter-label' }, label),
    h('div', { className: 'jp-dl-meter-track' }, fill),
    h('span', { className: 'jp-dl-meter-text' }, text)
  );
}

/** One job's row; built once, updated in place on every poll so buttons keep focus. */
class JobRow {
  constructor(
    private readonly _actions: JobsPanel.IActions,
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
      h('div', { className: 'jp-dl-job-meta' }, this._notebook, this._started, this._ranks),
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
    const progress = job.progress ?? {};
    setAttr(node, 'data-job-id', job.id);
    setAttr(node, 'data-state', job.state);
    node.classList.toggle('jp-mod-cancelling', cancelling);
    node.classList.toggle('jp-mod-active', isActive(job.state));

    setText(this._name, job.name || job.id);
    const details = [
      `id ${job.id}`,
      job.user ? `user ${job.user}` : '',
      job.created ? `created ${formatTimestamp(job.created)}` : '',
      job.hosts?.length ? `hosts ${job.hosts.join(', ')}` : '',
      job.gpus?.length ? `GPUs ${job.gpus.join(', ')}` : ''
    ].filter(Boolean);
    setAttr(this._name, 'title', `${job.name}\n${details.join('\n')}`);

    const badgeClass = stateBadgeClass(job.state);
    if (this._badge.className !== badgeClass) {
      this._badge.className = badgeClass;
    }
    setText(this._badge, cancelling && isActive(job.state) ? 'cancelling' : job.state);

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
    setAttr(this._ranks, 'title', lastRestart ? `last restart: ${lastRestart.reason}` : null);

    const fraction = clampFraction(progress.fraction);
    setAttr(this._progress, 'data-fraction', fraction === null ? '' : String(fraction));
    setAttr(this._progress, 'aria-valuenow', fraction === null ? null : String(Math.round(fraction * 100)));
    this._progress.classList.toggle('jp-mod-indeterminate', fraction === null && isActive(job.state));
    const width = `${((fraction ?? 0) * 100).toFixed(1)}%`;
    if (this._fill.style.width !== width) {
      this._fill.style.width = width;
    }
    setText(this._percent, formatPercent(fraction));

    const spark = progress.sparkline ?? [];
    setAttr(this._sparkPath, 'd', sparklinePath(spark, SPARK_W, SPARK_H, 2));
    const last = lastValue(spark);
    setText(this._sparkTitle, last === null ? 'no loss yet' : `loss ${formatMetric(last)}`);
    this._spark.classList.toggle('jp-mod-empty', spark.length === 0);

    const queued = formatQueue(job);
    const final = isFinal(job.state) ? formatFinalMetrics(job.final_metrics) : '';
    setText(this._epoch, final ? '' : queued || formatEpochStep(progress));
    setAttr(this._epoch, 'title', queued ? (progress.reason ?? null) : null);
    setText(this._final, final);
    setAttr(this._final, 'title', final ? 'final metrics (last epoch, rank 0)' : null);
    setText(this._rate, isActive(job.state) ? formatRate(progress.samples_per_s) : '');
    setAttr(this._rate, 'title', RATE_HELP);
    setText(this._elapsed, formatDuration(job.elapsed));
    setAttr(this._elapsed, 'title', 'elapsed');
    setText(this._eta, formatEta(etaS, job.state));

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
