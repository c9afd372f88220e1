/**
 * Following JupyterLab's theme in the tabs whose figures the server builds for a theme (loss, compare).
 *
 * The page's theme is what the body's `data-jp-theme-light` says (`pageTheme`); JupyterLab's theme plugin sets it
 * once a new theme has loaded. Watching that attribute, rather than `IThemeManager.themeChanged`, needs no token and
 * cannot run before the attribute changed (a slot connected before the theme plugin's would read the old theme).
 */
import { IDisposable } from '@lumino/disposable';

import { pageTheme } from './figures';
import { Theme } from './model';

/** Calls `onChange` with the new theme each time the page turns light or dark; dispose to stop. */
export function watchPageTheme(onChange: (theme: Theme) => void): IDisposable {
  let theme = pageTheme(document.body);
  const observer = new MutationObserver(() => {
    const now = pageTheme(document.body);
    if (now !== theme) {
      theme = now;
      onChange(now);
    }
  });
  observer.observe(document.body, { attributes: true, attributeFilter: ['data-jp-theme-light'] });
  let disposed = false;
  return {
    get isDisposed() {
      return disposed;
    },
    dispose() {
      if (!disposed) {
        disposed = true;
        observer.disconnect();
      }
    }
  };
}
