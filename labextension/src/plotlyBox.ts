/**
 * A box in a tab that draws a plotly figure with JupyterLab's own renderer for `application/vnd.plotly.v1+json`
 * (the `jupyterlab-plotly` mime extension the `plotly` package ships), the renderer that draws the figure in the
 * notebook cell.
 *
 * That renderer draws once: `renderModel` on a renderer that already holds a plot returns without drawing. So a
 * figure that changes (a running job) is redrawn with `Plotly.react` on the renderer's own plot, through the
 * plotly.js the renderer loaded (kept as a static of its class): plotly diffs the data into the existing plot, so
 * nothing flickers and nothing is left behind. Should a later renderer keep no such static, each figure goes to a
 * new renderer, put in place once drawn, and the old one is disposed.
 */
import { IRenderMime, IRenderMimeRegistry, MimeModel } from '@jupyterlab/rendermime';
import { PanelLayout, Widget } from '@lumino/widgets';

import { PLOTLY_MIME } from './figures';
import { IPlotlyFigure } from './model';

export const NO_RENDERER =
  'Plotly figures cannot be shown: the plotly JupyterLab extension is missing (pip install plotly, then reload).';

export interface IPlotlyLib {
  react(node: HTMLElement, data: unknown, layout: unknown, config?: unknown): Promise<unknown>;
  purge?(node: HTMLElement): void;
}

export class PlotlyBox extends Widget {
  constructor(
    private readonly _rendermime: IRenderMimeRegistry | null,
    className: string
  ) {
    super();
    this.addClass(className);
    this.addClass('jp-dl-PlotlyBox');
    this.layout = new PanelLayout();
    this._note = new Widget({ node: document.createElement('div') });
    this._note.addClass('jp-dl-plot-note');
    (this.layout as PanelLayout).addWidget(this._note);
  }

  /**
   * Starts loading plotly.js (the renderer loads it on its first figure, a few MB) while the tab's data is still on
   * its way: a small figure drawn off the page, once per page.
   */
  static preload(rendermime: IRenderMimeRegistry | null): Promise<void> {
    return PlotlyBox.library(rendermime).then(() => undefined);
  }

  /**
   * plotly.js as JupyterLab's plotly renderer loads it (null without that renderer), loaded once per page. The
   * cell's live figure (jupyter_dl/live/live_figure.js) draws with it too, so the page compiles plotly.js once.
   */
  static library(rendermime: IRenderMimeRegistry | null): Promise<IPlotlyLib | null> {
    if (!PlotlyBox._library) {
      PlotlyBox._library = PlotlyBox._renderOffPage(rendermime);
    }
    return PlotlyBox._library;
  }

  private static async _renderOffPage(rendermime: IRenderMimeRegistry | null): Promise<IPlotlyLib | null> {
    if (!rendermime?.mimeTypes.includes(PLOTLY_MIME)) {
      return null;
    }
    const renderer = rendermime.createRenderer(PLOTLY_MIME);
    const figure = WARM_UP_FIGURE;
    try {
      await renderer.renderModel(new MimeModel({ data: { [PLOTLY_MIME]: figure } as any }));
      return plotlyOf(renderer);
    } catch {
      return null; // Drawing the tab's figure will say what is wrong.
    } finally {
      renderer.dispose();
    }
  }

  private static _library: Promise<IPlotlyLib | null> | null = null;

  /** Whether JupyterLab has a renderer for plotly figures. */
  get available(): boolean {
    return !!this._rendermime && this._rendermime.mimeTypes.includes(PLOTLY_MIME);
  }

  /** Draws `figure`, or shows `placeholder` (a line of text) when it is null. Calls are drawn in order. */
  draw(figure: IPlotlyFigure | null, placeholder = ''): Promise<void> {
    this._queue = this._queue
      .then(() => this._draw(figure, placeholder))
      .catch(error => {
        this._setNote(`Cannot draw the figure: ${error instanceof Error ? error.message : String(error)}`);
      });
    return this._queue;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._drop();
    super.dispose();
  }

  private async _draw(figure: IPlotlyFigure | null, placeholder: string): Promise<void> {
    if (this.isDisposed) {
      return;
    }
    if (figure === null || !this.available) {
      this._drop();
      this._setNote(figure === null ? placeholder : NO_RENDERER);
      return;
    }
    this._setNote('');
    const plotly = this._plotly();
    if (this._renderer && plotly && this._renderer.node.querySelector('.plot-container')) {
      await plotly.react(this._renderer.node, figure.data, figure.layout, figure.config);
      return;
    }
    const renderer = this._rendermime!.createRenderer(PLOTLY_MIME);
    renderer.addClass('jp-dl-plotly');
    (this.layout as PanelLayout).addWidget(renderer);
    // The renderer may write into the figure (a default height): it gets its own copy of the layout.
    const data = { [PLOTLY_MIME]: { ...figure, layout: { ...figure.layout } } } as any;
    await renderer.renderModel(new MimeModel({ data }));
    this._drop(); // the previous renderer, if any: replaced only now that the new one is drawn
    this._renderer = renderer;
  }

  /** plotly.js as the renderer loaded it, once it did. */
  private _plotly(): IPlotlyLib | null {
    return this._renderer ? plotlyOf(this._renderer) : null;
  }

  private _drop(): void {
    const renderer = this._renderer;
    if (!renderer) {
      return;
    }
    this._plotly()?.purge?.(renderer.node); // plotly's listeners and caches on the node
    this._renderer = null;
    renderer.dispose();
  }

  private _setNote(text: string): void {
    this._note.node.textContent = text;
    this._note.setHidden(!text);
  }

  private _renderer: IRenderMime.IRenderer | null = null;
  private _note: Widget;
  private _queue: Promise<void> = Promise.resolve();
}

/**
 * What plotly.js first draws off the page: what the live figures draw (lines, lines with markers, a second y axis,
 * a legend, an epoch mark). The browser compiles each plotly.js function on its first call; drawn here, while the
 * page is idle, that is not left to a job's first redraws (150-240 ms each, against 60 ms for later ones).
 */
const WARM_UP_FIGURE = {
  data: [
    { type: 'scatter', mode: 'lines', name: 'a', x: [0, 1, 2], y: [1, 0.5, 0.25] },
    { type: 'scatter', mode: 'lines+markers', name: 'b', x: [0, 2], y: [0.5, 0.75], yaxis: 'y2' }
  ],
  layout: {
    width: 300,
    height: 200,
    xaxis: { title: { text: 'step' }, ticklabeloverflow: 'allow', tickangle: 0 },
    yaxis: { title: { text: 'loss' }, ticklabeloverflow: 'allow' },
    yaxis2: { overlaying: 'y', side: 'right', ticklabeloverflow: 'allow' },
    legend: { orientation: 'h', y: -0.2 },
    shapes: [{ type: 'line', x0: 1, x1: 1, yref: 'paper', y0: 0, y1: 1, line: { dash: 'dot' } }]
  }
};

/** The plotly.js a plotly renderer loaded (a static of its class), once it drew; else null. */
function plotlyOf(renderer: IRenderMime.IRenderer): IPlotlyLib | null {
  const lib = (renderer.constructor as { Plotly?: IPlotlyLib } | undefined)?.Plotly;
  return lib && typeof lib.react === 'function' ? lib : null;
}
