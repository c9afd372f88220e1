/**
 * The loss plot tab: loss per step and per-epoch loss/val_loss from the metrics endpoint, drawn as SVG.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { JobsApi } from './api';
import { ILossSeries, LossSeriesBuilder, lossChartSvg } from './chart';
import { h, setText } from './dom';
import { formatMetric, isFinal } from './format';
import { jobsIcon } from './icons';
import { widgetId } from './logs';
import { IJob } from './model';
import { JobTabView } from './watch';

/** Pages fetched in one tick while catching up (first load, or a finished job). */
const MAX_PAGES_PER_TICK = 50;

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
    this._table = h('table', { className: 'jp-dl-epoch-table' });
    this.node.append(this._message, this._chart, this._table);

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

  private async _fetchMetrics(): Promise<void> {
    const catchUp = !this._loaded || isFinal(this._job.state);
    let changed = false;
    for (let page = 0; page < (catchUp ? MAX_PAGES_PER_TICK : 1); page++) {
      const since = this._next;
      const reply = await this.api.metrics(this._job.id, since);
      const records = reply.records ?? [];
      if (typeof reply.next === 'number') {
        this._next = reply.next;
      }
      changed = this._builder.add(records) || changed;
      if (records.length === 0 || this._next <= since) {
        break;
      }
    }
    this.clearError();
    if (changed || !this._loaded) {
      this._loaded = true;
      this._draw();
      this._renderTable();
    }
    this._updateStatus();
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
  private _next = 0;
  private _loaded = false;
  private _logY = false;
  private _showRaw = true;
  private _chart: HTMLElement;
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
  widget.title.label = `Loss: ${job.name || job.id}`;
  widget.title.caption = `Loss of distributed job ${job.name} (${job.id})`;
  widget.title.icon = jobsIcon;
  widget.title.closable = true;
  widget.toolbar.addItem('log-scale', new Widget({ node: content.logToggle }));
  widget.toolbar.addItem('raw-steps', new Widget({ node: content.rawToggle }));
  widget.toolbar.addItem('status', new Widget({ node: content.status }));
  return widget;
}
