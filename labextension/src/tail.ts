/**
 * Following the tail of a scrolling log view. Pure: works on anything with the three scroll properties, so it can
 * be tested without a DOM.
 */

export interface IScrollable {
  scrollTop: number;
  readonly scrollHeight: number;
  readonly clientHeight: number;
}

/** Whether `el` is scrolled to within `threshold` pixels of its bottom (or cannot scroll at all). */
export function isNearBottom(el: IScrollable, threshold = 24): boolean {
  return el.scrollHeight - el.clientHeight - el.scrollTop <= threshold;
}

/**
 * Runs `update` (which changes `el`'s content) and keeps following the tail: when `el` was at the bottom before,
 * or `force` is set, it is scrolled to the new bottom afterwards; a reader who scrolled up stays where they are.
 * Returns whether it scrolled.
 */
export function followTail(el: IScrollable, update: () => void, force = false, threshold = 24): boolean {
  const follow = force || isNearBottom(el, threshold);
  update();
  if (follow) {
    el.scrollTop = Math.max(0, el.scrollHeight - el.clientHeight);
  }
  return follow;
}

/** The last `maxLines` lines of `text` (a trailing newline does not count as a line). */
export function lastLines(text: string, maxLines: number): string {
  if (maxLines <= 0) {
    return '';
  }
  const trailing = text.endsWith('\n');
  const lines = (trailing ? text.slice(0, -1) : text).split('\n');
  if (lines.length <= maxLines) {
    return text;
  }
  return lines.slice(lines.length - maxLines).join('\n') + (trailing ? '\n' : '');
}
