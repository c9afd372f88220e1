/**
 * The logs tab: one rank's stdout or stderr, following the tail while the job runs.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { IAnsiRun, needsTerminal, terminalRuns } from './ansi';
import { JobsApi } from './api';
import { h, setText } from './dom';
import { formatTimestamp, isFinal, tabTitle } from './format';
import { jobsIcon } from './icons';
import { IJob, LogStream } from './model';
import { emptyLogText, ILogChoiceStore, logChoiceKey, readLogChoice } from './logChoice';
import { followTail } from './tail';
import { JobTabView } from './watch';

export const DEFAULT_LOG_TAIL = 500;

/** A DOM id derived from a job id. */
export function widgetId(kind: string, jobId: string): string {
  return `jp-dl-${kind}-${jobId.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

export class LogsView extends JobTabView {
  constructor(api: JobsApi, job: IJob, options: { interval: number; tail: number; choices?: ILogChoiceStore | null }) {
    super(api, job, 'jp-dl-log-message');
    this.addClass('jp-dl-LogsView');
    this._tail = Math.max(1, options.tail);
    this._ranks = Array.from({ length: Math.max(1, job.n || 1) }, (_, i) => i);

    // Toolbar controls (added to the MainAreaWidget's toolbar by `createLogsWidget`).
    this.rankSelect = h('select', {
      className: 'jp-mod-styled jp-dl-rank-select',
      'aria-label': 'Rank',
      title: 'Rank'
    });
    this.rankSelect.addEventListener('change', () => {
      this._rank = Number(this.rankSelect.value);
      this._switched(true);
    });
    this.streamButtons = (['stdout', 'stderr'] as LogStream[]).map(stream => {
      const button = h(
        'button',
        {
          className: `jp-dl-text-button jp-dl-stream jp-dl-stream-${stream}`,
          type: 'button',
          'data-stream': stream,
          'aria-pressed': String(stream === this._stream)
        },
        stream
      );
      button.addEventListener('click', () => {
        if (this._stream !== stream) {
          this._stream = stream;
          this._switched(true);
        }
      });
      return button;
    });
    this.status = h('span', { className: 'jp-dl-log-status' });
    this._renderRanks();

    // In a `jp-RenderedText` box, as a cell's output is: JupyterLab's own rules colour the ANSI runs.
    this._pre = h('pre', { className: 'jp-dl-log-text' });
    this.node.append(this._message, h('div', { className: 'jp-RenderedText jp-dl-log-output' }, this._pre));
    this.node.setAttribute('tabindex', '0');

    this._choices = options.choices ?? null;
    this.startWatching(options.interval);
    this._restoreChoice();
  }

  /** The rank and stream this tab showed before the page reloaded, unless the user chose already. */
  private _restoreChoice(): void {
    this._choices
      ?.fetch(logChoiceKey(this._job.id))
      .then(value => {
        const choice = readLogChoice(value);
        if (
          choice &&
          !this._chosen &&
          !this.isDisposed &&
          (choice.rank !== this._rank || choice.stream !== this._stream)
        ) {
          this._rank = choice.rank;
          this._stream = choice.stream;
          this._renderRanks();
          this._switched(false);
        }
      })
      .catch(reason => console.warn('jupyter-dl: cannot read the logs tab choice', reason));
  }

  readonly rankSelect: HTMLSelectElement;
  readonly streamButtons: HTMLButtonElement[];
  readonly status: HTMLElement;

  get rank(): number {
    return this._rank;
  }

  get stream(): LogStream {
    return this._stream;
  }

  set tail(lines: number) {
    this._tail = Math.max(1, lines);
  }

  /** Called by the watcher on every tick. */
  fetchData(): Promise<void> {
    return this.fetchLogs();
  }

  async fetchLogs(): Promise<void> {
    const rank = this._rank;
    const stream = this._stream;
    const reply = await this.api.logs(this._job.id, rank, stream, this._tail);
    if (rank !== this._rank || stream !== this._stream) {
      return; // The user switched while this was in flight; the switch fetched its own.
    }
    if (Array.isArray(reply.ranks) && reply.ranks.length) {
      const ranks = reply.ranks.slice().sort((a, b) => a - b);
      if (ranks.join(',') !== this._ranks.join(',')) {
        this._ranks = ranks;
        this._renderRanks();
      }
    }
    const text = reply.text ?? '';
    const force = this._forceScroll;
    this._forceScroll = false;
    this.clearError();
    if (text !== this._text || force || text.length === 0) {
      this._text = text;
      followTail(
        this.node,
        () => {
          renderLog(this._pre, text);
          this._pre.classList.toggle('jp-mod-empty', text.length === 0);
          if (text.length === 0) {
            setText(this._pre, emptyLogText(stream, rank, this._job.state));
          }
        },
        force
      );
    }
    this._updated = Date.now() / 1000;
    this._updateStatus();
  }

  /** Shows the chosen rank and stream; `byUser`: kept for the next page load. */
  private _switched(byUser: boolean): void {
    if (byUser) {
      this._chosen = true;
      this._choices
        ?.save(logChoiceKey(this._job.id), { rank: this._rank, stream: this._stream })
        .catch(reason => console.warn('jupyter-dl: cannot keep the logs tab choice', reason));
    }
    for (const button of this.streamButtons) {
      button.setAttribute('aria-pressed', String(button.dataset.stream === this._stream));
    }
    this._forceScroll = true;
    this._text = null;
    setText(this._pre, '');
    void this._watcher.fetchNow();
  }

  private _renderRanks(): void {
    const select = this.rankSelect;
    select.textContent = '';
    if (!this._ranks.includes(this._rank)) {
      this._ranks = [...this._ranks, this._rank].sort((a, b) => a - b);
    }
    for (const rank of this._ranks) {
      const option = h('option', { value: rank }, `rank ${rank}`);
      option.selected = rank === this._rank;
      select.appendChild(option);
    }
  }

  protected _updateStatus(): void {
    const job = this._job;
    const following = isFinal(job.state) ? 'final output' : `following the last ${this._tail} lines`;
    const updated = this._updated ? ` · updated ${formatTimestamp(this._updated)}` : '';
    setText(this.status, `${job.state} · ${following}${updated}`);
  }

  private _pre: HTMLElement;
  private _choices: ILogChoiceStore | null;
  private _chosen = false;
  private _rank = 0;
  private _stream: LogStream = 'stdout';
  private _ranks: number[];
  private _tail: number;
  private _text: string | null = null;
  private _forceScroll = true;
  private _updated = 0;
}

/**
 * Shows a log in `pre` as a terminal leaves it: colours as styled spans (the classes cell output uses), `\r` / `\b`
 * redraws collapsed to their last state. Plain text stays one text node.
 */
export function renderLog(pre: HTMLElement, text: string): void {
  if (!needsTerminal(text)) {
    setText(pre, text);
    return;
  }
  const runs = terminalRuns(text);
  pre.replaceChildren(...runs.map(runNode));
}

function runNode(run: IAnsiRun): Node {
  if (!run.className && !run.color && !run.background) {
    return document.createTextNode(run.text);
  }
  const span = h('span', { className: run.className || null }, run.text);
  if (run.color) {
    span.style.color = run.color;
  }
  if (run.background) {
    span.style.backgroundColor = run.background;
  }
  return span;
}

/** The logs tab for `job`: the view inside a MainAreaWidget with rank and stream controls in its toolbar. */
export function createLogsWidget(
  api: JobsApi,
  job: IJob,
  options: { interval: number; tail: number; choices?: ILogChoiceStore | null }
): MainAreaWidget<LogsView> {
  const content = new LogsView(api, job, options);
  const widget = new MainAreaWidget({ content });
  widget.id = widgetId('logs', job.id);
  widget.addClass('jp-dl-logs-widget');
  widget.title.label = tabTitle('Logs', job);
  widget.title.caption = `Logs of distributed job ${job.name} (${job.id})`;
  widget.title.icon = jobsIcon;
  widget.title.closable = true;
  widget.toolbar.addItem('rank', new Widget({ node: content.rankSelect }));
  const streams = h('div', { className: 'jp-dl-stream-toggle', role: 'group', 'aria-label': 'Stream' });
  streams.append(...content.streamButtons);
  widget.toolbar.addItem('stream', new Widget({ node: streams }));
  widget.toolbar.addItem('status', new Widget({ node: content.status }));
  return widget;
}
