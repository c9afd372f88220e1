"""The cell's live view: a progress bar, the loss curves (a LiveFigure, live_figure.py) and the final summary.

Before the first step (a cold cluster start takes tens of seconds) the progress area says what is happening:
the job runner calls `status(text)` at each phase. The figure joins it with the first step. While the job runs the
progress line updates in place at most every `refresh_interval`, the figure every `figure_interval`. When it ends,
the widgets' output is replaced by a static plotly figure of the same size, so a notebook executed without a widget
manager (nbclient, nbconvert) still holds the final picture, and the summary follows; these outputs carry the job's
id in their metadata (`{"jupyter_dl": {"job": id}}`), by which the jobs panel finds the job's cell.

Throughput here is the live rate: samples per second over the last few seconds, all ranks together (the jobs
panel shows the same figure). The summary's is the whole fit's average (see summary.py), so it is lower when
the first steps were slow; each says which it is.
"""

import html
import json
import math
import time

from jupyter_dl.live import loss_figure
from jupyter_dl.live.durations import format_duration
from jupyter_dl.live.loss_figure import FIGURE_WIDTH
from jupyter_dl.live.resources_figure import ResourceFigure
from jupyter_dl.live.summary import as_html, as_text, summarize

RATE_WINDOW_S = 3  # TrainingState's live-speed window
RATE_HELP = (
    f"samples per second over the last {RATE_WINDOW_S} s, all ranks together; the summary at the end "
    f"gives the average over the whole fit"
)
PLOTLY_MIME = "application/vnd.plotly.v1+json"
# What jupyter-dl's JupyterLab extension draws a static figure by (labextension/src/cellFigure.ts): its value names
# the bundle's entry that holds the figure, PLOTLY_MIME, which JupyterLab's plotly renderer draws at once and three
# times over (300-660 ms of blocked page at a job's end on a loaded machine), and other front ends draw as before.
FIGURE_MIME = "application/vnd.jupyter-dl.figure+json"
# Points per series in the cell's live figure (the static copy at the end and the panel draw up to the state's
# budget): plotly.js builds each redraw's path and the widget sends each series again every second.
LIVE_POINTS = 500
ETA_TIME_CONSTANT_S = 10.0  # the ETA label follows a new estimate over about this long, not at every redraw


def _display(obj, **kwargs):
    """IPython's display inside a shell; outside one (scripts) nothing is shown and None comes back."""
    from IPython import get_ipython

    if get_ipython() is None:
        return None
    from IPython.display import display

    return display(obj, **kwargs)


class LiveView:
    """One job's view in its cell; the job runner tells it what happens (a JobObserver, kernel/job/observer.py)."""

    def __init__(
        self,
        template="plotly_white",
        show_plot=True,
        refresh_interval=0.1,
        baseline_sps=None,
        figure_interval=1.0,
        resources_interval=3.0,
    ):
        self.template = template
        self.baseline_sps = baseline_sps  # samples/s of a single-rank run of the same work, if one ran
        self.summary = None
        self.show_plot = show_plot
        self.refresh_interval = refresh_interval  # the progress line
        # The figure: each redraw costs the browser 50-100 ms of plotly.js (several times that on a loaded machine),
        # for a curve that moves little in a second.
        self.figure_interval = figure_interval
        # The resources figure: a second redraw as costly as the loss', for lines that move little in a few seconds.
        self.resources_interval = resources_interval
        self._figure_at = self._resources_at = -math.inf
        self.widget = None  # the live loss figure (live_figure.LiveFigure), from the first step on
        self._title = None  # set when the ranks start
        self._job = None  # the job, from when its ranks start: an elastic job's membership grows as it runs
        self._loss_spec = None  # the loss figure as last drawn, a plotly dict
        self._figure = None
        self._marks_drawn = None
        self.progress_bar = None
        self.label = None
        self._handle = None
        self._box = None
        self._eta = SmoothedEta(ETA_TIME_CONSTANT_S)
        self._last_refresh = -math.inf  # never: monotonic time starts near 0 at boot
        self.resources = ResourceFigure(template, FIGURE_WIDTH)  # under the loss once ranks' samples arrive
        self._resource_samples_drawn = 0
        self.refresh_latencies = []  # per batch: engine batch end -> figure data changed, seconds (benchmark)

    # ---------------------------------------------------------------------------------------------- start
    def status(self, text):
        """What the job is doing before its first step (starting engines, importing TensorFlow, rendezvous), in
        the progress area, as ordinary output. The job runner calls this at each phase."""
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
        """The ranks run. The figure joins the progress area with the first step, not now: a job that fails before
        it (a NameError in the cell) leaves no empty plot, and no widget is still being built in the browser when
        the output is replaced at the end (that showed as 'Could not add child view to box' in the console)."""
        if not self.show_plot:
            return
        self._progress_area()  # shown already when the job runner reported a cold start
        self._title = loss_figure.title_of(job.name, job.n)
        self._job = job
        job_id = getattr(job, "id", None)
        if job_id:  # the panel's Notebook button finds the running job's cell by it
            self._box.add_class(job_class(job_id))

    # --------------------------------------------------------------------------------------------- update
    def update(self, state, force=False, final=False):
        """Draw what `state` holds now (at most every `refresh_interval`, unless `force`). `final`: the job ended,
        so the figures follow the state but no widget is added to the output about to be replaced."""
        if self._title is None:
            return
        now = time.monotonic()
        if not force and now - self._last_refresh < self.refresh_interval:
            return
        self._last_refresh = now
        # The progress line first: it is what a reader looks at, and it must not wait behind the figure's data.
        self._update_progress(state.progress(), waiting=bool(state.ranks) and not state.global_step)
        if not (loss_figure.has_data(state) and (force or now - self._figure_at >= self.figure_interval)):
            return
        self._figure_at = now
        self._draw_loss(state, create=not final)
        # Samples come about once a second: resend the resource series only when they grew, and not at every redraw.
        if state.resource_samples != self._resource_samples_drawn and (
            force or now - self._resources_at >= self.resources_interval
        ):
            self._resources_at = now
            self._resource_samples_drawn = state.resource_samples
            if self.resources.update(state.resources, create=not final):
                self._box.children = [*self._box.children, self.resources.widget]
        drawn = time.time()
        self.refresh_latencies.extend(drawn - t for t in state.take_undrawn())

    def _draw_loss(self, state, create=True):
        membership = getattr(self._job, "membership", None) or []
        layout = loss_figure.layout(self._title, self.template, loss_figure.is_elastic(membership))
        traces = loss_figure.traces(state, membership=membership, max_points=LIVE_POINTS if create else None)
        shapes, annotations = loss_figure.shapes(state), loss_figure.annotations(state)
        self._loss_spec = {"data": traces, "layout": {**layout, "shapes": shapes, "annotations": annotations}}
        self._figure = None  # built again from the spec when asked for
        if self.widget is None:
            if not create:
                return
            from jupyter_dl.live.live_figure import LiveFigure

            self.widget = LiveFigure(layout)
            self._box.children = [*self._box.children, self.widget]
        # Epoch marks change once an epoch: the layout is sent again only then.
        marks = (shapes, annotations)
        changed = {"shapes": shapes, "annotations": annotations} if marks != self._marks_drawn else None
        self._marks_drawn = marks
        self.widget.show(traces, changed)

    @property
    def figure(self):
        """A plotly Figure of the loss figure as last drawn (None before the first step): what the static copy
        shows at the end."""
        if self._loss_spec is None:
            return None
        if self._figure is None:
            import plotly.graph_objects as go

            self._figure = go.Figure(self._loss_spec)
        return self._figure

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
        if self._title is not None:
            self.update(state, force=True, final=True)
            figure = self.figure
            if self._handle is not None:
                # The progress area becomes a static copy of the figure, or nothing when no step ran (a cell that
                # failed early, a --manual cell without LiveMetrics): no empty plot is left behind.
                bundle = static_figure_bundle(figure) if figure is not None else {"text/plain": ""}
                self._handle.update(bundle, raw=True, metadata=output_metadata(job))
            resources = self.resources.figure
            # Under the loss figure only, as while it ran (a job that failed in its first second has no loss and a
            # chart of a few samples says nothing); its live widget went with the box the static copy replaced.
            if resources is not None and figure is not None:
                _display(static_figure_bundle(resources), raw=True, metadata=output_metadata(job))
        summary_bundle = {"text/plain": as_text(summary), "text/html": as_html(summary)}
        _display(summary_bundle, raw=True, metadata=output_metadata(job))


def output_metadata(job) -> dict:
    """What the cell's outputs of a job carry in the notebook, so the jobs panel can find the job's cell."""
    job_id = getattr(job, "id", None)
    return {"jupyter_dl": {"job": job_id}} if job_id else {}


def job_class(job_id) -> str:
    """The CSS class of a running job's progress area (the panel's Notebook button scrolls to it)."""
    return f"jp-dl-job-{job_id}"


def progress_text(p) -> str:
    parts = []
    if p.get("epochs"):
        parts.append(f"epoch {p['epoch']}/{p['epochs']}")
    if p.get("steps"):
        parts.append(f"step {p['step']}/{p['steps']}")
    if p.get("samples_per_s"):
        parts.append(f"{p['samples_per_s']:,.0f} samples/s (last {RATE_WINDOW_S} s)")
    if p.get("eta_s") is not None:
        parts.append(f"ETA {format_duration(p['eta_s'])}")
    return " · ".join(parts)


def format_percent(fraction) -> str:
    """'5.7%' below 10% (a bar a little past 5% does not read '5%'), whole percents above; 100% only when done."""
    percent = 100 * min(1.0, max(0.0, fraction))
    if percent < 10:
        return f"{percent:.1f}%"
    return "100%" if percent >= 100 else f"{min(99, round(percent))}%"


class SmoothedEta:
    """An ETA that counts down with the clock and moves toward each new estimate over about `time_constant`
    seconds: the raw one (remaining steps / the last few seconds' speed) jumped 5m18s -> 7m29s -> 4m00s in 8 s."""

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


def static_figure_bundle(figure) -> dict:
    """A plain plotly mime bundle of the figure as it is now (no widget manager needed to show it), which names
    it for jupyter-dl's JupyterLab extension too (FIGURE_MIME: drawn once, when the page is idle)."""
    import plotly.graph_objects as go

    static = go.Figure(figure.to_dict())
    spec = json.loads(static.to_json())
    return {
        FIGURE_MIME: {"figure": PLOTLY_MIME},
        PLOTLY_MIME: {"data": spec["data"], "layout": spec["layout"], "config": {}},
        "text/html": static.to_html(include_plotlyjs="cdn", full_html=False),
        "text/plain": f"<Figure: {', '.join(t.name for t in static.data)}>",
    }
