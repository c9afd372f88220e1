import { describe, expect, it } from 'vitest';

import { IScrollable, followTail, isNearBottom, lastLines } from '../src/tail';

/** A fake scrolling box whose content height changes when `grow` is called. */
function box(scrollHeight: number, clientHeight: number, scrollTop: number) {
  const el = {
    scrollHeight,
    clientHeight,
    scrollTop,
    grow(by: number) {
      el.scrollHeight += by;
    }
  };
  return el as IScrollable & { grow(by: number): void; scrollHeight: number };
}

describe('isNearBottom', () => {
  it('is true at the bottom, within the threshold, or when nothing scrolls', () => {
    expect(isNearBottom(box(1000, 200, 800))).toBe(true);
    expect(isNearBottom(box(1000, 200, 790))).toBe(true);
    expect(isNearBottom(box(100, 200, 0))).toBe(true);
  });

  it('is false when the reader scrolled up', () => {
    expect(isNearBottom(box(1000, 200, 500))).toBe(false);
    expect(isNearBottom(box(1000, 200, 770), 10)).toBe(false);
  });
});

describe('followTail', () => {
  it('follows new output when at the bottom', () => {
    const el = box(1000, 200, 800);
    expect(followTail(el, () => el.grow(300))).toBe(true);
    expect(el.scrollTop).toBe(1100);
  });

  it('leaves a reader who scrolled up where they are', () => {
    const el = box(1000, 200, 300);
    expect(followTail(el, () => el.grow(300))).toBe(false);
    expect(el.scrollTop).toBe(300);
  });

  it('jumps to the bottom when forced (switching rank or stream)', () => {
    const el = box(1000, 200, 0);
    expect(followTail(el, () => el.grow(50), true)).toBe(true);
    expect(el.scrollTop).toBe(850);
  });
});

describe('lastLines', () => {
  it('keeps the last lines', () => {
    expect(lastLines('a\nb\nc\n', 2)).toBe('b\nc\n');
    expect(lastLines('a\nb\nc', 2)).toBe('b\nc');
    expect(lastLines('a\nb', 5)).toBe('a\nb');
    expect(lastLines('a', 0)).toBe('');
  });
});
