import { describe, expect, it } from 'vitest';

import {
  FIGURE_MIME,
  PLOTLY_MIME,
  RAW_LOSS,
  epochColumns,
  figureOf,
  forPanel,
  pageTheme,
  shownTraces,
  statusText
} from '../src/figures';
import { IEpochRow, IPlotlyFigure } from '../src/model';

/** A loss figure as the server sends it (jupyter_dl/live/loss_figure.py with raw=True). */
function lossFigure(): IPlotlyFigure {
  return {
    data: [
      { name: RAW_LOSS, x: [1, 2], y: [3, 1], visible: false },
      { name: 'loss (batch, smoothed)', x: [1, 2], y: [3, 2.8] },
      { name: 'loss', x: [2], y: [2], yaxis: 'y' },
      { name: 'accuracy', x: [2], y: [0.5], yaxis: 'y2' }
    ],
    layout: { width: 760, height: 360, autosize: false, yaxis: { title: 'loss' }, yaxis2: { title: 'metrics' } }
  };
}

describe('figures in a tab', () => {
  it('fill the tab and otherwise show what the cell shows', () => {
    const figure = lossFigure();
    const shown = forPanel(figure);
    expect(shown.layout.width).toBeUndefined();
    expect(shown.layout.autosize).toBe(true);
    expect(shown.layout.height).toBe(360);
    expect(shownTraces(shown)).toEqual(['loss (batch, smoothed)', 'loss', 'accuracy']);
    expect(shown.config?.displaylogo).toBe(false);
    expect(figure.layout.width).toBe(760); // the server's figure is left as it came
    shown.layout.yaxis.range = [0, 1]; // as plotly writes ranges into the layout it draws
    expect(figure.layout.yaxis).toEqual({ title: 'loss' });
    expect(shown.layout.uirevision).toBe(forPanel(figure).layout.uirevision); // zoom kept across redraws
    expect(forPanel(figure, { logY: true }).layout.uirevision).not.toBe(shown.layout.uirevision);
  });

  it('apply the raw-steps and log-scale toggles to the loss axis only', () => {
    const figure = lossFigure();
    const shown = forPanel(figure, { showRaw: true, logY: true });
    expect(shownTraces(shown)[0]).toBe(RAW_LOSS);
    expect(shown.layout.yaxis).toEqual({ title: 'loss', type: 'log' });
    expect(shown.layout.yaxis2).toEqual({ title: 'metrics' });
    expect(figure.data[0].visible).toBe(false);
    expect(figure.layout.yaxis).toEqual({ title: 'loss' });
    expect(shownTraces(forPanel(figure, { showRaw: false }))).not.toContain(RAW_LOSS);
  });

  it('follow the page theme', () => {
    expect(pageTheme({ dataset: { jpThemeLight: 'false' } })).toBe('dark');
    expect(pageTheme({ dataset: { jpThemeLight: 'true' } })).toBe('light');
    expect(pageTheme({ dataset: {} })).toBe('light');
  });
});

describe('the epoch table and status line', () => {
  it('put loss first and each val_ metric after its metric', () => {
    const rows: IEpochRow[] = [
      { epoch: 0, logs: { val_accuracy: 0.5, accuracy: 0.4, val_loss: 2, loss: 1 } },
      { epoch: 1, logs: { loss: 0.5, auc: 0.7 } }
    ];
    expect(epochColumns(rows)).toEqual(['loss', 'val_loss', 'accuracy', 'val_accuracy', 'auc']);
    expect(epochColumns([])).toEqual([]);
  });

  it('say the state, epochs, steps and restarts', () => {
    const status = { state: 'running', epochs_done: 3, epochs: 10, steps: 660, restarts: 0 };
    expect(statusText(status, 'running')).toBe('running · 3/10 epochs · 660 steps');
    expect(statusText({ ...status, epochs: null, steps: 0, restarts: 1 }, 'failed')).toBe(
      'failed · 3 epochs · 1 restart'
    );
    expect(statusText({ ...status, restarts: 2 }, 'running')).toBe('running · 3/10 epochs · 660 steps · 2 restarts');
    // An elastic job's changes of group are no restarts: its sizes say them.
    expect(statusText({ ...status, ranks: [2, 4, 2] }, 'running')).toBe(
      'running · 3/10 epochs · 660 steps · 2→4→2 ranks'
    );
    expect(statusText({ ...status, ranks: [2] }, 'running')).toBe('running · 3/10 epochs · 660 steps');
    expect(statusText(undefined, 'queued')).toBe('queued');
  });
});

describe("a job's static figure in its cell", () => {
  it('is the plotly figure its bundle names', () => {
    const figure = lossFigure();
    expect(figureOf({ [FIGURE_MIME]: { figure: PLOTLY_MIME }, [PLOTLY_MIME]: figure, 'text/plain': '' })).toBe(figure);
    expect(figureOf({ [FIGURE_MIME]: {}, [PLOTLY_MIME]: figure })).toBe(figure); // the plotly entry by default
  });

  it('is none when the bundle holds no figure', () => {
    expect(figureOf({ [FIGURE_MIME]: { figure: PLOTLY_MIME } })).toBeNull();
    expect(figureOf({ [FIGURE_MIME]: { figure: PLOTLY_MIME }, [PLOTLY_MIME]: { data: 'x' } })).toBeNull();
  });
});
