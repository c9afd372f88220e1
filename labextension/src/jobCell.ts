/**
 * Finding the cell of a notebook that ran a job, for the row's Notebook button. The kernel marks what the job put
 * in its cell: each output of a finished job carries `{"jupyter_dl": {"job": id}}` in its metadata (saved with the
 * notebook), and a running job's progress area has the class `jp-dl-job-<id>` (jupyter_dl/live/view.py).
 * Pure: no JupyterLab imports.
 */

/** What is read of each cell. */
export interface ICellLike {
  /** The metadata of each of its outputs (none for a markdown cell). */
  outputMetadata: ReadonlyArray<unknown>;
  /** Whether an element with this class is in its output now. */
  hasClass(className: string): boolean;
}

/** The CSS class of a running job's progress area. */
export function jobCellClass(jobId: string): string {
  return `jp-dl-job-${jobId}`;
}

/** Whether output metadata names this job. */
export function namesJob(metadata: unknown, jobId: string): boolean {
  const mark = (metadata as { jupyter_dl?: { job?: unknown } } | null | undefined)?.jupyter_dl;
  return mark?.job === jobId;
}

/** The index of the cell that ran `jobId` (the last such cell, should one have been copied), or -1. */
export function jobCellIndex(cells: ReadonlyArray<ICellLike>, jobId: string): number {
  for (let i = cells.length - 1; i >= 0; i--) {
    const cell = cells[i];
    if (cell.outputMetadata.some(metadata => namesJob(metadata, jobId)) || cell.hasClass(jobCellClass(jobId))) {
      return i;
    }
  }
  return -1;
}
