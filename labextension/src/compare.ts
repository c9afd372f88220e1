/**
 * The compare tab: the compare endpoint's curves for the selected jobs (against steps, epochs or wall time) and its
 * table of the settings that differ, final metrics and performance.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { JobsApi, errorMessage } from './api';
import { compareChartSvg } from './compareChart';
import { h, setText } from './dom';
import { jobsIcon } from './icons';
import { CompareAxis, ICompareReply } from './model';

const AXES: ReadonlyArray<[CompareAxis, string]> = [
  ['step', 'Steps'],
  ['epoch', 'Epochs'],
  ['time', 'Wall time']
];

export class CompareView extends Widget {
  constructor(
    private readonly _api: JobsApi,
    readonly jobIds: string[]
  ) {
    super();
    this.addClass('jp-dl-CompareView');
    this.axisSelect = h('select', { className: 'jp-dl-compare-x', title: 'x axis' });
    for (const [value, label] of AXES) {
      this.axisSelect.appendChild(h('option', { value }, label));
    }
    this.axisSelect.addEventListener('change', () => void this.load());
    this._message = h('div', { className: 'jp-dl-plot-message', role: 'alert' });
    this._chart = h('div', { className: 'jp-dl-compare-chart-box' }, 'Loading comparison…');
    this._table = h('table', { className: 'jp-dl-compare-table' });
    this.node.append(this._message, this._chart, this._table);
    void this.load();
  }

  readonly axisSelect: HTMLSelectElement;

  /** Fetches the comparison against the chosen x axis and draws it. */
  async load(): Promise<void> {
    const x = this.axisSelect.value as CompareAxis;
    try {
      this._data = await this._api.compare(this.jobIds, x);
      setText(this._message, '');
    } catch (error) {
      this._data = null;
      setText(this._message, `Cannot compare these jobs: ${errorMessage(error)}`);
    }
    this._draw();
    this._renderTable();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._draw();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this._draw();
  }

  private _draw(): void {
    if (!this._data) {
      this._chart.textContent = '';
      return;
    }
    const width = this._chart.clientWidth - 24 || 720;
    // Markup built by compareChartSvg from numbers and escaped labels only.
    this._chart.innerHTML = compareChartSvg(this._data, this.axisSelect.value as CompareAxis, {
      width,
      height: 320
    });
  }

  private _renderTable(): void {
    const table = this._table;
    table.textContent = '';
    if (!this._data) {
      return;
    }
    const runs = this._data.runs;
    table.appendChild(
      h('thead', {}, h('tr', {}, h('th', {}, ''), ...runs.map(r => h('th', { title: r.id }, r.label))))
    );
    const body = h('tbody');
    let section = '';
    for (const row of this._data.table) {
      if (row.section !== section) {
        section = row.section;
        body.appendChild(
          h('tr', { className: 'jp-dl-compare-section' }, h('th', { colspan: runs.length + 1 }, section))
        );
      }
      body.appendChild(
        h('tr', { 'data-name': row.name }, h('th', {}, row.name), ...row.text.map(t => h('td', {}, t)))
      );
    }
    table.appendChild(body);
  }

  private _data: ICompareReply | null = null;
  private _message: HTMLElement;
  private _chart: HTMLElement;
  private _table: HTMLTableElement;
}

/** The compare tab's widget id: one tab per set of jobs. */
export function compareWidgetId(jobIds: string[]): string {
  return `jp-dl-compare-${jobIds.join('-').replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/** The compare tab for `jobIds` (two or more). */
export function createCompareWidget(api: JobsApi, jobIds: string[]): MainAreaWidget<CompareView> {
  const content = new CompareView(api, jobIds);
  const widget = new MainAreaWidget({ content });
  widget.id = compareWidgetId(jobIds);
  widget.addClass('jp-dl-compare-widget');
  widget.title.label = `Compare ${jobIds.length} jobs`;
  widget.title.caption = `Distributed jobs ${jobIds.join(', ')} compared`;
  widget.title.icon = jobsIcon;
  widget.title.closable = true;
  widget.toolbar.addItem('x-axis', new Widget({ node: content.axisSelect }));
  return widget;
}
