"""The cell's live view: a plotly FigureWidget with the loss curves, a progress bar, and the final summary.

Before the first step (a cold cluster start takes tens of seconds) the progress area says what is happening:
the launcher calls `status(text)` at each phase. While the job runs the widget updates in place (at most every
`refresh_interval`). When it ends, the widget's output is replaced by a static plotly figure of the same size, so
a notebook executed without a widget manager (nbclient, nbconvert) still holds the final picture, and the summary
follows.

Throughput here is the live rate: samples per second over the last few seconds, all ranks together (the jobs
panel shows the same figure). The summary's is the whole fit's average (see summary.py), so it is lower when
the first steps were slow; each says which it is.
"""

import html
import json
import math
import time

from .resources_figure import ResourceFigure
from .summary import as_html, as_text, summarize

MAX_BOUNDARY_MARKS = 200  # beyond this, per-epoch markers on the epoch traces show the boundaries
RESTART_COLOR = "#d62728"
# One fixed size for the live widget and the static copy that replaces it: plotly.js gives an unsized widget its
# 700 px default while the static renderer fills the cell, and the output jumped when the job ended.
FIGURE_WIDTH, FIGURE_HEIGHT = 760, 360
RATE_WINDOW_S = 3  # TrainingState's live-speed window
RATE_HELP = (
    f"samples per second over the last {RATE_WINDOW_S} s, all ranks together; the summary at the end "
    f"gives the average over the whole fit"
)
ETA_TIME_CONSTANT_S = 10.0  # the ETA label follows a new estimate over about this long, not at every redraw


def _display(obj, **kwargs):
    """IPython's display inside a shell; outside one (scripts) nothing is shown and None comes back."""
    from IPython import get_ipython

    if get_ipython() is None:
        return None
    from IPython.display import display

    return display(obj, **kwargs)


class LiveView:
    def __init__(self, template="plotly_white", show_plot=True, refresh_interval=0.1, baseline_sps=None):
        self.template = template
        self.baseline_sps = baseline_sps  # samples/s of a single-rank run of the same work, if one ran
        self.summary = None
        self.show_plot = show_plot
        self.refresh_interval = refresh_interval
        self.figure = None
        self.progress_bar = None
        self.label = None
        self._handle = None
        self._box = None
        self._eta = SmoothedEta(ETA_TIME_CONSTANT_S)
        self._last_refresh = 0.0
        self._traces = {}
        self.resources = ResourceFigure(template, FIGURE_WIDTH)  # under the loss once ranks' samples arrive
        self._resource_samples_drawn = 0
        self.refresh_latencies = []  # per batch: engine batch end -> figure data changed, seconds (benchmark)

    # ---------------------------------------------------------------------------------------------- start
    def status(self, text):
        """What the job is doing before its first step (starting engines, importing TensorFlow, rendezvous), in
        the progress area, as ordinary output. The launcher calls this at each phase."""
        if not self.show_plot:
            return
        self._progress_area()
        self.progress_bar.description = "starting"
        self.label.value = f"<span class='jp-dl-status'>{html.escape(text)}…</span>"

    def _progress_area(self):
        if self._box is not None:
            return
        import ipywidgets as widgets

        self.progress_bar = widgets.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="starting", layout=widgets.Layout(width="60%")
        )
        self.label = widgets.HTML(value="")
        self._box = widgets.VBox([widgets.HBox([self.progress_bar, self.label])])
        self._handle = _display(self._box, display_id=True)

    def started(self, job):
        if not self.show_plot:
            return
        import plotly.graph_objects as go

        self._progress_area()  # shown already when the launcher reported a cold start
        self.figure = go.FigureWidget(layout=self._layout(job))
        self._box.children = [*self._box.children, self.figure]

    def _layout(self, job):
        from .theme import background_for

        # The template's own background, not a transparent one: the static copy outlives a theme switch.
        backgrounds = {"paper_bgcolor": "white", "plot_bgcolor": "white", **background_for(self.template)}
        return dict(
            template=self.template,
            width=FIGURE_WIDTH,
            height=FIGURE_HEIGHT,
            autosize=False,
            margin=dict(l=50, r=50, t=40, b=40),
            title=dict(text=f"{job.name} · {job.n} ranks", font=dict(size=13)),
            **backgrounds,
            xaxis=dict(title="step"),
            yaxis=dict(title="loss"),
            # plotly.js gives an overlaying axis tickmode "sync": ticks at the loss axis' gridlines, which read as
            # 0.463, 0.581 on the metrics scale. Its own round ticks instead.
            yaxis2=dict(title="metrics", overlaying="y", side="right", showgrid=False, tickmode="auto"),
            legend=dict(orientation="h", y=-0.2),
        )

    # --------------------------------------------------------------------------------------------- update
    def update(self, state, force=False):
        if self.figure is None:
            return
        now = time.monotonic()
        if not force and now - self._last_refresh < self.refresh_interval:
            return
        self._last_refresh = now
        with self.figure.batch_update():
            self._set("loss (batch, smoothed)", state.batch_loss, axis="y", mode="lines", width=1)
            for key, series in state.epoch_series.items():
                axis = "y" if key.endswith("loss") else "y2"
                self._set(
                    key,
                    series,
                    axis=axis,
                    mode="lines+markers",
                    width=2,
                    dash="dot" if key.startswith("val_") else None,
                )
            self.figure.layout.shapes = [
                dict(
                    type="line",
                    x0=b,
                    x1=b,
                    yref="paper",
                    y0=0,
                    y1=1,
                    line=dict(dash="dot", width=1, color="rgba(128,128,128,0.5)"),
                )
                for b in state.epoch_boundaries[-MAX_BOUNDARY_MARKS:]
            ] + [
                dict(
                    type="line",
                    x0=r["step"],
                    x1=r["step"],
                    yref="paper",
                    y0=0,
                    y1=1,
                    line=dict(dash="dash", width=2, color=RESTART_COLOR),
                )
                for r in state.restarts
            ]
            self.figure.layout.annotations = [
                dict(
                    x=r["step"],
                    y=1,
                    yref="paper",
                    yanchor="bottom",
                    showarrow=False,
                    text=f"restart {r['attempt']}",
                    hovertext=r["reason"],
                    font=dict(size=11, color=RESTART_COLOR),
                )
                for r in state.restarts
            ]
        # Samples come about once a second, redraws up to ten times: resend the resource series only when they grew.
        if state.resource_samples != self._resource_samples_drawn:
            self._resource_samples_drawn = state.resource_samples
            if self.resources.update(state.resources):
                self._box.children = [*self._box.children, self.resources.widget]
        drawn = time.time()
        self.refresh_latencies.extend(drawn - t for t in state.take_undrawn())
        self._update_progress(state.progress(), waiting=bool(state.ranks) and not state.global_step)

    def _set(self, name, series, axis, mode, width, dash=None):
        xs, ys = series.points()
        if name not in self._traces:
            self.figure.add_scatter(name=name, yaxis=axis, mode=mode, line=dict(width=width, dash=dash))
            self._traces[name] = self.figure.data[-1]
        trace = self._traces[name]
        trace.x, trace.y = xs, ys

    def _update_progress(self, p, waiting=False):
        if self.progress_bar is None:
            return
        if waiting:  # fit began on the ranks; its first step builds (traces) the training function
            self.status("first step (building the training function)")
            return
        if not p.get("global_step") and not p.get("fraction"):
            return  # nothing measured yet: the last status line stays
        if p["fraction"] is not None:
            self.progress_bar.value = p["fraction"]
        self.progress_bar.description = format_percent(p["fraction"] or 0)
        p = {**p, "eta_s": self._eta.update(p.get("eta_s"), time.monotonic())}
        self.label.value = f"<span title='{html.escape(RATE_HELP, quote=True)}'>{html.escape(progress_text(p))}</span>"

    # --------------------------------------------------------------------------------------------- finish
    def finished(self, job, state):
        self.summary = summarize(job, state, self.baseline_sps)
        summary = self.summary
        if self.figure is not None:
            self.update(state, force=True)
            if self._handle is not None:
                # A job that reported no metrics (a --manual cell without LiveMetrics) leaves no empty plot behind.
                has_data = state.global_step or state.epoch_logs
                self._handle.update(static_figure_bundle(self.figure) if has_data else {"text/plain": ""}, raw=True)
            if self.resources.widget is not None:  # its live widget went with the box the static copy replaced
                _display(static_figure_bundle(self.resources.widget), raw=True)
        _display({"text/plain": as_text(summary), "text/html": as_html(summary)}, raw=True)


def progress_text(p) -> str:
    parts = []
    if p.get("epochs"):
        parts.append(f"epoch {p['epoch']}/{p['epochs']}")
    if p.get("steps"):
        parts.append(f"step {p['step']}/{p['steps']}")
    if p.get("samples_per_s"):
        parts.append(f"{p['samples_per_s']:,.0f} samples/s (last {RATE_WINDOW_S} s)")
    if p.get("eta_s") is not None:
        parts.append(f"ETA {_clock(p['eta_s'])}")
    return " · ".join(parts)


def format_percent(fraction) -> str:
    """'5.7%' below 10% (a bar a little past 5% does not read '5%'), whole percents above; 100% only when done."""
    percent = 100 * min(1.0, max(0.0, fraction))
    if percent < 10:
        return f"{percent:.1f}%"
    return "100%" if percent >= 100 else f"{min(99, round(percent))}%"


class SmoothedEta:
    """An ETA that counts down with the clock and moves toward each new estimate over about `time_constant`
    seconds: the raw one (remaining steps / the last few seconds' speed) jumped 5m18 -> 7m29 -> 4m00 in 8 s."""

    def __init__(self, time_constant):
        self.time_constant = time_constant
        self._value = self._at = None

    def update(self, estimate, now):
        if estimate is None or self._value is None or estimate == 0:
            self._value, self._at = estimate, now
            return estimate
        elapsed = max(0.0, now - self._at)
        counted_down = max(0.0, self._value - elapsed)
        weight = 1.0 - math.exp(-elapsed / self.time_constant) if self.time_constant > 0 else 1.0
        self._value, self._at = counted_down + weight * (estimate - counted_down), now
        return self._value


def _clock(seconds):
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def static_figure_bundle(figure) -> dict:
    """A plain plotly mime bundle of the figure as it is now (no widget manager needed to show it)."""
    import plotly.graph_objects as go

    static = go.Figure(figure.to_dict())
    spec = json.loads(static.to_json())
    return {
        "application/vnd.plotly.v1+json": {"data": spec["data"], "layout": spec["layout"], "config": {}},
        "text/html": static.to_html(include_plotlyjs="cdn", full_html=False),
        "text/plain": f"<Figure: {', '.join(t.name for t in static.data)}>",
    }
