/**
 * Reading command arguments and settings, and naming restored tabs. Pure: no JupyterLab imports.
 */

/** The `id` argument of a command (a job or cluster id), or '' when there is none. */
export function jobIdArg(args: unknown): string {
  const id = (args as { id?: unknown } | null | undefined)?.id;
  return typeof id === 'string' ? id : '';
}

/** The `ids` argument of the compare command as strings, or null unless it lists two or more jobs. */
export function jobIdsArg(args: unknown): string[] | null {
  const ids = (args as { ids?: unknown } | null | undefined)?.ids;
  return Array.isArray(ids) && ids.length >= 2 ? ids.map(String) : null;
}

/** Whether a tab command runs for the layout restorer (then a job that is gone is dropped quietly). */
export function isRestoring(args: unknown): boolean {
  return (args as { restoring?: unknown } | null | undefined)?.restoring === true;
}

/** The name a compare tab is saved under in the layout: its jobs, in their order. */
export function compareRestoreName(ids: readonly string[]): string {
  return ids.join(',');
}

/** What the tabs and the jobs list poll with. */
export interface ITabConfig {
  /** Milliseconds between polls. */
  pollInterval: number;
  /** Lines a logs tab shows. */
  logTailLines: number;
}

/**
 * The config from the settings' values: a poll interval no shorter than `minPollInterval`, a positive whole number
 * of log lines; the defaults for anything that is not a number.
 */
export function readTabConfig(
  pollInterval: unknown,
  logTailLines: unknown,
  defaults: ITabConfig,
  minPollInterval: number
): ITabConfig {
  const interval = Number(pollInterval);
  const tail = Number(logTailLines);
  return {
    pollInterval: Number.isFinite(interval) ? Math.max(minPollInterval, interval) : defaults.pollInterval,
    logTailLines: Number.isFinite(tail) && tail > 0 ? Math.floor(tail) : defaults.logTailLines
  };
}
