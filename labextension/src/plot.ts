/**
 * The loss plot tab: the figures the notebook cell shows (loss, and under it each rank's CPU, memory and GPU use),
 * built by the server from the job's metrics (GET .../figures) and drawn by JupyterLab's plotly renderer; then the
 * last epochs' logs as a table.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IDisposable } from '@lumino/disposable';
import { Message } from '@lumino/messaging';
import { PanelLayout, Widget } from '@lumino/widgets';

import { JobsApi } from './api';
import { h, setText } from './dom';
import { epochColumns, forPanel, pageTheme, statusText } from './figures';
import { formatMetric, tabTitle } from './format';
import { jobsIcon } from './icons';
import { widgetId } from './logs';
import { IJob, IJobFigures, Theme } from './model';
import { PlotlyBox } from './plotlyBox';
import { watchPageTheme } from './theme';
import { JobTabView } from './watch';

export class LossPlotView extends JobTabView {
  constructor(api: JobsApi, job: IJob, options: { interval: number; rendermime: IRenderMimeRegistry | null }) {
    super(api, job, 'jp-dl-plot-message');
    this.addClass('jp-dl-PlotView');

    this.logToggle = this._checkbox('Log scale', 'jp-dl-plot-log', false, on => {
      this._logY = on;
      void this._draw();
    });
    // Off by default: then the tab shows what the cell shows.
    this.rawToggle = this._checkbox('Raw steps', 'jp-dl-plot-raw', false, on => {
      this._showRaw = on;
      void this._draw();
    });
    this.status = h('span', { className: 'jp-dl-plot-status' });

    this._loss = new PlotlyBox(options.rendermime, 'jp-dl-plot-chart');
    this._resources = new PlotlyBox(options.rendermime, 'jp-dl-resource-charts');
    this._table = h('table', { className: 'jp-dl-epoch-table' });
    const layout = (this.layout = new PanelLayout());
    layout.addWidget(new Widget({ node: this._message }));
    layout.addWidget(this._loss);
    layout.addWidget(this._resources);
    layout.addWidget(new Widget({ node: this._table }));
    void this._loss.draw(null, 'Loading metrics…');
    PlotlyBox.preload(options.rendermime);
    // A finished job's tab polls no more: a theme change while it shows fetches the figures for the new theme.
    this._themeWatch = watchPageTheme(() => {
      if (this.isVisible) {
        this._followTheme();
      }
    });

    this.startWatching(options.interval);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._themeWatch.dispose();
    super.dispose();
  }

  readonly logToggle: HTMLElement;
  readonly rawToggle: HTMLElement;
  readonly status: HTMLElement;

  /** Called by the watcher on every tick: the figures, unless nothing changed since the last reply. */
  fetchData(): Promise<void> {
    // One request at a time: a slow server must not have two replies race to the screen.
    if (!this._inflight) {
      this._inflight = this._fetch().finally(() => {
        this._inflight = null;
      });
    }
    return this._inflight;
  }

  private async _fetch(): Promise<void> {
    const theme = pageTheme(document.body);
    const known = theme === this._theme ? this._figures?.version : undefined;
    const reply = await this.api.figures(this._job.id, theme, known);
    this.clearError();
    if (reply.unchanged && this._figures) {
      return;
    }
    this._figures = reply;
    this._theme = theme;
    this._renderTable();
    this._updateStatus();
    await this._draw();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._followTheme(); // the theme changed while hidden: the figures follow it
  }

  /** Fetches the figures for the page's theme unless they are drawn for it. */
  private _followTheme(): void {
    const stale = (): boolean => pageTheme(document.body) !== this._theme;
    const fetch = (): Promise<void> => this.fetchData().catch(() => undefined); // the watcher shows errors
    if (stale()) {
      // A fetch already in flight may have asked for the old theme: then once more after it.
      void fetch().then(() => (stale() ? fetch() : undefined));
    }
  }

  private async _draw(): Promise<void> {
    const figures = this._figures;
    if (!figures?.loss) {
      return;
    }
    const options = { logY: this._logY, showRaw: this._showRaw };
    await Promise.all([
      // Nothing trained yet, or ever (a job that failed at once): say so, not empty axes from -1 to 1.
      figures.note ? this._loss.draw(null, figures.note) : this._loss.draw(forPanel(figures.loss, options)),
      this._resources.draw(figures.resources ? forPanel(figures.resources) : null)
    ]);
  }

  private _renderTable(): void {
    const epochs = this._figures?.epochs ?? [];
    const table = this._table;
    table.textContent = '';
    if (epochs.length === 0) {
      return;
    }
    const columns = epochColumns(epochs);
    const head = h('tr', {}, h('th', {}, 'epoch'), ...columns.map(c => h('th', {}, c)));
    const body = h('tbody');
    for (const e of [...epochs].reverse()) {
      // newest first
      body.appendChild(
        h(
          'tr',
          { 'data-epoch': e.epoch },
          h('td', {}, String(e.epoch + 1)),
          ...columns.map(c => h('td', {}, formatMetric(e.logs[c])))
        )
      );
    }
    table.append(h('thead', {}, head), body);
  }

  protected _updateStatus(): void {
    setText(this.status, statusText(this._figures?.status, this._job.state));
  }

  private _checkbox(label: string, cls: string, checked: boolean, onChange: (on: boolean) => void): HTMLElement {
    const input = h('input', { type: 'checkbox' });
    input.checked = checked;
    input.addEventListener('change', () => onChange(input.checked));
    return h('label', { className: `jp-dl-checkbox ${cls}` }, input, label);
  }

  private _themeWatch: IDisposable;
  private _inflight: Promise<void> | null = null;
  private _figures: IJobFigures | null = null;
  private _theme: Theme | null = null;
  private _logY = false;
  private _showRaw = false;
  private _loss: PlotlyBox;
  private _resources: PlotlyBox;
  private _table: HTMLTableElement;
}

/** The loss plot tab for `job`. */
export function createPlotWidget(
  api: JobsApi,
  job: IJob,
  options: { interval: number; rendermime: IRenderMimeRegistry | null }
): MainAreaWidget<LossPlotView> {
  const content = new LossPlotView(api, job, options);
  const widget = new MainAreaWidget({ content });
  widget.id = widgetId('plot', job.id);
  widget.addClass('jp-dl-plot-widget');
  widget.title.label = tabTitle('Loss', job);
  widget.title.caption = `Loss of distributed job ${job.name} (${job.id})`;
  widget.title.icon = jobsIcon;
  widget.title.closable = true;
  widget.toolbar.addItem('log-scale', new Widget({ node: content.logToggle }));
  widget.toolbar.addItem('raw-steps', new Widget({ node: content.rawToggle }));
  widget.toolbar.addItem('status', new Widget({ node: content.status }));
  return widget;
}
