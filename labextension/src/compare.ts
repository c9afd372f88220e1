/**
 * The compare tab: the figure `%dl_compare` draws of the selected jobs (against steps, epochs or wall time), as the
 * compare endpoint builds it, drawn by JupyterLab's plotly renderer; then its table of the settings that differ,
 * final metrics and performance.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IDisposable } from '@lumino/disposable';
import { Message } from '@lumino/messaging';
import { PanelLayout, Widget } from '@lumino/widgets';

import { JobsApi, errorMessage } from './api';
import { h, setText } from './dom';
import { forPanel, pageTheme } from './figures';
import { jobsIcon } from './icons';
import { CompareAxis, ICompareReply, Theme } from './model';
import { PlotlyBox } from './plotlyBox';
import { watchPageTheme } from './theme';

const AXES: ReadonlyArray<[CompareAxis, string]> = [
  ['step', 'Steps'],
  ['epoch', 'Epochs'],
  ['time', 'Wall time']
];

export class CompareView extends Widget {
  constructor(
    private readonly _api: JobsApi,
    readonly jobIds: string[],
    rendermime: IRenderMimeRegistry | null
  ) {
    super();
    this.addClass('jp-dl-CompareView');
    this.axisSelect = h('select', { className: 'jp-dl-compare-x', title: 'x axis' });
    for (const [value, label] of AXES) {
      this.axisSelect.appendChild(h('option', { value }, label));
    }
    this.axisSelect.addEventListener('change', () => void this.load());
    this._message = h('div', { className: 'jp-dl-plot-message', role: 'alert' });
    this._chart = new PlotlyBox(rendermime, 'jp-dl-compare-chart-box');
    this._table = h('table', { className: 'jp-dl-compare-table' });
    const layout = (this.layout = new PanelLayout());
    layout.addWidget(new Widget({ node: this._message }));
    layout.addWidget(this._chart);
    layout.addWidget(new Widget({ node: this._table }));
    void this._chart.draw(null, 'Loading comparison…');
    PlotlyBox.preload(rendermime);
    // The server builds the figure for a theme: a theme change redraws it, now if the tab shows, else when shown.
    this._themeWatch = watchPageTheme(() => {
      if (this.isVisible) {
        this._followTheme();
      }
    });
    void this.load();
  }

  readonly axisSelect: HTMLSelectElement;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._themeWatch.dispose();
    super.dispose();
  }

  /** Fetches the comparison against the chosen x axis, for the page's theme, and draws it. */
  async load(): Promise<void> {
    const x = this.axisSelect.value as CompareAxis;
    const theme = pageTheme(document.body);
    const request = ++this._requests;
    this._theme = theme;
    let data: ICompareReply | null = null;
    let message = '';
    try {
      data = await this._api.compare(this.jobIds, x, theme);
    } catch (error) {
      message = `Cannot compare these jobs: ${errorMessage(error)}`;
    }
    if (request !== this._requests || this.isDisposed) {
      return; // a later load (another axis, another theme) is on its way: its reply is the one to show
    }
    this._data = data;
    setText(this._message, message);
    this._renderTable();
    await this._chart.draw(this._data ? forPanel(this._data.figure) : null);
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
      body.appendChild(h('tr', { 'data-name': row.name }, h('th', {}, row.name), ...row.text.map(t => h('td', {}, t))));
    }
    table.appendChild(body);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._followTheme(); // the theme changed while the tab was hidden (JupyterLab hides the shell while it swaps)
  }

  private _followTheme(): void {
    if (pageTheme(document.body) !== this._theme) {
      void this.load();
    }
  }

  private _data: ICompareReply | null = null;
  private _theme: Theme | null = null;
  private _requests = 0;
  private _themeWatch: IDisposable;
  private _message: HTMLElement;
  private _chart: PlotlyBox;
  private _table: HTMLTableElement;
}

/** The compare tab's widget id: one tab per set of jobs. */
export function compareWidgetId(jobIds: string[]): string {
  return `jp-dl-compare-${jobIds.join('-').replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/** The compare tab for `jobIds` (two or more). */
export function createCompareWidget(
  api: JobsApi,
  jobIds: string[],
  rendermime: IRenderMimeRegistry | null
): MainAreaWidget<CompareView> {
  const content = new CompareView(api, jobIds, rendermime);
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
