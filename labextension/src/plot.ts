/**
 * The loss plot tab: loss per step and per-epoch loss/val_loss from the metrics endpoint, drawn as SVG, and under it
 * small per-rank charts of the ranks' CPU, memory and GPU use (the `resources` records of the same pages).
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { JobsApi } from './api';
import { ILossSeries, LossSeriesBuilder, lossChartSvg } from './chart';
import { h, setText } from './dom';
import { formatMetric, tabTitle } from './format';
import { jobsIcon } from './icons';
import { widgetId } from './logs';
import { IJob } from './model';
import { RESOURCE_FIELDS, ResourceSeriesBuilder, resourceChartSvg } from './resources';
import { JobTabView } from './watch';

/** Records asked for per request: the first page draws at once, however long the job has run. */
export const METRICS_PAGE_SIZE = 5000;
/**
 * Pages fetched in one tick while the server says there are more (catching up on a long job): the chart is redrawn
 * after every page, so it shows from the first one on and fills in; the next tick goes on from there.
 */
const MAX_PAGES_PER_TICK = 40;

export class LossPlotView extends JobTabView {
  constructor(
    api: JobsApi,
    job: IJob,
    options: { interval: number }
  ) {
    super(api, job, 'jp-dl-plot-message');
    this.addClass('jp-dl-PlotView');

    this.logToggle = this._checkbox('Log scale', 'jp-dl-plot-log', false, on => {
      this._logY = on;
      this._draw();
    });
    this.rawToggle = this._checkbox('Raw steps', 'jp-dl-plot-raw', true, on => {
      this._showRaw = on;
      this._draw();
    });
    this.status = h('span', { className: 'jp-dl-plot-status' });

    this._chart = h('div', { className: 'jp-dl-plot-chart' });
    this._resources = h('div', { className: 'jp-dl-resource-charts' });
    this._table = h('table', { className: 'jp-dl-epoch-table' });
    this.node.append(this._message, this._chart, this._resources, this._table);

    this.startWatching(options.interval);
  }

  readonly logToggle: HTMLElement;
  readonly rawToggle: HTMLElement;
  readonly status: HTMLElement;

  get series(): ILossSeries {
    return this._builder.series;
  }

  /** Called by the watcher on every tick: new records since the last one. */
  fetchData(): Promise<void> {
    return this.fetchMetrics();
  }

  fetchMetrics(): Promise<void> {
    // One request chain at a time: two in flight with the same `since` would add records twice.
    if (!this._inflight) {
      this._inflight = this._fetchMetrics().finally(() => {
        this._inflight = null;
      });
    }
    return this._inflight;
  }

  /**
   * Fetches what was written since the last call, a page at a time, and draws after each page. A page comes back
   * with `more` only when it stopped at the page size; a running job keeps writing, so an empty page is never
   * waited for: what is written now is drawn now, and the watcher's next tick follows on.
   */
  private async _fetchMetrics(): Promise<void> {
    for (let page = 0; page < MAX_PAGES_PER_TICK; page++) {
      const since = this._next;
      const reply = await this.api.metrics(this._job.id, since, METRICS_PAGE_SIZE);
      const records = reply.records ?? [];
      if (typeof reply.next === 'number') {
        this._next = reply.next;
      }
      const lossChanged = this._builder.add(records);
      const changed = this._resourceBuilder.add(records) || lossChanged;
      this.clearError();
      if (changed || !this._loaded) {
        this._loaded = true;
        this._draw();
        this._renderTable();
      }
      this._updateStatus();
      if (reply.more !== true || records.length === 0 || this._next <= since) {
        break;
      }
      // Let the browser paint this page before the next request (a timer: animation frames stop in hidden tabs).
      await new Promise(resolve => setTimeout(resolve, 0));
    }
  }

  protected onAfterShow(msg: Message): void {
    this._draw();
    super.onAfterShow(msg);
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._draw();
  }

  private _draw(): void {
    if (!this.isVisible) {
      return;
    }
    const style = getComputedStyle(this._chart);
    const padX = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight) || 0;
    const padY = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom) || 0;
    const width = this._chart.clientWidth - padX || 640;
    const height = this._chart.clientHeight - padY || 320;
    if (!this._loaded) {
      setText(this._chart, 'Loading metrics…');
      return;
    }
    // Markup built by lossChartSvg from numbers and escaped fixed labels only.
    this._chart.innerHTML = lossChartSvg(this._builder.series, {
      width,
      height,
      logY: this._logY,
      showRaw: this._showRaw
    });
    this._drawResources(width);
  }

  /** The per-rank resource charts, two to a row under the loss chart; none until a rank sampled. */
  private _drawResources(width: number): void {
    const size = { width: Math.max(240, width / 2 - 8), height: 140 };
    // Markup built by resourceChartSvg from numbers and escaped fixed labels only.
    this._resources.innerHTML = RESOURCE_FIELDS.map(f =>
      resourceChartSvg(this._resourceBuilder.series, f.key, size)
    ).join('');
  }

  private _renderTable(): void {
    const epochs = this._builder.series.epochs;
    const table = this._table;
    table.textContent = '';
    if (epochs.length === 0) {
      return;
    }
    const keys = new Set<string>();
    for (const e of epochs) {
      Object.keys(e.logs).forEach(k => keys.add(k));
    }
    const order = (k: string): [number, string] => {
      const base = k.startsWith('val_') ? k.slice(4) : k;
      return [base === 'loss' ? 0 : 1, `${base}\u0000${k.startsWith('val_') ? 1 : 0}`];
    };
    const columns = [...keys].sort((a, b) => {
      const [ra, sa] = order(a);
      const [rb, sb] = order(b);
      return ra - rb || (sa < sb ? -1 : sa > sb ? 1 : 0);
    });
    const head = h('tr', {}, h('th', {}, 'epoch'), ...columns.map(c => h('th', {}, c)));
    const body = h('tbody');
    // Newest first, at most the last 50 epochs.
    for (const e of epochs.slice(-50).reverse()) {
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
    const s = this._builder.series;
    const epochs = s.epochsPlanned ? `/${s.epochsPlanned}` : '';
    const parts = [
      this._job.state,
      `${s.epochs.length}${epochs} epochs`,
      s.step.length ? `${s.step.length} steps` : ''
    ].filter(Boolean);
    setText(this.status, parts.join(' · '));
  }

  private _checkbox(
    label: string,
    cls: string,
    checked: boolean,
    onChange: (on: boolean) => void
  ): HTMLElement {
    const input = h('input', { type: 'checkbox' });
    input.checked = checked;
    input.addEventListener('change', () => onChange(input.checked));
    return h('label', { className: `jp-dl-checkbox ${cls}` }, input, label);
  }

  private _inflight: Promise<void> | null = null;
  private _builder = new LossSeriesBuilder('loss');
  private _resourceBuilder = new ResourceSeriesBuilder();
  private _next = 0;
  private _loaded = false;
  private _logY = false;
  private _showRaw = true;
  private _chart: HTMLElement;
  private _resources: HTMLElement;
  private _table: HTMLTableElement;
}

/** The loss plot tab for `job`. */
export function createPlotWidget(
  api: JobsApi,
  job: IJob,
  options: { interval: number }
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
