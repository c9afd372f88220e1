/**
 * What a logs tab keeps across page reloads (its rank and stream, in JupyterLab's state database) and what it says
 * when a log is empty. Pure: no JupyterLab imports.
 */
import { isFinal } from './format';
import { LogStream } from './model';

/** Where a logs tab keeps the rank and stream it shows (JupyterLab's state database), so a reload keeps them. */
export interface ILogChoiceStore {
  fetch(id: string): Promise<unknown>;
  save(id: string, value: any): Promise<unknown>;
}

/** The state database key of a job's logs tab choice. */
export function logChoiceKey(jobId: string): string {
  return `jupyter-dl:logs:${jobId}`;
}

/** A rank and stream read from the state database, or null for anything else. */
export function readLogChoice(value: unknown): { rank: number; stream: LogStream } | null {
  const v = value as { rank?: unknown; stream?: unknown } | null | undefined;
  const rank = typeof v?.rank === 'number' ? v.rank : NaN;
  const stream = v?.stream;
  if (!Number.isInteger(rank) || rank < 0 || (stream !== 'stdout' && stream !== 'stderr')) {
    return null;
  }
  return { rank, stream };
}

/** The log view's line when there is no output: "yet" only while the job can still write some. */
export function emptyLogText(stream: string, rank: number, state: string): string {
  return isFinal(state) ? `Rank ${rank} wrote nothing to ${stream}.` : `No ${stream} output from rank ${rank} yet.`;
}
