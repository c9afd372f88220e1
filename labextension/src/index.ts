import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  MainAreaWidget,
  Notification,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { URLExt } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

import { ApiError, JobsApi, errorMessage } from './api';
import { formatRanks, isActive } from './format';
import { jobsIcon } from './icons';
import { DEFAULT_POLL_INTERVAL, JobsModel, MIN_POLL_INTERVAL } from './jobsModel';
import { DEFAULT_LOG_TAIL, LogsView, createLogsWidget } from './logs';
import { compareWidgetId, createCompareWidget } from './compare';
import { loadModelCode, modelDownloadPath } from './keptModels';
import { IJob } from './model';
import { JobsPanel, PANEL_ID } from './panel';
import { LossPlotView, createPlotWidget } from './plot';

export { PANEL_ID } from './panel';

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

const CATEGORY = 'Distributed training';

/** The text of the getting-started dialog: the two lines a user needs. */
export function gettingStartedText(): string {
  return [
    '%load_ext jupyter_dl',
    '%%distribute -n 2   # on top of an unchanged Keras cell'
  ].join('\n');
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-dl:plugin',
  description: 'Distributed deep learning from notebooks: the distributed jobs sidebar.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [ICommandPalette, ISettingRegistry, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null
  ) => {
    const { commands, shell } = app;
    const api = new JobsApi();
    const config = { pollInterval: DEFAULT_POLL_INTERVAL, logTailLines: DEFAULT_LOG_TAIL };

    let panel: JobsPanel | null = null;
    const model = new JobsModel({
      api,
      interval: config.pollInterval,
      isVisible: () => panel !== null && panel.isVisible
    });
    const logTabs = new Map<string, MainAreaWidget<LogsView>>();
    const plotTabs = new Map<string, MainAreaWidget<LossPlotView>>();

    /** The job from the last poll, or fetched when the list has not got it (yet). */
    const findJob = async (id: string): Promise<IJob> => model.find(id) ?? (await api.getJob(id));
    const jobId = (args: any): string => (typeof args?.id === 'string' ? args.id : '');

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
      execute: () => model.fetchNow()
    });

    commands.addCommand(CommandIDs.showLogs, {
      label: 'Show Distributed Job Logs',
      isEnabled: args => !!jobId(args),
      execute: async args => {
        const id = jobId(args);
        try {
          const existing = logTabs.get(id);
          if (existing && !existing.isDisposed) {
            shell.activateById(existing.id);
            return;
          }
          const job = await findJob(id);
          const widget = createLogsWidget(api, job, {
            interval: config.pollInterval,
            tail: config.logTailLines
          });
          logTabs.set(id, widget);
          widget.disposed.connect(() => logTabs.delete(id));
          shell.add(widget, 'main');
          shell.activateById(widget.id);
        } catch (error) {
          void showErrorMessage('Cannot show the job logs', errorMessage(error));
        }
      }
    });

    commands.addCommand(CommandIDs.showLossPlot, {
      label: 'Plot Distributed Job Loss',
      isEnabled: args => !!jobId(args),
      execute: async args => {
        const id = jobId(args);
        try {
          const existing = plotTabs.get(id);
          if (existing && !existing.isDisposed) {
            shell.activateById(existing.id);
            return;
          }
          const job = await findJob(id);
          const widget = createPlotWidget(api, job, { interval: config.pollInterval, rendermime });
          plotTabs.set(id, widget);
          widget.disposed.connect(() => plotTabs.delete(id));
          shell.add(widget, 'main');
          shell.activateById(widget.id);
        } catch (error) {
          void showErrorMessage('Cannot plot the job loss', errorMessage(error));
        }
      }
    });

    commands.addCommand(CommandIDs.openNotebook, {
      label: 'Open Distributed Job Notebook',
      isEnabled: args => !!jobId(args),
      execute: async args => {
        try {
          const job = await findJob(jobId(args));
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
          return await commands.execute('docmanager:open', { path: job.notebook });
        } catch (error) {
          void showErrorMessage('Cannot open the notebook', errorMessage(error));
        }
      }
    });

    commands.addCommand(CommandIDs.loadModel, {
      label: 'Load Kept Model into Notebook',
      isEnabled: args => !!jobId(args) && typeof args?.name === 'string',
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
        const text = loadModelCode(jobId(args), String(args.name));
        await commands.execute('notebook:insert-cell-below');
        await commands.execute('notebook:replace-selection', { text });
      }
    });

    commands.addCommand(CommandIDs.compareJobs, {
      label: 'Compare Distributed Jobs',
      isEnabled: args => Array.isArray(args?.ids) && (args.ids as unknown[]).length >= 2,
      execute: args => {
        const ids = (args.ids as unknown[]).map(String);
        const id = compareWidgetId(ids);
        if (![...shell.widgets('main')].some(w => w.id === id)) {
          shell.add(createCompareWidget(api, ids, rendermime), 'main');
        }  // else the same jobs are compared already: show that tab
        shell.activateById(id);
      }
    });

    commands.addCommand(CommandIDs.cancelJob, {
      label: 'Cancel Distributed Job',
      isEnabled: args => !!jobId(args),
      execute: async args => {
        const id = jobId(args);
        let job: IJob;
        try {
          job = await findJob(id);
        } catch (error) {
          void showErrorMessage('Cannot cancel the job', errorMessage(error));
          return;
        }
        if (!isActive(job.state)) {
          Notification.info(`Job ${job.name} has already ${job.state}.`, { autoClose: 4000 });
          return;
        }
        const body = new Widget({ node: document.createElement('div') });
        body.addClass('jp-dl-cancel-dialog');
        body.node.textContent = `Cancel “${job.name}” (${formatRanks(job)}, ${job.state})? It stops on every rank.`;
        const result = await showDialog({
          title: 'Cancel distributed job?',
          body,
          buttons: [
            Dialog.cancelButton({ label: 'Keep running' }),
            Dialog.warnButton({ label: 'Cancel job' })
          ],
          // The safe choice is the default: Enter (or a stray keypress) keeps the job running.
          defaultButton: 0
        });
        if (!result.button.accept) {
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

    commands.addCommand(CommandIDs.stopCluster, {
      label: 'Stop Distributed Training Cluster',
      isEnabled: args => !!jobId(args),
      execute: async args => {
        const id = jobId(args);
        const cluster = model.cluster?.clusters.find(c => c.cluster_id === id);
        const owner = cluster?.owner?.notebook;
        const body = new Widget({ node: document.createElement('div') });
        body.addClass('jp-dl-stop-dialog');
        body.node.textContent =
          `Stop cluster ${id}${owner ? ` of ${owner}` : ''} (${cluster?.engines ?? '?'} engines)? ` +
          'Jobs running on it stop too.';
        const result = await showDialog({
          title: 'Stop cluster?',
          body,
          buttons: [
            Dialog.cancelButton({ label: 'Keep running' }),
            Dialog.warnButton({ label: 'Stop cluster' })
          ],
          defaultButton: 0
        });
        if (!result.button.accept) {
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

    panel = new JobsPanel(model, {
      stopCluster: cluster => void commands.execute(CommandIDs.stopCluster, { id: cluster.cluster_id }),
      cancel: job => void commands.execute(CommandIDs.cancelJob, { id: job.id }),
      logs: job => void commands.execute(CommandIDs.showLogs, { id: job.id }),
      plot: job => void commands.execute(CommandIDs.showLossPlot, { id: job.id }),
      openNotebook: job => void commands.execute(CommandIDs.openNotebook, { id: job.id }),
      loadModel: (job, name) => void commands.execute(CommandIDs.loadModel, { id: job.id, name }),
      compare: ids => void commands.execute(CommandIDs.compareJobs, { ids }),
      modelUrl: (job, name) => URLExt.join(api.settings.baseUrl, modelDownloadPath(job.id, name)),
      refresh: () => void commands.execute(CommandIDs.refreshJobs),
      gettingStarted: () => void commands.execute(CommandIDs.gettingStarted)
    }, rendermime);
    shell.add(panel, 'left', { rank: 900 });
    restorer?.add(panel, 'jupyter-dl-jobs');

    for (const command of [CommandIDs.openJobs, CommandIDs.refreshJobs, CommandIDs.gettingStarted]) {
      palette?.addItem({ command, category: CATEGORY });
    }

    if (settingRegistry) {
      const apply = (settings: ISettingRegistry.ISettings): void => {
        const interval = Number(settings.get('pollInterval').composite);
        const tail = Number(settings.get('logTailLines').composite);
        config.pollInterval = Number.isFinite(interval)
          ? Math.max(MIN_POLL_INTERVAL, interval)
          : DEFAULT_POLL_INTERVAL;
        config.logTailLines = Number.isFinite(tail) && tail > 0 ? Math.floor(tail) : DEFAULT_LOG_TAIL;
        model.interval = config.pollInterval;
        for (const tab of logTabs.values()) {
          tab.content.interval = config.pollInterval;
          tab.content.tail = config.logTailLines;
        }
        for (const tab of plotTabs.values()) {
          tab.content.interval = config.pollInterval;
        }
      };
      settingRegistry
        .load(plugin.id)
        .then(settings => {
          apply(settings);
          settings.changed.connect(apply);
        })
        .catch(reason => {
          console.error('jupyter-dl: cannot load settings', reason);
        });
    }
  }
};

export default plugin;
