import { describe, expect, it } from 'vitest';

import { PLAIN_PEN, applySgr, color256, needsTerminal, penStyle, runsText, terminalRuns } from '../src/ansi';

const ESC = '\x1b';

/** What Keras' progress bar writes for one update (keras/src/utils/progbar.py, verbose=1, a dynamic display). */
function kerasUpdate(step: number, steps: number, previousWidth: number, final: boolean): string {
  const done = Math.floor((20 * step) / steps);
  const bar =
    `${ESC}[1m${step}/${steps}${ESC}[0m ` +
    (done > 0 ? `${ESC}[32m${'━'.repeat(done)}${ESC}[0m` : '') +
    `${ESC}[37m${'━'.repeat(20 - done)}${ESC}[0m`;
  const info = final ? ` ${ESC}[1m1s${ESC}[0m 24ms/step - loss: 0.5000` : ` ${ESC}[1m${steps - step}s${ESC}[0m`;
  return '\b'.repeat(previousWidth) + '\r' + bar + info + (final ? '\n' : '');
}

describe('terminalRuns', () => {
  it('leaves plain text as it is, one run', () => {
    expect(needsTerminal('rank 0 says hello\nsecond line\n')).toBe(false);
    const runs = terminalRuns('rank 0 says hello\nsecond line\n');
    expect(runs).toEqual([{ text: 'rank 0 says hello\nsecond line\n', className: '', color: '', background: '' }]);
    expect(terminalRuns('')).toEqual([]);
  });

  it('turns colour codes into the classes cell output uses, never into text', () => {
    const runs = terminalRuns(`a ${ESC}[32mgreen${ESC}[0m and ${ESC}[1mbold${ESC}[0m ${ESC}[4;31mred${ESC}[m.`);
    expect(runsText(runs)).toBe('a green and bold red.');
    expect(runs.map(r => [r.text, r.className])).toEqual([
      ['a ', ''],
      ['green', 'ansi-green-fg'],
      [' and ', ''],
      ['bold', 'ansi-bold'],
      [' ', ''],
      ['red', 'ansi-red-fg ansi-underline'],
      ['.', '']
    ]);
  });

  it('collapses a redrawn progress line to its last state', () => {
    let text = 'Epoch 1/2\n';
    let width = 0;
    for (let step = 1; step <= 21; step++) {
      text += kerasUpdate(step, 21, width, step === 21);
      width = 40;
    }
    text += 'Epoch 2/2\n';
    expect(needsTerminal(text)).toBe(true);
    const shown = runsText(terminalRuns(text));
    expect(shown).not.toContain(ESC);
    expect(shown).not.toContain('[1m');
    expect(shown).not.toMatch(/[\r\b]/);
    expect(shown.split('\n')).toEqual([
      'Epoch 1/2',
      `21/21 ${'━'.repeat(20)} 1s 24ms/step - loss: 0.5000`,
      'Epoch 2/2',
      ''
    ]);
    // The bar keeps its colours: the step count bold, the done part green.
    const runs = terminalRuns(text);
    expect(runs.find(r => r.text === '21/21')?.className).toBe('ansi-bold');
    expect(runs.find(r => r.text === '━'.repeat(20))?.className).toBe('ansi-green-fg');
  });

  it('sees a redraw whose carriage return became a newline (a log read with universal newlines)', () => {
    let text = 'Epoch 1/2\n';
    let width = 0;
    for (let step = 1; step <= 21; step++) {
      text += kerasUpdate(step, 21, width, step === 21);
      width = 40;
    }
    text = text.replace(/\r/g, '\n'); // what Python's open() in text mode reads back
    const lines = runsText(terminalRuns(text)).split('\n');
    // Keras' first draw starts with a bare `\r`: that one cannot be told from a newline, an empty line stays.
    expect(lines).toEqual(['Epoch 1/2', '', `21/21 ${'━'.repeat(20)} 1s 24ms/step - loss: 0.5000`, '']);
    expect(runsText(terminalRuns('a line\nanother\n'))).toBe('a line\nanother\n'); // plain newlines stay
  });

  it('shows a line still being redrawn in its latest state', () => {
    const text = 'start\n' + kerasUpdate(3, 21, 0, false) + kerasUpdate(7, 21, 30, false);
    const lines = runsText(terminalRuns(text)).split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[1].startsWith('7/21 ')).toBe(true);
  });

  it('overwrites in place: a shorter redraw keeps the tail of the longer one, as a terminal does', () => {
    expect(runsText(terminalRuns('downloading 100%\rdone'))).toBe('doneloading 100%');
    expect(runsText(terminalRuns('50%\b\b\b75%'))).toBe('75%');
    expect(runsText(terminalRuns('abc\b\b\b\b\bX'))).toBe('Xbc'); // backspace stops at the line start
    expect(runsText(terminalRuns('line\r\n'))).toBe('line\n'); // CRLF line ends keep their line
    expect(runsText(terminalRuns('\rjust text'))).toBe('just text');
  });

  it('applies erase-in-line and cursor moves, and drops other sequences', () => {
    expect(runsText(terminalRuns(`old progress\r${ESC}[Knew`))).toBe('new');
    expect(runsText(terminalRuns(`12345${ESC}[2D${ESC}[0Kx`))).toBe('123x');
    expect(runsText(terminalRuns(`abc${ESC}[2K${ESC}[1Gz`))).toBe('z');
    expect(runsText(terminalRuns(`${ESC}]0;title${'\x07'}a${ESC}[?25lb${ESC}[1Ac${ESC}(Bd`))).toBe('abcd');
    expect(runsText(terminalRuns('bell\x07 and tab\tkept'))).toBe('bell and tab\tkept');
  });

  it('drops an escape sequence cut off at the end of the text', () => {
    expect(runsText(terminalRuns(`done ${ESC}[3`))).toBe('done ');
    expect(runsText(terminalRuns(`done ${ESC}`))).toBe('done ');
  });

  it('keeps colour across redraws and lines until reset, and merges runs that look the same', () => {
    const runs = terminalRuns(`${ESC}[31mred\nstill red${ESC}[0m plain`);
    expect(runs.map(r => [r.text, r.className])).toEqual([
      ['red', 'ansi-red-fg'],
      ['\n', ''],
      ['still red', 'ansi-red-fg'],
      [' plain', '']
    ]);
    expect(terminalRuns(`${ESC}[32mab${ESC}[32mcd`)).toHaveLength(1);
  });

  it('keeps characters outside the basic plane whole', () => {
    expect(runsText(terminalRuns('ok 🙂\b!'))).toBe('ok !');
  });
});

describe('SGR codes', () => {
  it('reads palette, intense, 256 and true colours', () => {
    expect(applySgr(PLAIN_PEN, '32').fg).toBe(2);
    expect(applySgr(PLAIN_PEN, '92').fg).toBe(10);
    expect(applySgr(PLAIN_PEN, '44').bg).toBe(4);
    expect(applySgr(PLAIN_PEN, '38;5;9').fg).toBe(9);
    expect(applySgr(PLAIN_PEN, '38;5;196').fg).toEqual([255, 0, 0]);
    expect(applySgr(PLAIN_PEN, '48;2;10;20;30').bg).toEqual([10, 20, 30]);
    expect(applySgr(applySgr(PLAIN_PEN, '1;31'), '39;22')).toEqual(PLAIN_PEN);
    expect(applySgr(PLAIN_PEN, '38;7;1')).toEqual(PLAIN_PEN); // malformed: ignored
    expect(color256(232)).toEqual([8, 8, 8]);
    expect(color256(300)).toBe(null);
  });

  it('styles as cell output does: bold takes the intense colour, inverse swaps', () => {
    expect(penStyle(applySgr(PLAIN_PEN, '1;32')).className).toBe('ansi-green-intense-fg ansi-bold');
    expect(penStyle(applySgr(PLAIN_PEN, '7')).className).toBe('ansi-default-inverse-fg ansi-default-inverse-bg');
    expect(penStyle(applySgr(PLAIN_PEN, '7;31')).className).toBe('ansi-default-inverse-fg ansi-red-bg');
    expect(penStyle(applySgr(PLAIN_PEN, '38;2;1;2;3'))).toEqual({
      className: '',
      color: 'rgb(1, 2, 3)',
      background: ''
    });
  });
});
