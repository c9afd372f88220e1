/**
 * A rank's log as a terminal would leave it on screen, for the logs tab. Two things in the raw text are not text:
 *
 * - ANSI escape sequences (Keras' progress bar is bold and green): SGR colours and weights become styled runs named
 *   with the classes of JupyterLab's cell output (`ansi-green-fg`, `ansi-bold`, …), which JupyterLab styles under
 *   `.jp-RenderedText pre`, so the tab shows them as a cell's output does; other sequences are dropped.
 * - Redraws: `\r` (back to the start of the line) and `\b` (one column back) move a cursor and what follows
 *   overwrites, so a progress line redrawn a hundred times shows only its last state.
 *
 * A `\r` that reached us as a newline (a log file read with universal newlines turns `\r` into `\n`) is still seen
 * for what it was where backspaces precede it, as in Keras' redraws (`\b` × the line's width, then `\r`).
 *
 * Pure: no DOM. `terminalRuns` works on a small line buffer (a character and a pen per column) rather than on the
 * string, so that overwriting and colours combine as they do in a terminal.
 */

/** A palette colour (0-7 normal, 8-15 intense), an `[r, g, b]` colour (256-colour and true-colour codes), or none. */
export type AnsiColor = number | [number, number, number] | null;

/** How a run of text is drawn. */
export interface IAnsiPen {
  readonly bold: boolean;
  readonly underline: boolean;
  readonly inverse: boolean;
  readonly fg: AnsiColor;
  readonly bg: AnsiColor;
}

/** A run of text drawn with one pen: its JupyterLab ANSI classes, and inline colours for the non-palette ones. */
export interface IAnsiRun {
  text: string;
  /** Space-separated classes, e.g. `ansi-green-fg ansi-bold`; empty for plain text. */
  className: string;
  /** A CSS colour (`rgb(…)`) for a 256-colour or true-colour foreground, else empty. */
  color: string;
  /** The same for the background. */
  background: string;
}

export const PLAIN_PEN: IAnsiPen = Object.freeze({
  bold: false,
  underline: false,
  inverse: false,
  fg: null,
  bg: null
});

const COLOR_NAMES = ['black', 'red', 'green', 'yellow', 'blue', 'magenta', 'cyan', 'white'];

/** Whether `text` holds anything `terminalRuns` would change: an escape, a carriage return, a backspace. */
export function needsTerminal(text: string): boolean {
  return text.includes('\x1b') || text.includes('\r') || text.includes('\b');
}

/** The classes and inline colours JupyterLab's cell output draws `pen` with. */
export function penStyle(pen: IAnsiPen): { className: string; color: string; background: string } {
  let fg = pen.fg;
  let bg = pen.bg;
  if (pen.bold && typeof fg === 'number' && fg < 8) {
    fg += 8; // as in cell output: bold text takes the intense colour
  }
  if (pen.inverse) {
    [fg, bg] = [bg, fg];
  }
  const classes: string[] = [];
  let color = '';
  let background = '';
  if (typeof fg === 'number') {
    classes.push(`${paletteName(fg)}-fg`);
  } else if (fg) {
    color = rgb(fg);
  } else if (pen.inverse) {
    classes.push('ansi-default-inverse-fg');
  }
  if (typeof bg === 'number') {
    classes.push(`${paletteName(bg)}-bg`);
  } else if (bg) {
    background = rgb(bg);
  } else if (pen.inverse) {
    classes.push('ansi-default-inverse-bg');
  }
  if (pen.bold) {
    classes.push('ansi-bold');
  }
  if (pen.underline) {
    classes.push('ansi-underline');
  }
  return { className: classes.join(' '), color, background };
}

function paletteName(index: number): string {
  return `ansi-${COLOR_NAMES[index % 8]}${index >= 8 ? '-intense' : ''}`;
}

function rgb([r, g, b]: [number, number, number]): string {
  return `rgb(${r}, ${g}, ${b})`;
}

/** The colour of a 256-colour code: the 16 palette colours, a 6×6×6 cube, then 24 greys. */
export function color256(index: number): AnsiColor {
  if (!Number.isInteger(index) || index < 0 || index > 255) {
    return null;
  }
  if (index < 16) {
    return index;
  }
  if (index < 232) {
    const level = (v: number): number => (v === 0 ? 0 : 55 + 40 * v);
    const i = index - 16;
    return [level(Math.floor(i / 36)), level(Math.floor(i / 6) % 6), level(i % 6)];
  }
  const grey = 8 + 10 * (index - 232);
  return [grey, grey, grey];
}

/** The pen after an SGR sequence (`ESC [ params m`) with `params` as written (`1;32`, `38;5;208`, ``). */
export function applySgr(pen: IAnsiPen, params: string): IAnsiPen {
  const codes = params === '' ? [0] : params.split(/[;:]/).map(p => (p === '' ? 0 : Number(p)));
  const next: { -readonly [K in keyof IAnsiPen]: IAnsiPen[K] } = { ...pen };
  for (let i = 0; i < codes.length; i++) {
    const code = codes[i];
    if (code === 0) {
      Object.assign(next, PLAIN_PEN);
    } else if (code === 1) {
      next.bold = true;
    } else if (code === 4) {
      next.underline = true;
    } else if (code === 7) {
      next.inverse = true;
    } else if (code === 22) {
      next.bold = false;
    } else if (code === 24) {
      next.underline = false;
    } else if (code === 27) {
      next.inverse = false;
    } else if (code >= 30 && code <= 37) {
      next.fg = code - 30;
    } else if (code === 39) {
      next.fg = null;
    } else if (code >= 40 && code <= 47) {
      next.bg = code - 40;
    } else if (code === 49) {
      next.bg = null;
    } else if (code >= 90 && code <= 97) {
      next.fg = code - 90 + 8;
    } else if (code >= 100 && code <= 107) {
      next.bg = code - 100 + 8;
    } else if (code === 38 || code === 48) {
      // 38;5;n (256 colours) or 38;2;r;g;b (true colour); the background the same with 48.
      let value: AnsiColor | undefined;
      if (codes[i + 1] === 5) {
        value = color256(codes[i + 2]);
        i += 2;
      } else if (codes[i + 1] === 2) {
        const parts = codes.slice(i + 2, i + 5);
        value =
          parts.length === 3 && parts.every(v => Number.isInteger(v) && v >= 0 && v <= 255)
            ? (parts as [number, number, number])
            : null;
        i += 4;
      } else {
        return next; // malformed: the rest of the sequence cannot be read
      }
      if (code === 38) {
        next.fg = value;
      } else {
        next.bg = value;
      }
    }
    // Anything else (italic, blink, fonts, …) is ignored, as cell output does.
  }
  return next;
}

/** One screen line: a character and a pen per column. */
class Line {
  chars: string[] = [];
  pens: IAnsiPen[] = [];

  write(column: number, char: string, pen: IAnsiPen): void {
    while (this.chars.length < column) {
      this.chars.push(' ');
      this.pens.push(PLAIN_PEN);
    }
    this.chars[column] = char;
    this.pens[column] = pen;
  }

  /** ESC [ n K: 0 erases from the cursor to the end, 1 from the start to the cursor, 2 the whole line. */
  erase(mode: number, column: number): void {
    if (mode === 0) {
      this.chars.length = Math.min(this.chars.length, column);
      this.pens.length = this.chars.length;
    } else if (mode === 1) {
      for (let c = 0; c <= column && c < this.chars.length; c++) {
        this.chars[c] = ' ';
        this.pens[c] = PLAIN_PEN;
      }
    } else if (mode === 2) {
      this.chars.length = 0;
      this.pens.length = 0;
    }
  }
}

/**
 * What `text` leaves on screen, as runs of one pen each (newlines included, in plain runs): escape sequences
 * applied or dropped, each line's `\r` and `\b` redraws collapsed to its last state (a newline right after a
 * backspace counts as the `\r` it was), other control characters (but tabs) dropped. An escape sequence cut off at the end of `text` (a log read while it is written) is dropped.
 */
export function terminalRuns(text: string): IAnsiRun[] {
  const lines: Line[] = [];
  let line = new Line();
  let column = 0;
  let pen = PLAIN_PEN;
  const n = text.length;
  let i = 0;
  while (i < n) {
    const code = text.charCodeAt(i);
    if (code === 0x1b) {
      i = escape(i + 1);
      continue;
    }
    if (code === 0x0a && i > 0 && text.charCodeAt(i - 1) === 0x08) {
      // Backspaces then a newline: a `\b…\b\r` redraw (Keras') whose `\r` became a newline on the way (a log read
      // with universal newlines). A redraw, then, not a new line.
      column = 0;
    } else if (code === 0x0a) {
      lines.push(line);
      line = new Line();
      column = 0;
    } else if (code === 0x0d) {
      column = 0;
    } else if (code === 0x08) {
      column = Math.max(0, column - 1);
    } else if (code >= 0x20 || code === 0x09) {
      if (code !== 0x7f) {
        // A character outside the BMP takes two code units and one column.
        const wide = code >= 0xd800 && code <= 0xdbff && i + 1 < n;
        line.write(column++, wide ? text.slice(i, i + 2) : text[i], pen);
        if (wide) {
          i++;
        }
      }
    }
    i++;
  }
  lines.push(line);
  return toRuns(lines);

  /** Reads the escape sequence whose ESC was just before `start`; returns the index after it. */
  function escape(start: number): number {
    if (start >= n) {
      return n;
    }
    const kind = text[start];
    if (kind === '[') {
      // CSI: parameter bytes 0x30-0x3F, intermediate bytes 0x20-0x2F, one final byte 0x40-0x7E.
      let j = start + 1;
      while (j < n && text.charCodeAt(j) >= 0x30 && text.charCodeAt(j) <= 0x3f) {
        j++;
      }
      const params = text.slice(start + 1, j);
      while (j < n && text.charCodeAt(j) >= 0x20 && text.charCodeAt(j) <= 0x2f) {
        j++;
      }
      if (j >= n) {
        return n;
      }
      const final = text.charCodeAt(j);
      if (final < 0x40 || final > 0x7e) {
        return j; // not a sequence after all: what follows is text again
      }
      csi(params, text[j]);
      return j + 1;
    }
    if (kind === ']') {
      // OSC (a window title, a hyperlink's target): up to BEL or ESC \.
      for (let j = start + 1; j < n; j++) {
        if (text.charCodeAt(j) === 0x07) {
          return j + 1;
        }
        if (text.charCodeAt(j) === 0x1b && text[j + 1] === '\\') {
          return j + 2;
        }
      }
      return n;
    }
    // Any other escape: intermediate bytes, then one final byte (ESC ( B, ESC 7, …).
    let j = start;
    while (j < n && text.charCodeAt(j) >= 0x20 && text.charCodeAt(j) <= 0x2f) {
      j++;
    }
    return Math.min(n, j + 1);
  }

  function csi(params: string, final: string): void {
    const first = params === '' ? NaN : Number(params.split(';')[0]);
    const count = Number.isInteger(first) && first > 0 ? first : 1;
    if (final === 'm') {
      pen = applySgr(pen, params);
    } else if (final === 'K') {
      line.erase(Number.isInteger(first) ? first : 0, column);
    } else if (final === 'G') {
      column = count - 1; // to that column (1-based)
    } else if (final === 'C') {
      column += count;
    } else if (final === 'D') {
      column = Math.max(0, column - count);
    }
    // Cursor moves to other lines and screen clears do not apply to a log: dropped.
  }
}

function toRuns(lines: Line[]): IAnsiRun[] {
  const runs: IAnsiRun[] = [];
  let current: IAnsiRun | null = null;
  let currentPen: IAnsiPen | null = null;
  const push = (text: string, pen: IAnsiPen): void => {
    if (current && (pen === currentPen || sameLook(pen, currentPen!))) {
      current.text += text;
      return;
    }
    current = { text, ...penStyle(pen) };
    currentPen = pen;
    runs.push(current);
  };
  lines.forEach((line, index) => {
    if (index > 0) {
      push('\n', PLAIN_PEN);
    }
    let start = 0;
    for (let c = 1; c <= line.chars.length; c++) {
      if (c === line.chars.length || line.pens[c] !== line.pens[start]) {
        push(line.chars.slice(start, c).join(''), line.pens[start]);
        start = c;
      }
    }
  });
  return runs;
}

function sameLook(a: IAnsiPen, b: IAnsiPen): boolean {
  const x = penStyle(a);
  const y = penStyle(b);
  return x.className === y.className && x.color === y.color && x.background === y.background;
}

/** The text of `runs`, without its styling. */
export function runsText(runs: ReadonlyArray<IAnsiRun>): string {
  return runs.map(run => run.text).join('');
}
