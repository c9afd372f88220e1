/**
 * A tiny DOM builder for the panel and the tabs. Text always goes in as text, never as markup.
 */

export type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: { [name: string]: string | number | boolean | null | undefined } = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) {
      continue;
    }
    if (name === 'className') {
      el.className = String(value);
    } else {
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    el.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: { [name: string]: string | number } = {}
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    el.setAttribute(name, String(value));
  }
  return el;
}

/** Sets text only when it changed (keeps selections and avoids needless layout). */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) {
    el.textContent = text;
  }
}

/** Sets or removes an attribute only when it changed. */
export function setAttr(el: Element, name: string, value: string | null): void {
  if (value === null) {
    if (el.hasAttribute(name)) {
      el.removeAttribute(name);
    }
  } else if (el.getAttribute(name) !== value) {
    el.setAttribute(name, value);
  }
}

/** Puts `child` in `parent` at `index` when it is not already there. */
export function placeAt(parent: Element, child: Element, index: number): void {
  const current = parent.children[index];
  if (current !== child) {
    parent.insertBefore(child, current ?? null);
  }
}

/** Shows `child` inside `parent` (before `before` when given) or takes it out. */
export function toggleChild(parent: Element, child: Element, show: boolean, before: Element | null = null): void {
  if (show && child.parentElement !== parent) {
    parent.insertBefore(child, before && before.parentElement === parent ? before : null);
  } else if (!show && child.parentElement === parent) {
    parent.removeChild(child);
  }
}
