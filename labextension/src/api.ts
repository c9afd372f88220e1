/**
 * The jupyter-dl REST client. Requests go through `ServerConnection.makeRequest`, which adds the auth token and
 * the XSRF header; the base URL is the page's (`PageConfig.getBaseUrl()` by way of `makeSettings`).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  CompareAxis,
  ICancelReply,
  ICompareReply,
  IClusterInfo,
  IJob,
  IJobList,
  IJobFigures,
  ILogsReply,
  LogStream,
  Theme
} from './model';
import { apiPath, QueryValue } from './url';

/** A non-2xx reply: the HTTP status and the server's `{code, message}`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export class JobsApi {
  constructor(settings?: ServerConnection.ISettings) {
    this.settings = settings ?? ServerConnection.makeSettings();
  }

  readonly settings: ServerConnection.ISettings;

  /** All jobs, newest first, optionally only those in `states`. */
  async listJobs(states?: string[]): Promise<IJob[]> {
    const reply = await this.request<IJobList>(['jobs'], { state: states });
    return reply.jobs ?? [];
  }

  getJob(id: string): Promise<IJob> {
    return this.request<IJob>(['jobs', id]);
  }

  cancelJob(id: string): Promise<ICancelReply> {
    return this.request<ICancelReply>(['jobs', id], undefined, { method: 'DELETE' });
  }

  /**
   * The loss tab's figures drawn for `theme`; with the `version` of the last reply, only `{unchanged: true}` comes
   * back when nothing changed since.
   */
  figures(id: string, theme: Theme, version?: string): Promise<IJobFigures> {
    return this.request<IJobFigures>(['jobs', id, 'figures'], { theme, version });
  }

  logs(id: string, rank: number, stream: LogStream, tail: number): Promise<ILogsReply> {
    return this.request<ILogsReply>(['jobs', id, 'logs'], { rank, tail, stream });
  }

  /** Two or more jobs side by side: their curves against `x`, and the table of settings, metrics and speed. */
  compare(ids: string[], x: CompareAxis = 'step', theme: Theme = 'light'): Promise<ICompareReply> {
    return this.request<ICompareReply>(['compare'], { ids, x, theme });
  }

  cluster(): Promise<IClusterInfo> {
    return this.request<IClusterInfo>(['cluster']);
  }

  /** Stops a running cluster (its engines, then its controller); the stop goes on after the reply. */
  stopCluster(clusterId: string): Promise<{ cluster_id: string; state: string }> {
    return this.request(['cluster', clusterId], undefined, { method: 'DELETE' });
  }

  /** A JSON request to `jupyter-dl/api/<segments...>?<query>`; rejects with `ApiError` on a non-2xx status. */
  async request<T>(
    segments: ReadonlyArray<string | number>,
    query?: { [key: string]: QueryValue },
    init: RequestInit = {}
  ): Promise<T> {
    const url = URLExt.join(this.settings.baseUrl, apiPath(segments, query));
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.settings);
    } catch (error) {
      throw new ServerConnection.NetworkError(error as TypeError);
    }
    const text = await response.text();
    let data: any = null;
    if (text.length > 0) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (!response.ok) {
      const code = typeof data?.code === 'string' ? data.code : `http_${response.status}`;
      const message =
        typeof data?.message === 'string'
          ? data.message
          : response.status === 404
            ? 'The jupyter-dl server extension did not answer (is it installed and enabled? ' +
              'See `jupyter server extension list`.)'
            : `${response.status} ${response.statusText}`.trim();
      throw new ApiError(response.status, code, message);
    }
    return data as T;
  }
}

/** A one-line description of any error, for banners and dialogs. */
export function errorMessage(error: unknown): string {
  if (error instanceof ApiError) {
    return error.message;
  }
  if (error instanceof ServerConnection.NetworkError) {
    return `Cannot reach the server: ${error.message}`;
  }
  if (error instanceof Error) {
    return error.message;
  }
  return String(error);
}
