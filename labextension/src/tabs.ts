/**
 * The job tabs (logs, loss plot, compare) in WidgetTrackers, one namespace each, so that the layout restorer
 * saves them and opens them again, through their commands, when the page reloads.
 */
import { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';

import { ITabConfig, compareRestoreName } from './args';
import { CompareView } from './compare';
import { LogsView } from './logs';
import { LossPlotView } from './plot';

/** The open job tabs, by kind. */
export interface ITabTrackers {
  logs: WidgetTracker<MainAreaWidget<LogsView>>;
  plots: WidgetTracker<MainAreaWidget<LossPlotView>>;
  compare: WidgetTracker<MainAreaWidget<CompareView>>;
}

export function createTabTrackers(): ITabTrackers {
  return {
    logs: new WidgetTracker({ namespace: 'jupyter-dl-logs' }),
    plots: new WidgetTracker({ namespace: 'jupyter-dl-loss' }),
    compare: new WidgetTracker({ namespace: 'jupyter-dl-compare' })
  };
}

/**
 * Restores the tabs open before the page reloaded through the commands that open them (`{id}` for logs and loss,
 * `{ids}` for compare; `restoring` lets a tab of a job that is gone be dropped without an error dialog).
 */
export function restoreTabs(
  restorer: ILayoutRestorer,
  trackers: ITabTrackers,
  commands: { showLogs: string; showLossPlot: string; compareJobs: string }
): void {
  void restorer.restore(trackers.logs, {
    command: commands.showLogs,
    args: widget => ({ id: widget.content.jobId, restoring: true }),
    name: widget => widget.content.jobId
  });
  void restorer.restore(trackers.plots, {
    command: commands.showLossPlot,
    args: widget => ({ id: widget.content.jobId, restoring: true }),
    name: widget => widget.content.jobId
  });
  void restorer.restore(trackers.compare, {
    command: commands.compareJobs,
    args: widget => ({ ids: [...widget.content.jobIds] }),
    name: widget => compareRestoreName(widget.content.jobIds)
  });
}

/**
 * Shows the tab `tracker` holds for `id` when there is one; else adds the one `create` makes (to the tracker
 * first, so the restorer names it) and shows it.
 */
export async function openTab<T extends MainAreaWidget>(
  shell: JupyterFrontEnd.IShell,
  tracker: WidgetTracker<T>,
  id: string,
  create: () => Promise<T> | T
): Promise<T> {
  const existing = tracker.find(widget => widget.id === id && !widget.isDisposed);
  if (existing) {
    shell.activateById(existing.id);
    return existing;
  }
  const widget = await create();
  // Another call may have opened it while `create` waited for the job.
  const raced = tracker.find(w => w.id === widget.id && !w.isDisposed);
  if (raced) {
    widget.dispose();
    shell.activateById(raced.id);
    return raced;
  }
  void tracker.add(widget);
  shell.add(widget, 'main');
  shell.activateById(widget.id);
  return widget;
}

/** Applies changed settings to the open tabs. */
export function applyTabConfig(trackers: ITabTrackers, config: ITabConfig): void {
  trackers.logs.forEach(tab => {
    tab.content.interval = config.pollInterval;
    tab.content.tail = config.logTailLines;
  });
  trackers.plots.forEach(tab => {
    tab.content.interval = config.pollInterval;
  });
}
