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


def resource_layout(template, width, title="resources per rank"):
    from .theme import background_for

    backgrounds = {"paper_bgcolor": "white", "plot_bgcolor": "white", **background_for(template)}
    return dict(
        template=template,
        width=width,
        height=HEIGHT,
        autosize=False,
        margin=dict(l=50, r=60, t=30, b=40),
        title=dict(text=title, font=dict(size=12)),
        **backgrounds,
        xaxis=dict(title="seconds since the job's first sample"),
        yaxis=dict(title="% (100 = one core)", rangemode="tozero"),
        yaxis2=dict(title="MB", overlaying="y", side="right", showgrid=False, tickmode="auto", rangemode="tozero"),
        legend=dict(orientation="h", y=-0.35, font=dict(size=10)),
    )


def resource_traces(resources: dict):
    """[(name, x, y, axis, dash, color)] for every rank and every series it sampled."""
    starts = [series["t"][0] for series in resources.values() if series.get("t")]
    if not starts:
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


class ResourceFigure:
    """A plotly FigureWidget kept in step with TrainingState.resources; `widget` is None until samples arrive."""

    def __init__(self, template, width):
        self.template = template
        self.width = width
        self.widget = None
        self._traces = {}

    def update(self, resources: dict) -> bool:
        """Redraw from the state's series; True when the widget was created by this call (the view shows it)."""
        traces = resource_traces(resources)
        if not traces:
            return False
        created = self.widget is None
        if created:
            import plotly.graph_objects as go

            self.widget = go.FigureWidget(layout=resource_layout(self.template, self.width))
        with self.widget.batch_update():
            for name, xs, ys, axis, dash, color in traces:
                if name not in self._traces:
                    self.widget.add_scatter(
                        name=name, yaxis=axis, mode="lines", line=dict(width=1.5, dash=dash, color=color)
                    )
                    self._traces[name] = self.widget.data[-1]
                self._traces[name].x, self._traces[name].y = xs, ys
        return created
