"""The loss figure of one job, from its TrainingState: smoothed per-batch loss, each epoch metric (losses on the left
axis, other metrics on the right), dotted epoch boundaries and dashed restart marks; for an elastic job (-n MIN:MAX),
its rank count over the same steps as a step line in a strip under the loss.

Pure data (plotly figure dicts), built in one place: the cell's live widget (view.py) updates its traces from
these, and the jobs panel's loss tab gets the same figure over REST (live/job_figures.py), so both look alike.
"""

from jupyter_dl.live.series import thinned
from jupyter_dl.live.theme import QUICK_AXIS, QUICK_X_AXIS, frame

BATCH_LOSS = "loss (batch, smoothed)"
RAW_LOSS = "loss (batch)"  # the recovered per-batch values, unsmoothed: hidden until the panel's "Raw steps" shows it
MAX_BOUNDARY_MARKS = 200  # beyond this, per-epoch markers on the epoch traces show the boundaries
RESTART_COLOR = "#d62728"
# One fixed size for the live widget and the static copy that replaces it: plotly.js gives an unsized widget its
# 700 px default while the static renderer fills the cell, and the output jumped when the job ended.
FIGURE_WIDTH, FIGURE_HEIGHT = 760, 360
RANKS = "ranks"  # an elastic job's rank count (its own axis, yaxis3, in a strip under the loss)
RANKS_COLOR = "#7f7f7f"
RANKS_STRIP_HEIGHT = 90  # pixels the strip adds to an elastic job's figure, so the loss keeps its own height
RANKS_DOMAIN, ELASTIC_LOSS_DOMAIN = [0.0, 0.2], [0.3, 1.0]  # of the plot area, bottom to top


def layout(title: str, template: str, elastic: bool = False) -> dict:
    """Everything but the data: size, axes, legend and the template's own background. `elastic`: with the strip of
    the rank count under the loss, sharing its step axis (drawn once, at the bottom)."""
    height = FIGURE_HEIGHT + (RANKS_STRIP_HEIGHT if elastic else 0)
    out = dict(
        # Room for tick labels of five characters and the axis title beside them (the axes' margins are fixed).
        **frame(template, title, 13, dict(l=60, r=60, t=40, b=40), width=FIGURE_WIDTH, height=height),
        xaxis=dict(title="step", **QUICK_X_AXIS),
        yaxis=dict(title="loss", **QUICK_AXIS),
        # plotly.js gives an overlaying axis tickmode "sync": ticks at the loss axis' gridlines, which read as
        # 0.463, 0.581 on the metrics scale. Its own round ticks instead.
        yaxis2=dict(title="metrics", overlaying="y", side="right", showgrid=False, tickmode="auto", **QUICK_AXIS),
        legend=dict(orientation="h", y=-0.2),
    )
    if elastic:
        out["xaxis"]["anchor"] = "y3"
        out["yaxis"]["domain"] = ELASTIC_LOSS_DOMAIN
        # Whole ranks from 0, so 2 -> 4 reads as a doubling; a few ticks fit the strip.
        out["yaxis3"] = dict(
            title=RANKS, domain=RANKS_DOMAIN, anchor="x", rangemode="tozero", tickformat="d", nticks=3, **QUICK_AXIS
        )
    return out


def is_elastic(membership) -> bool:
    """Whether a job is elastic, by its record's membership ([{t, n, reason}, ...]; a fixed-size job has none)."""
    return bool(membership)


def title_of(name: str, ranks: int) -> str:
    return f"{name} · {_ranks(ranks)}"


def _trace(name, series, axis, mode, width, color, dash=None, max_points=None, **extra) -> dict:
    xs, ys = series.points()
    if max_points is not None:
        xs, ys = thinned(xs, ys, max_points)
    line = dict(width=width, dash=dash, color=color)
    markers = dict(marker=dict(color=color)) if "markers" in mode else {}
    return dict(type="scatter", name=name, x=xs, y=ys, yaxis=axis, mode=mode, line=line, **markers, **extra)


def metric_colors(names) -> dict:
    """A fixed colour per metric: plotly colours traces by their place in the figure, so showing the hidden raw-loss
    trace turned the loss from green to purple. The batch loss (smoothed and raw) takes the first colour, each
    metric the next in order of appearance, and `val_x` shares x's colour (dotted)."""
    from plotly.colors import qualitative

    palette = qualitative.Plotly
    bases = list(dict.fromkeys(name.removeprefix("val_") for name in names))
    colors = {BATCH_LOSS: palette[0], RAW_LOSS: palette[0]}
    for i, base in enumerate(bases, start=1):
        colors[base] = colors["val_" + base] = palette[i % len(palette)]
    return colors


def rank_count_trace(state, membership) -> dict:
    """An elastic job's rank count as a step line over the loss' steps: the first group from step 0, each next one
    from where its run resumed (the state's restarts, one per membership change, in order), held to the last step.
    Each point's hover says how many ranks from which step, and why the group changed."""
    first = membership[0]
    xs, ys, hover = [0], [first["n"]], [f"{_ranks(first['n'])} from step 0: {first['reason']}"]
    for restart, change in zip(state.restarts, membership[1:]):
        xs.append(restart["step"])
        ys.append(change["n"])
        hover.append(f"{_ranks(change['n'])} from step {restart['step']}: {change['reason']}")
    xs.append(max(state.global_step, xs[-1]))
    ys.append(ys[-1])
    hover.append(f"{_ranks(ys[-1])} at step {xs[-1]}")
    line = dict(shape="hv", width=2, color=RANKS_COLOR)
    return dict(
        type="scatter", name=RANKS, x=xs, y=ys, yaxis="y3", mode="lines", line=line, hovertext=hover,
        hoverinfo="text", showlegend=False,
    )  # fmt: skip


def _ranks(n) -> str:
    return f"{n} rank{'' if n == 1 else 's'}"


def traces(state, raw: bool = False, membership=None, max_points=None) -> list:
    """The scatter traces, in drawing order. With `raw`, the unsmoothed per-batch loss comes first, hidden
    (`visible: False`): the panel shows it on request; the cell leaves it out (half the data to send per redraw).
    With an elastic job's `membership`, its rank count comes last. `max_points` thins each series to about that
    many (the live cell: it redraws every second)."""
    colors = metric_colors(state.epoch_series)
    out = []
    if raw and len(state.batch_loss_raw):
        raw_loss = _trace(RAW_LOSS, state.batch_loss_raw, "y", "lines", 1, colors[RAW_LOSS], max_points=max_points)
        out.append({**raw_loss, "opacity": 0.35, "visible": False})
    out.append(_trace(BATCH_LOSS, state.batch_loss, "y", "lines", 1, colors[BATCH_LOSS], max_points=max_points))
    for key, series in state.epoch_series.items():
        axis = "y" if key.endswith("loss") else "y2"
        dash = "dot" if key.startswith("val_") else None
        out.append(_trace(key, series, axis, "lines+markers", 2, colors[key], dash, max_points))
    if is_elastic(membership):
        out.append(rank_count_trace(state, membership))
    return out


def has_data(state) -> bool:
    """Whether there is anything to draw: a training step or an epoch's logs."""
    return bool(state.global_step or state.epoch_logs)


def _vertical(x, dash, width, color) -> dict:
    return dict(type="line", x0=x, x1=x, yref="paper", y0=0, y1=1, line=dict(dash=dash, width=width, color=color))


def shapes(state) -> list:
    """Epoch boundaries (the last MAX_BOUNDARY_MARKS), then where each restarted run resumed."""
    boundaries = [_vertical(b, "dot", 1, "rgba(128,128,128,0.5)") for b in state.epoch_boundaries[-MAX_BOUNDARY_MARKS:]]
    return boundaries + [_vertical(r["step"], "dash", 2, RESTART_COLOR) for r in state.restarts]


def annotations(state) -> list:
    return [
        dict(
            x=r["step"],
            y=1,
            yref="paper",
            yanchor="bottom",
            showarrow=False,
            text=r.get("label") or f"restart {r['attempt']}",
            hovertext=r["reason"],
            font=dict(size=11, color=RESTART_COLOR),
        )
        for r in state.restarts
    ]


def figure(state, title: str, template: str, raw: bool = False, membership=None) -> dict:
    """The whole figure as a plain dict ({"data", "layout"}), ready for `plotly.graph_objects.Figure`;
    `membership`: an elastic job's, from its record."""
    return {
        "data": traces(state, raw, membership),
        "layout": {
            **layout(title, template, is_elastic(membership)),
            "shapes": shapes(state),
            "annotations": annotations(state),
        },
    }
