import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { URLExt } from '@jupyterlab/coreutils';

import { JobsApi } from './api';
import { FIGURE_RANK, cellFigureFactory } from './cellFigure';
import { ITabConfig, readTabConfig } from './args';
import { CommandIDs, ICommandContext, addCommands } from './commands';
import { DEFAULT_POLL_INTERVAL, JobsModel, MIN_POLL_INTERVAL } from './jobsModel';
import { DEFAULT_LOG_TAIL } from './logs';
import { modelDownloadPath } from './keptModels';
import { JobsPanel } from './panel';
import { PlotlyBox } from './plotlyBox';
import { applyTabConfig, createTabTrackers, restoreTabs } from './tabs';

export { PANEL_ID } from './panel';
export { CommandIDs, gettingStartedText } from './commands';

const CATEGORY = 'Distributed training';

const DEFAULT_CONFIG: ITabConfig = { pollInterval: DEFAULT_POLL_INTERVAL, logTailLines: DEFAULT_LOG_TAIL };

/** The jobs sidebar, its row actions going through the commands. */
function createPanel(ctx: ICommandContext): JobsPanel {
  const { commands } = ctx.app;
  const run = (command: string, args?: any): void => void commands.execute(command, args);
  return new JobsPanel(
    ctx.model,
    {
      stopCluster: cluster => run(CommandIDs.stopCluster, { id: cluster.cluster_id }),
      cancel: job => run(CommandIDs.cancelJob, { id: job.id }),
      logs: job => run(CommandIDs.showLogs, { id: job.id }),
      plot: job => run(CommandIDs.showLossPlot, { id: job.id }),
      openNotebook: job => run(CommandIDs.openNotebook, { id: job.id }),
      loadModel: (job, name) => run(CommandIDs.loadModel, { id: job.id, name }),
      compare: ids => run(CommandIDs.compareJobs, { ids }),
      modelUrl: (job, name) => URLExt.join(ctx.api.settings.baseUrl, modelDownloadPath(job.id, name)),
      refresh: () => run(CommandIDs.refreshJobs),
      gettingStarted: () => run(CommandIDs.gettingStarted)
    },
    ctx.rendermime
  );
}

/** Follows the settings: the poll interval and log tail of the jobs list and of the open tabs. */
function followSettings(ctx: ICommandContext, settingRegistry: ISettingRegistry): void {
  const apply = (settings: ISettingRegistry.ISettings): void => {
    const config = readTabConfig(
      settings.get('pollInterval').composite,
      settings.get('logTailLines').composite,
      DEFAULT_CONFIG,
      MIN_POLL_INTERVAL
    );
    Object.assign(ctx.config, config);
    ctx.model.interval = config.pollInterval;
    applyTabConfig(ctx.trackers, config);
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

/**
 * Lends plotly.js to the cells' live figures (jupyter_dl/live/live_figure.js reads `globalThis.jupyterDl.plotly`)
 * and loads it once the page is idle after start: compiling plotly.js blocks the page for a second or more on a
 * slow machine, which then happens before any job streams, and once per page.
 */
function lendPlotly(app: JupyterFrontEnd, rendermime: IRenderMimeRegistry): void {
  const shared = ((globalThis as any).jupyterDl ??= {});
  shared.plotly = () => PlotlyBox.library(rendermime);
  const idle = (globalThis as any).requestIdleCallback ?? ((fn: () => void) => setTimeout(fn, 1000));
  void app.restored.then(() => idle(() => void PlotlyBox.library(rendermime)));
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-dl:plugin',
  description: 'Distributed deep learning from notebooks: the distributed jobs sidebar.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [ICommandPalette, ISettingRegistry, ILayoutRestorer, IStateDB],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null,
    state: IStateDB | null
  ) => {
    lendPlotly(app, rendermime);
    rendermime.addFactory(cellFigureFactory(rendermime), FIGURE_RANK);
    const api = new JobsApi();
    const config: ITabConfig = { ...DEFAULT_CONFIG };
    let panel: JobsPanel | null = null;
    const model = new JobsModel({
      api,
      interval: config.pollInterval,
      isVisible: () => panel !== null && panel.isVisible,
      state
    });
    const ctx: ICommandContext = { app, api, model, trackers: createTabTrackers(), config, rendermime, state };
    addCommands(ctx);

    panel = createPanel(ctx);
    app.shell.add(panel, 'left', { rank: 900 });
    if (restorer) {
      restorer.add(panel, 'jupyter-dl-jobs');
      restoreTabs(restorer, ctx.trackers, CommandIDs);
    }
    for (const command of [CommandIDs.openJobs, CommandIDs.refreshJobs, CommandIDs.gettingStarted]) {
      palette?.addItem({ command, category: CATEGORY });
    }
    if (settingRegistry) {
      followSettings(ctx, settingRegistry);
    }
  }
};

export default plugin;
