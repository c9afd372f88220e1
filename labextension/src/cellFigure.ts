/**
 * The static figures a job leaves in its cell when it ends (jupyter_dl/live/view.py `static_figure_bundle`): the
 * loss figure that replaces the live one, and the resources figure under it. Their bundle holds a plotly figure
 * (`application/vnd.plotly.v1+json`) for any front end, and FIGURE_MIME, which names it, for this one.
 *
 * JupyterLab's plotly renderer draws such a figure at once, in the task that received the output, then draws it
 * again (`redraw`, `resize`) and a third time off the page for a PNG: 300-660 ms of blocked page at a job's end
 * on a loaded 2-core machine. Here each figure is drawn once, with the page's shared plotly.js, when the page is
 * idle and in its turn with the live figures (one per frame, as jupyter_dl/live/live_figure.js does), in a box of
 * the figure's fixed size (so the output does not jump when it is drawn a moment later).
 */
import { IRenderMime, IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { Widget } from '@lumino/widgets';

import { FIGURE_MIME, figureOf } from './figures';
import { IPlotlyFigure } from './model';
import { IPlotlyLib, NO_RENDERER, PlotlyBox } from './plotlyBox';

/** Before JupyterLab's plotly renderer (rank 2), after the widget renderer (0). */
export const FIGURE_RANK = 1;
/** The longest a figure waits for an idle page, ms: a page that is never idle still gets its figure. */
const IDLE_TIMEOUT_MS = 1000;
const TURNS = '__jupyterDlLiveFigureTurns'; // shared with live_figure.js: the page's figures draw one per frame

/** The renderer factory for FIGURE_MIME; its figures are drawn with the plotly.js `rendermime`'s renderer loads. */
export function cellFigureFactory(rendermime: IRenderMimeRegistry): IRenderMime.IRendererFactory {
  return {
    safe: true, // JSON drawn by plotly.js, as the plotly renderer, which is safe too
    mimeTypes: [FIGURE_MIME],
    defaultRank: FIGURE_RANK,
    createRenderer: () => new CellFigure(() => PlotlyBox.library(rendermime))
  };
}

export class CellFigure extends Widget implements IRenderer {
  constructor(private readonly _library: () => Promise<IPlotlyLib | null>) {
    super();
    this.addClass('jp-dl-cell-figure');
  }

  /** Sizes the box now and draws later (see the module's comment); a second call (the model's data changed) does
   * nothing once a figure is drawn or on its way. */
  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    if (this._drawing) {
      return Promise.resolve();
    }
    const figure = figureOf(model.data);
    if (!figure) {
      this.node.textContent = 'This output holds no figure.';
      return Promise.resolve();
    }
    const { width, height } = figure.layout;
    if (typeof width === 'number' && typeof height === 'number') {
      this.node.style.width = `${width}px`;
      this.node.style.height = `${height}px`;
      this.node.style.contain = 'strict';
    }
    this._drawing = whenIdle().then(() => inTurn(() => this._draw(figure)));
    return Promise.resolve();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._plotly?.purge?.(this.node);
    super.dispose();
  }

  private async _draw(figure: IPlotlyFigure): Promise<void> {
    const plotly = await this._library();
    if (this.isDisposed) {
      return;
    }
    if (!plotly) {
      this.node.textContent = NO_RENDERER;
      return;
    }
    this._plotly = plotly;
    // plotly.js writes into the layout it draws (ranges): the model's figure stays as it came.
    const layout = JSON.parse(JSON.stringify(figure.layout));
    const config = { displaylogo: false, responsive: false, ...figure.config };
    try {
      await plotly.react(this.node, figure.data, layout, config);
    } catch (error) {
      this.node.textContent = `Cannot draw the figure: ${error instanceof Error ? error.message : String(error)}`;
    }
  }

  private _drawing: Promise<void> | null = null;
  private _plotly: IPlotlyLib | null = null;
}

type IRenderer = IRenderMime.IRenderer;

function whenIdle(): Promise<void> {
  const idle = (globalThis as any).requestIdleCallback as
    ((fn: () => void, options: { timeout: number }) => number) | undefined;
  return new Promise(resolve => (idle ? idle(() => resolve(), { timeout: IDLE_TIMEOUT_MS }) : setTimeout(resolve, 0)));
}

function nextFrame(): Promise<void> {
  return new Promise(resolve => requestAnimationFrame(() => resolve()));
}

/** Runs `draw` in a frame of its own once the page's figures before it drew. */
function inTurn(draw: () => Promise<void>): Promise<void> {
  const shared = globalThis as any;
  const turn = (shared[TURNS] ?? Promise.resolve()).then(nextFrame).then(draw);
  shared[TURNS] = turn.catch(() => undefined);
  return turn;
}
