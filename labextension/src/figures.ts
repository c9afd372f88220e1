/**
 * What the tabs do to the figures the server builds (the same plotly figures the notebook cell shows) before
 * drawing them: fit them to the tab, apply the log-scale and raw-steps toggles, and order the epoch table.
 * Pure: no JupyterLab imports.
 */
import { IEpochRow, IJobFigures, IPlotlyFigure, Theme } from './model';

type JobStatus = NonNullable<IJobFigures['status']>;

export const PLOTLY_MIME = 'application/vnd.plotly.v1+json';
/** jupyter_dl/live/view.py FIGURE_MIME: a job's static figures in its cell (cellFigure.ts draws them); its value
 * names the bundle's entry that holds the figure. */
export const FIGURE_MIME = 'application/vnd.jupyter-dl.figure+json';

/** The figure a FIGURE_MIME bundle names, or null when the bundle holds none. */
export function figureOf(data: { [mime: string]: unknown }): IPlotlyFigure | null {
  const entry = data[FIGURE_MIME] as { figure?: string } | undefined;
  const figure = data[entry?.figure ?? PLOTLY_MIME] as IPlotlyFigure | undefined;
  return figure && Array.isArray(figure.data) && figure.layout ? figure : null;
}

/** The unsmoothed per-batch loss trace (jupyter_dl/live/loss_figure.py RAW_LOSS): hidden unless "Raw steps". */
export const RAW_LOSS = 'loss (batch)';

export interface IPanelOptions {
  /** A log loss axis (the left one; the metrics axis stays linear). */
  logY?: boolean;
  /** Show the raw per-batch loss beside its moving average. */
  showRaw?: boolean;
}

/**
 * A copy of `figure` for a tab: as wide as the tab (the cell's figure has a fixed width, so it does not jump when
 * the live widget becomes a static copy; a tab is resized by the user), with the toggles applied. The layout is
 * copied whole, since plotly writes into the layout it draws (ranges): the server's figure stays as it came, and
 * toggling again starts from it. `uirevision` keeps the user's zoom and legend clicks while a running job's figure
 * is redrawn every poll; switching the log scale starts the axes afresh.
 */
export function forPanel(figure: IPlotlyFigure, options: IPanelOptions = {}): IPlotlyFigure {
  const layout: { [key: string]: any } = {
    ...JSON.parse(JSON.stringify(figure.layout)),
    autosize: true,
    uirevision: options.logY ? 'log' : 'linear'
  };
  delete layout.width;
  if (options.logY) {
    layout.yaxis = { ...(layout.yaxis ?? {}), type: 'log' };
  }
  const data = figure.data.map(trace => (trace.name === RAW_LOSS ? { ...trace, visible: !!options.showRaw } : trace));
  return { data, layout, config: { displaylogo: false, ...(figure.config ?? {}) } };
}

/** The names of the traces a figure draws (hidden ones left out). */
export function shownTraces(figure: IPlotlyFigure): string[] {
  return figure.data.filter(t => t.visible !== false).map(t => String(t.name ?? ''));
}

/** Which JupyterLab theme the page shows, from the body's `data-jp-theme-light` (set by the theme manager). */
export function pageTheme(body: { dataset: { [key: string]: string | undefined } }): Theme {
  return body.dataset.jpThemeLight === 'false' ? 'dark' : 'light';
}

/** The epoch table's columns: loss first, each val_ metric after its metric, the rest by name. */
export function epochColumns(rows: ReadonlyArray<IEpochRow>): string[] {
  const keys = new Set<string>();
  for (const row of rows) {
    Object.keys(row.logs).forEach(k => keys.add(k));
  }
  const order = (k: string): [number, string] => {
    const base = k.startsWith('val_') ? k.slice(4) : k;
    return [base === 'loss' ? 0 : 1, `${base}\u0000${k.startsWith('val_') ? 1 : 0}`];
  };
  return [...keys].sort((a, b) => {
    const [ra, sa] = order(a);
    const [rb, sb] = order(b);
    return ra - rb || (sa < sb ? -1 : sa > sb ? 1 : 0);
  });
}

/** The status line of the loss tab: `running · 3/10 epochs · 660 steps` (an elastic job: `· 2→4 ranks`). */
export function statusText(status: JobStatus | undefined, state: string): string {
  if (!status) {
    return state;
  }
  const planned = status.epochs ? `/${status.epochs}` : '';
  return [
    state,
    `${status.epochs_done}${planned} epochs`,
    status.steps ? `${status.steps} steps` : '',
    (status.ranks?.length ?? 0) > 1 ? `${status.ranks?.join('→')} ranks` : '',
    status.restarts ? `${status.restarts} ${status.restarts === 1 ? 'restart' : 'restarts'}` : ''
  ]
    .filter(Boolean)
    .join(' · ');
}
