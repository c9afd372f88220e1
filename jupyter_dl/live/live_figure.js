// The cell's live figure (live_figure.py): draws the model's `figure_data` and `figure_layout` with the plotly.js
// that JupyterLab's plotly renderer already loaded, which the jupyter-dl JupyterLab extension lends as
// `globalThis.jupyterDl.plotly()`. Plotly's own FigureWidget carries a 5 MB copy of plotly.js in every widget, and
// the page froze for seconds while each was compiled (twice per job).
//
// A redraw blocks the page for as long as plotly.js takes (50-100 ms, several times that on a loaded machine), so
// redraws keep a gap of at least MIN_GAP_MS and four times the last redraw's own time, never overlap, take the
// newest data, and wait while the figure is scrolled out of view. The figures of a page take turns, one per frame:
// two drawn in one frame held the page for both. The figure's box is fixed and contained (CSS `contain: strict`):
// plotly.js measures text between its DOM changes, and each measurement made the browser lay out the whole
// notebook again, not only the figure.

const MIN_GAP_MS = 1000;
const GAP_PER_DRAW = 4;
const TURNS = "__jupyterDlLiveFigureTurns"; // on globalThis: the page's figures draw one after another

function nextFrame() {
  return new Promise((resolve) =>
    (globalThis.requestAnimationFrame || ((fn) => setTimeout(fn, 0)))(() => resolve()),
  );
}

// Runs `draw` in a frame of its own once the figures before it drew.
function inTurn(draw) {
  const turn = (globalThis[TURNS] || Promise.resolve()).then(nextFrame).then(draw);
  globalThis[TURNS] = turn.catch(() => undefined);
  return turn;
}

// The layout's fixed height as the element's own (its width is the cell's, as the static copy's that replaces it),
// so that what plotly.js changes inside leaves the page's layout be.
function contain(el, layout) {
  if (typeof layout.height === "number") {
    el.style.height = `${layout.height}px`;
    el.style.contain = "strict";
  }
}
const NO_PLOTLY =
  "The live figure needs the jupyter-dl JupyterLab extension (and plotly's); the final figure appears when the job ends.";

function render({ model, el }) {
  let disposed = false;
  let timer = null; // a redraw is scheduled
  let drawing = false;
  let stale = true; // the model changed since the last redraw
  let visible = true;
  let notBefore = 0; // performance.now() of the earliest next redraw
  // The layout drawn, kept across redraws: plotly diffs it cheaply then. When the model's changes (epoch marks,
  // once an epoch) only the keys that changed are replaced: a whole new layout (its template most of all) made
  // plotly.js redo the figure's defaults, 30-50 ms more per redraw (measured in isolation).
  let layout = null;
  let drawnKeys = {}; // key -> the JSON of the model's value last drawn
  let revision = 0;
  el.classList.add("jp-dl-live-figure");

  const lend = globalThis.jupyterDl && globalThis.jupyterDl.plotly;
  const loading =
    typeof lend === "function"
      ? Promise.resolve(lend()).catch(() => null)
      : Promise.resolve(null);

  async function draw() {
    timer = null;
    const plotly = await loading;
    if (disposed || drawing || !stale || !visible) {
      return;
    }
    if (!plotly) {
      el.textContent = NO_PLOTLY;
      return;
    }
    drawing = true;
    stale = false;
    const started = performance.now();
    try {
      // Copies: plotly writes into the layout it draws (ranges), and the model's value must stay as it came.
      const wanted = model.get("figure_layout") || {};
      if (layout === null) {
        layout = { uirevision: "live" }; // a zoom or a legend click survives the redraws
        drawnKeys = {};
      }
      for (const [key, value] of Object.entries(wanted)) {
        const json = JSON.stringify(value);
        if (drawnKeys[key] !== json) {
          layout[key] = JSON.parse(json);
          drawnKeys[key] = json;
        }
      }
      contain(el, layout);
      layout.datarevision = ++revision; // the traces are new arrays each time
      const data = (model.get("figure_data") || []).map((trace) => ({
        ...trace,
      }));
      await plotly.react(el, data, layout, {
        displaylogo: false,
        responsive: false,
      });
    } catch (error) {
      el.textContent = `Cannot draw the live figure: ${error}`;
    } finally {
      drawing = false;
      const took = performance.now() - started;
      notBefore = performance.now() + Math.max(MIN_GAP_MS, GAP_PER_DRAW * took);
      if (stale) {
        schedule();
      }
    }
  }

  function schedule() {
    stale = true;
    if (timer !== null || drawing || disposed || !visible) {
      return;
    }
    const wait = Math.max(0, notBefore - performance.now());
    timer = setTimeout(() => inTurn(draw), wait);
  }

  // Out of view (scrolled away, another tab in front) nothing is drawn; the newest data is drawn on return.
  const watcher =
    typeof IntersectionObserver === "function"
      ? new IntersectionObserver((entries) => {
          visible = entries.some((entry) => entry.isIntersecting);
          if (visible && stale) {
            schedule();
          }
        })
      : null;
  watcher?.observe(el);

  model.on("change:figure_data", schedule);
  model.on("change:figure_layout", schedule);
  schedule();
  return () => {
    disposed = true;
    watcher?.disconnect();
    if (timer !== null) {
      clearTimeout(timer);
    }
    model.off("change:figure_data", schedule);
    model.off("change:figure_layout", schedule);
    loading.then((plotly) => plotly && plotly.purge && plotly.purge(el));
  };
}

export default { render };
