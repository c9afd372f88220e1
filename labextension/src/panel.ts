/**
 * The "Distributed jobs" sidebar: the job list, the cluster and an empty state.
 */
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { refreshIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { renderCluster } from './clusterView';
import { h, placeAt, setAttr, setText, toggleChild } from './dom';
import { EtaSmoother } from './eta';
import { isActive, isFinal } from './format';
import { jobsIcon } from './icons';
import { IRowActions, JobRow } from './jobRow';
import { JobsModel } from './jobsModel';
import { ICluster, IClusterInfo } from './model';
import { PlotlyBox } from './plotlyBox';

export const PANEL_ID = 'jp-dl-jobs-panel';

export namespace JobsPanel {
  /** What the panel's buttons and rows do; the plugin wires these to commands. */
  export interface IActions extends IRowActions {
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
    // Two lines, so that it fits the default sidebar width (250 px): the title, the count and Refresh; under them,
    // only while either shows, the list's actions (they wrap again should the sidebar be narrower still).
    this._actionsBar = h(
      'div',
      { className: 'jp-dl-header-actions', role: 'toolbar', 'aria-label': 'Selected and finished jobs' },
      this._compare,
      this._clear
    );
    const header = h(
      'div',
      { className: 'jp-dl-header' },
      h(
        'div',
        { className: 'jp-dl-header-top' },
        h('h2', { className: 'jp-dl-title', title: 'Distributed jobs' }, 'Distributed jobs'),
        this._summary,
        refresh
      ),
      this._actionsBar
    );
    this._showCleared = h('button', { className: 'jp-dl-link-button jp-dl-show-cleared', type: 'button' });
    this._showCleared.addEventListener('click', () => this.model.showCleared());

    this._errorBanner = h('div', { className: 'jp-dl-error-banner', role: 'alert' });
    this._loading = h('div', { className: 'jp-dl-loading' }, 'Loading jobs…');
    this._empty = this._buildEmpty();
    // After "Clear finished" took every row away: not the first-run help, since jobs did run.
    this._clearedText = h('p', {});
    this._clearedEmpty = h(
      'div',
      { className: 'jp-dl-empty jp-dl-empty-cleared' },
      h('p', { className: 'jp-dl-empty-title' }, 'No active jobs'),
      this._clearedText
    );
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
    const cleared = model.hiddenCount;
    const listEmpty = model.loaded && jobs.length === 0 && !model.error;
    toggleChild(this._body, this._empty, listEmpty && cleared === 0);
    toggleChild(this._body, this._clearedEmpty, listEmpty && cleared > 0, this._empty);
    setText(
      this._clearedText,
      `${cleared} finished ${cleared === 1 ? 'job' : 'jobs'} cleared from this list; %dl_jobs still lists ${cleared === 1 ? 'it' : 'them'}.`
    );
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
    setText(this._showCleared, `Show ${cleared} cleared ${cleared === 1 ? 'job' : 'jobs'}`);
    if (listEmpty && cleared > 0) {
      toggleChild(this._clearedEmpty, this._showCleared, true);
    } else if (cleared > 0) {
      toggleChild(this._body, this._showCleared, true, this._cluster);
    } else {
      this._showCleared.remove();
    }
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
    this._actionsBar.hidden = this._compare.hidden && this._clear.hidden;
  }

  private _renderCluster(info: IClusterInfo | null, error: string | null): void {
    const stopping = info?.clusters.filter(c => this.model.isStopping(c.cluster_id)).map(c => c.cluster_id);
    const signature = JSON.stringify([info, error, stopping]);
    if (signature !== this._clusterSignature) {
      this._clusterSignature = signature;
      renderCluster(this._clusterBody, info, error, {
        isStopping: id => this.model.isStopping(id),
        stop: cluster => this._actions.stopCluster(cluster)
      });
    }
  }

  private _summary: HTMLElement;
  private _actionsBar: HTMLElement;
  private _compare: HTMLButtonElement;
  private _selected = new Set<string>();
  private _clear: HTMLButtonElement;
  private _showCleared: HTMLButtonElement;
  private _eta = new EtaSmoother();
  private _errorBanner: HTMLElement;
  private _loading: HTMLElement;
  private _empty: HTMLElement;
  private _clearedEmpty: HTMLElement;
  private _clearedText: HTMLElement;
  private _list: HTMLUListElement;
  private _cluster: HTMLElement;
  private _clusterBody: HTMLElement;
  private _body: HTMLElement;
  private _rows = new Map<string, JobRow>();
  private _clusterSignature = '';
}
