"""The live view's resource chart: each rank's CPU % and resident memory (and GPU utilisation and memory where the
ranks sampled a GPU) against seconds since the job's first sample, one colour per rank.

Shown under the loss figure once samples arrive (runtime/resources.py sends them), so a straggler (a rank at lower
CPU) or a leak (a rank's memory climbing) is visible at a glance while the job runs.
"""

RANK_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
# (state key, trace label, axis, dash): utilisation in percent on the left axis, memory in MB on the right.
SERIES = (
    ("cpu", "CPU %", "y", None),
    ("gpu_util", "GPU %", "y", "dash"),
    ("rss_mb", "memory MB", "y2", "dot"),
    ("gpu_mem_mb", "GPU memory MB", "y2", "dashdot"),
)
HEIGHT = 240
MIN_SAMPLES = 2  # a line needs two points


def resource_layout(template, width, title="resources per rank"):
    from jupyter_dl.live.theme import QUICK_AXIS, QUICK_X_AXIS, frame

    return dict(
        # Room for "100" and "12000" (MB) and the axis titles beside them (the axes' margins are fixed).
        **frame(template, title, 12, dict(l=60, r=70, t=30, b=40), width=width, height=HEIGHT),
        xaxis=dict(title="seconds since the job's first sample", **QUICK_X_AXIS),
        yaxis=dict(title="% (100 = one core)", rangemode="tozero", **QUICK_AXIS),
        yaxis2=dict(
            title="MB", overlaying="y", side="right", showgrid=False, tickmode="auto", rangemode="tozero", **QUICK_AXIS
        ),
        legend=dict(orientation="h", y=-0.35, font=dict(size=10)),
    )


def resource_traces(resources: dict):
    """[(name, x, y, axis, dash, color)] for every rank and every series it sampled."""
    starts = [series["t"][0] for series in resources.values() if series.get("t")]
    # One sample per rank draws no line, only empty axes from -1 to 1 (a job that failed within a second): no chart.
    if max((len(series.get("t", ())) for series in resources.values()), default=0) < MIN_SAMPLES:
        return []
    origin = min(starts)
    traces = []
    for rank, series in sorted(resources.items()):
        xs = [round(t - origin, 2) for t in series["t"]]
        color = RANK_COLORS[rank % len(RANK_COLORS)]
        for key, label, axis, dash in SERIES:
            values = series.get(key)
            if values and any(v is not None for v in values):
                traces.append((f"rank {rank} {label}", xs, values, axis, dash, color))
    return traces


def trace_specs(resources: dict) -> list:
    """The scatter traces as plotly dicts, one per rank and series sampled: what the widget and the panel draw."""
    return [
        dict(
            type="scatter",
            name=name,
            x=xs,
            y=ys,
            yaxis=axis,
            mode="lines",
            line=dict(width=1.5, dash=dash, color=color),
        )
        for name, xs, ys, axis, dash, color in resource_traces(resources)
    ]


def figure(resources: dict, template: str, width: int):
    """The whole figure as a plain dict ({"data", "layout"}), or None before any rank sampled."""
    specs = trace_specs(resources)
    return {"data": specs, "layout": resource_layout(template, width)} if specs else None


class ResourceFigure:
    """The live view's resource chart: a LiveFigure once some rank's samples draw a line (`widget` is None before),
    and `figure`, a plotly Figure of what it shows (the static copy at the end)."""

    def __init__(self, template, width):
        self.template = template
        self.width = width
        self.widget = None
        self._spec = None

    def update(self, resources: dict, create: bool = True) -> bool:
        """Redraw from the state's series; True when the widget was created by this call (the view shows it).
        Without `create`, only `figure` follows (the job ended: no widget is shown any more)."""
        specs = trace_specs(resources)
        if not specs:
            return False
        self._spec = {"data": specs, "layout": resource_layout(self.template, self.width)}
        if self.widget is None:
            if not create:
                return False
            from jupyter_dl.live.live_figure import LiveFigure

            self.widget = LiveFigure(self._spec["layout"])
            self.widget.show(specs)
            return True
        self.widget.show(specs)
        return False

    @property
    def figure(self):
        """A plotly Figure of the chart as last updated, or None before any rank drew a line."""
        import plotly.graph_objects as go

        return go.Figure(self._spec) if self._spec is not None else None
