/**
 * The extension's commands, registered by concern: the panel's own, the job tabs, a job's actions, the cluster's.
 * Each `add…` function takes the small context the commands share.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, Notification, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IStateDB } from '@jupyterlab/statedb';
import { Widget } from '@lumino/widgets';

import { ApiError, JobsApi, errorMessage } from './api';
import { ITabConfig, isRestoring, jobIdArg, jobIdsArg } from './args';
import { compareWidgetId, createCompareWidget } from './compare';
import { formatRanks, isActive } from './format';
import { jobsIcon } from './icons';
import { JobsModel } from './jobsModel';
import { loadModelCode } from './keptModels';
import { ICellLike, jobCellIndex } from './jobCell';
import { createLogsWidget, widgetId } from './logs';
import { IJob } from './model';
import { PANEL_ID } from './panel';
import { createPlotWidget } from './plot';
import { ITabTrackers, openTab } from './tabs';

/** Command ids, stable for keyboard shortcuts and tests. */
export const CommandIDs = {
  gettingStarted: 'jupyter-dl:getting-started',
  openJobs: 'jupyter-dl:open-jobs',
  refreshJobs: 'jupyter-dl:refresh-jobs',
  /** Args: `{id}`. */
  showLogs: 'jupyter-dl:show-logs',
  /** Args: `{id}`. */
  showLossPlot: 'jupyter-dl:show-loss-plot',
  /** Args: `{id}`; asks for confirmation. */
  cancelJob: 'jupyter-dl:cancel-job',
  /** Args: `{id}`. */
  openNotebook: 'jupyter-dl:open-notebook',
  /** Args: `{id}` (a cluster id); asks for confirmation. */
  stopCluster: 'jupyter-dl:stop-cluster',
  /** Args: `{id, name}`: a cell loading that kept model, inserted below the current notebook's active cell. */
  loadModel: 'jupyter-dl:load-model',
  /** Args: `{ids}`: two or more job ids, compared in a main-area tab. */
  compareJobs: 'jupyter-dl:compare-jobs'
};

/** What the commands share. */
export interface ICommandContext {
  app: JupyterFrontEnd;
  api: JobsApi;
  model: JobsModel;
  trackers: ITabTrackers;
  /** The settings now (changed in place when they change). */
  config: ITabConfig;
  rendermime: IRenderMimeRegistry;
  /** JupyterLab's state database: what a logs tab shows survives a reload (null without one). */
  state: IStateDB | null;
}

/** The text of the getting-started dialog: the two lines a user needs. */
export function gettingStartedText(): string {
  return ['%load_ext jupyter_dl', '%%distribute -n 2   # on top of an unchanged Keras cell'].join('\n');
}

/** The job from the last poll, or fetched when the list has not got it (yet). */
async function findJob(ctx: ICommandContext, id: string): Promise<IJob> {
  return ctx.model.find(id) ?? (await ctx.api.getJob(id));
}

/** A confirmation dialog whose default (Enter, a stray keypress) is the safe choice: keep running. */
async function confirmStop(title: string, bodyClass: string, text: string, action: string): Promise<boolean> {
  const body = new Widget({ node: document.createElement('div') });
  body.addClass(bodyClass);
  body.node.textContent = text;
  const result = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: action })],
    defaultButton: 0
  });
  return result.button.accept;
}

/** Getting started, open the panel, refresh. */
export function addPanelCommands(ctx: ICommandContext): void {
  const { commands, shell } = ctx.app;
  commands.addCommand(CommandIDs.gettingStarted, {
    label: 'Distributed training: getting started',
    execute: () => {
      const body = new Widget({ node: document.createElement('pre') });
      body.addClass('jp-dl-about');
      body.node.textContent = gettingStartedText();
      return showDialog({
        title: 'jupyter-dl',
        body,
        buttons: [Dialog.okButton()]
      });
    }
  });
  commands.addCommand(CommandIDs.openJobs, {
    label: 'Open Distributed Jobs Panel',
    caption: 'Show the distributed training jobs sidebar',
    icon: jobsIcon,
    execute: () => {
      shell.activateById(PANEL_ID);
    }
  });
  commands.addCommand(CommandIDs.refreshJobs, {
    label: 'Refresh Distributed Jobs',
    caption: 'Fetch the distributed jobs and cluster state now',
    execute: () => ctx.model.fetchNow()
  });
}

/**
 * Logs, loss plot and compare tabs: an open one comes to the front, else a new one opens (and is tracked, so that
 * it comes back after a reload). A tab being restored for a job that is gone fails quietly: the restorer drops it.
 */
export function addTabCommands(ctx: ICommandContext): void {
  const { commands, shell } = ctx.app;
  const { api, config, rendermime, trackers } = ctx;
  commands.addCommand(CommandIDs.showLogs, {
    label: 'Show Distributed Job Logs',
    isEnabled: args => !!jobIdArg(args),
    execute: async args => {
      const id = jobIdArg(args);
      try {
        await openTab(shell, trackers.logs, widgetId('logs', id), async () =>
          createLogsWidget(api, await findJob(ctx, id), {
            interval: config.pollInterval,
            tail: config.logTailLines,
            choices: ctx.state
          })
        );
      } catch (error) {
        if (isRestoring(args)) {
          throw error;
        }
        void showErrorMessage('Cannot show the job logs', errorMessage(error));
      }
    }
  });
  commands.addCommand(CommandIDs.showLossPlot, {
    label: 'Plot Distributed Job Loss',
    isEnabled: args => !!jobIdArg(args),
    execute: async args => {
      const id = jobIdArg(args);
      try {
        await openTab(shell, trackers.plots, widgetId('plot', id), async () =>
          createPlotWidget(api, await findJob(ctx, id), { interval: config.pollInterval, rendermime })
        );
      } catch (error) {
        if (isRestoring(args)) {
          throw error;
        }
        void showErrorMessage('Cannot plot the job loss', errorMessage(error));
      }
    }
  });
  commands.addCommand(CommandIDs.compareJobs, {
    label: 'Compare Distributed Jobs',
    isEnabled: args => jobIdsArg(args) !== null,
    execute: async args => {
      const ids = jobIdsArg(args);
      if (ids) {
        // the same jobs compared already: that tab comes to the front
        await openTab(shell, trackers.compare, compareWidgetId(ids), () => createCompareWidget(api, ids, rendermime));
      }
    }
  });
}

/**
 * Makes the cell that ran `jobId` the notebook's active cell and scrolls it into view; false when no cell shows
 * the job (its outputs were cleared). `panel` is what `docmanager:open` returned: a NotebookPanel, read by shape
 * (this extension does not depend on the notebook package).
 */
async function revealJobCell(panel: any, jobId: string): Promise<boolean> {
  const notebook = panel?.content;
  if (!notebook || !Array.isArray(notebook.widgets)) {
    return true; // not a notebook view: nothing to look for
  }
  await panel.context?.ready;
  await panel.revealed;
  const cells: ICellLike[] = notebook.widgets.map((cell: any) => {
    const outputs = cell.model?.outputs;
    const metadata: unknown[] = [];
    for (let i = 0; outputs && i < outputs.length; i++) {
      metadata.push(outputs.get(i)?.metadata);
    }
    return {
      outputMetadata: metadata,
      hasClass: (name: string) => !!cell.node?.querySelector(`.${CSS.escape(name)}`)
    };
  });
  const index = jobCellIndex(cells, jobId);
  if (index < 0) {
    return false;
  }
  notebook.activeCellIndex = index;
  if (typeof notebook.scrollToItem === 'function') {
    await notebook.scrollToItem(index, 'center');
  } else {
    notebook.widgets[index].node.scrollIntoView({ block: 'center' });
  }
  return true;
}

/** Open a job's notebook, load a kept model into the current notebook. */
export function addJobCommands(ctx: ICommandContext): void {
  const { commands, shell } = ctx.app;
  commands.addCommand(CommandIDs.openNotebook, {
    label: 'Open Distributed Job Notebook',
    isEnabled: args => !!jobIdArg(args),
    execute: async args => {
      try {
        const job = await findJob(ctx, jobIdArg(args));
        if (!job.notebook) {
          Notification.info(
            job.notebook_file
              ? `The notebook of job ${job.name} (${job.notebook_file}) is outside this server's root folder.`
              : `Job ${job.name} was not started from a notebook.`,
            { autoClose: 6000 }
          );
          return;
        }
        // The server gives the path relative to its root, which is what the document manager opens.
        const panel = await commands.execute('docmanager:open', { path: job.notebook });
        if (!(await revealJobCell(panel, job.id))) {
          Notification.info(`The notebook has no cell showing job ${job.name} (${job.id}) any more.`, {
            autoClose: 4000
          });
        }
        return panel;
      } catch (error) {
        void showErrorMessage('Cannot open the notebook', errorMessage(error));
      }
    }
  });
  commands.addCommand(CommandIDs.loadModel, {
    label: 'Load Kept Model into Notebook',
    isEnabled: args => !!jobIdArg(args) && typeof args?.name === 'string',
    execute: async args => {
      // The notebook commands act on the notebook last focused (the tracker's current one); without any notebook
      // open they would do nothing, so say so instead.
      const notebookOpen = [...shell.widgets('main')].some(w => w.hasClass('jp-NotebookPanel'));
      if (!notebookOpen) {
        Notification.warning('Open a notebook first: the model is loaded in a new cell of the current notebook.', {
          autoClose: 6000
        });
        return;
      }
      const text = loadModelCode(jobIdArg(args), String(args.name));
      await commands.execute('notebook:insert-cell-below');
      await commands.execute('notebook:replace-selection', { text });
    }
  });
}

/** Cancel a job, after asking (the default answer keeps it running). */
export function addCancelCommand(ctx: ICommandContext): void {
  const { api, model } = ctx;
  ctx.app.commands.addCommand(CommandIDs.cancelJob, {
    label: 'Cancel Distributed Job',
    isEnabled: args => !!jobIdArg(args),
    execute: async args => {
      const id = jobIdArg(args);
      let job: IJob;
      try {
        job = await findJob(ctx, id);
      } catch (error) {
        void showErrorMessage('Cannot cancel the job', errorMessage(error));
        return;
      }
      if (!isActive(job.state)) {
        Notification.info(`Job ${job.name} has already ${job.state}.`, { autoClose: 4000 });
        return;
      }
      const text = `Cancel “${job.name}” (${formatRanks(job)}, ${job.state})? It stops on every rank.`;
      if (!(await confirmStop('Cancel distributed job?', 'jp-dl-cancel-dialog', text, 'Cancel job'))) {
        return;
      }
      model.markCancelling(id);
      try {
        await api.cancelJob(id);
      } catch (error) {
        model.markCancelling(id, false);
        if (error instanceof ApiError && error.code === 'not_running') {
          Notification.info(error.message || `Job ${job.name} has already finished.`, {
            autoClose: 4000
          });
        } else {
          void showErrorMessage('Cannot cancel the job', errorMessage(error));
        }
      }
      await model.fetchNow();
    }
  });
}

/** Stop a cluster, after asking (the default answer keeps it running). */
export function addClusterCommands(ctx: ICommandContext): void {
  const { api, model } = ctx;
  ctx.app.commands.addCommand(CommandIDs.stopCluster, {
    label: 'Stop Distributed Training Cluster',
    isEnabled: args => !!jobIdArg(args),
    execute: async args => {
      const id = jobIdArg(args);
      const cluster = model.cluster?.clusters.find(c => c.cluster_id === id);
      const owner = cluster?.owner?.notebook;
      const text =
        `Stop cluster ${id}${owner ? ` of ${owner}` : ''} (${cluster?.engines ?? '?'} engines)? ` +
        'Jobs running on it stop too.';
      if (!(await confirmStop('Stop cluster?', 'jp-dl-stop-dialog', text, 'Stop cluster'))) {
        return;
      }
      model.markStopping(id);
      try {
        await api.stopCluster(id);
      } catch (error) {
        model.markStopping(id, false);
        void showErrorMessage('Cannot stop the cluster', errorMessage(error));
      }
      await model.fetchNow();
    }
  });
}

/** Every command of the extension. */
export function addCommands(ctx: ICommandContext): void {
  addPanelCommands(ctx);
  addTabCommands(ctx);
  addJobCommands(ctx);
  addCancelCommand(ctx);
  addClusterCommands(ctx);
}
