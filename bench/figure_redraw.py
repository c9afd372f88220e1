"""What one live redraw of the cell's loss figure costs in the browser, by layout variant (issue 30 item 5).

Draws the loss figure as the cell streams it (the epoch lines, four epoch series, the smoothed batch loss) with
plotly.js (the build plotly's JupyterLab renderer ships) in headless Chromium, then redraws it `--redraws` times
with one more point each, as the live view does every second. Variants run interleaved in the same page, so the
machine's load weighs on each alike; the ratio against the layout the cell sends today is what to read.

    .venv/bin/python bench/figure_redraw.py [--rounds 5] [--redraws 40]
"""

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import finish, load_before  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

DRAW = """
async ([figure, redraws]) => {
  const div = document.createElement('div');
  document.body.appendChild(div);
  const upTo = (t, n) => ({...t, x: t.x.slice(0, t.x.length - n), y: t.y.slice(0, t.y.length - n)});
  await Plotly.newPlot(div, figure.data.map(t => upTo(t, redraws)), figure.layout);
  const times = [];
  for (let i = 1; i <= redraws; i++) {
    const more = figure.data.map(t => upTo(t, redraws - i));
    const t0 = performance.now();
    await Plotly.react(div, more, figure.layout);
    times.push(performance.now() - t0);
  }
  Plotly.purge(div);
  div.remove();
  return times;
}
"""


def loss_figure_as_sent(epochs=40, steps_per_epoch=12):
    """The loss figure of a 40-epoch job, as the live view builds it (template written out)."""
    from jupyter_dl.live import loss_figure
    from jupyter_dl.live.live_figure import expanded_layout, json_safe

    steps = epochs * steps_per_epoch
    x = list(range(1, steps + 1))
    loss = [2.3 * 0.995**s for s in x]
    ex = [steps_per_epoch * (e + 1) for e in range(epochs)]

    def trace(name, xs, ys, axis, mode, dash=None):
        return json_safe(dict(type="scatter", name=name, x=xs, y=ys, yaxis=axis, mode=mode, line=dict(dash=dash)))

    data = [trace("loss (smoothed)", x, loss, "y", "lines")]
    for key, scale in (("loss", 1.0), ("val_loss", 1.1), ("accuracy", 0.9), ("val_accuracy", 0.85)):
        axis = "y" if key.endswith("loss") else "y2"
        ys = [scale * (1 - 0.9**e) if "acc" in key else scale * 2.3 * 0.95**e for e in range(epochs)]
        data.append(trace(key, ex, ys, axis, "lines+markers", "dot" if key.startswith("val_") else None))
    layout = loss_figure.layout("digits · 2 ranks", "plotly_white")
    layout["shapes"] = [
        dict(type="line", x0=b, x1=b, yref="paper", y0=0, y1=1, line=dict(dash="dot", width=1)) for b in ex
    ]
    return {"data": data, "layout": json_safe(expanded_layout(layout))}


def without_title_standoff(figure):
    """The same figure with the template's axis-title `standoff` taken out (plotly.js then places each title at a
    fixed offset instead of measuring every tick label's box first)."""
    layout = json.loads(json.dumps(figure["layout"]))
    for name, axis in layout["template"]["layout"].items():
        if name.startswith(("xaxis", "yaxis")):
            axis.get("title", {}).pop("standoff", None)
    return {"data": figure["data"], "layout": layout}


def without_axis_titles(figure):
    layout = json.loads(json.dumps(figure["layout"]))
    for name, axis in layout.items():
        if name.startswith(("xaxis", "yaxis")):
            axis.pop("title", None)
    return {"data": figure["data"], "layout": layout}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redraws", type=int, default=40)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    plotly_js = next((HERE.parent / ".venv").glob("lib/python3*/site-packages/plotly/package_data/plotly.min.js"))
    today = loss_figure_as_sent()
    variants = {
        "as sent today": today,
        "no title standoff": without_title_standoff(today),
        "no axis titles": without_axis_titles(today),
        "no shapes": {"data": today["data"], "layout": {**today["layout"], "shapes": []}},
        "lines only": {"data": [{**t, "mode": "lines"} for t in today["data"]], "layout": today["layout"]},
    }
    t_start, before = time.perf_counter(), load_before()
    times = {name: [] for name in variants}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_content("<html><body></body></html>")
        page.add_script_tag(path=str(plotly_js))
        page.evaluate(DRAW, [today, 5])  # warm-up: the first draw compiles plotly.js' code paths
        for _ in range(args.rounds):
            for name, figure in variants.items():
                times[name] += page.evaluate(DRAW, [figure, args.redraws])
        browser.close()
    base = statistics.median(times["as sent today"])
    print(f"{args.rounds} rounds x {args.redraws} redraws of the 40-epoch loss figure (plotly.js, headless Chromium)")
    for name, values in times.items():
        median = statistics.median(values)
        p95 = sorted(values)[int(0.95 * (len(values) - 1))]
        print(f"  {name:<20} median {median:6.1f} ms  p95 {p95:6.1f} ms  ratio {median / base:.2f}")
    finish(
        __file__,
        {name: {"median_ms": statistics.median(v), "all_ms": v} for name, v in times.items()},
        t_start,
        before,
        ("plotly", "playwright"),
    )


if __name__ == "__main__":
    main()
