"""The loss figure of one job, from its TrainingState: smoothed per-batch loss, each epoch metric (losses on the left
axis, other metrics on the right), dotted epoch boundaries and dashed restart marks.

Pure data (plotly figure dicts), built in one place: the cell's live widget (view.py) updates its traces from
these, and the jobs panel's loss tab gets the same figure over REST (live/job_figures.py), so both look alike.
"""

from jupyter_dl.live.theme import frame

BATCH_LOSS = "loss (batch, smoothed)"
RAW_LOSS = "loss (batch)"  # the recovered per-batch values, unsmoothed: hidden until the panel's "Raw steps" shows it
MAX_BOUNDARY_MARKS = 200  # beyond this, per-epoch markers on the epoch traces show the boundaries
RESTART_COLOR = "#d62728"
# One fixed size for the live widget and the static copy that replaces it: plotly.js gives an unsized widget its
# 700 px default while the static renderer fills the cell, and the output jumped when the job ended.
FIGURE_WIDTH, FIGURE_HEIGHT = 760, 360


def layout(title: str, template: str) -> dict:
    """Everything but the data: size, axes, legend and the template's own background."""
    return dict(
        **frame(template, title, 13, dict(l=50, r=50, t=40, b=40), width=FIGURE_WIDTH, height=FIGURE_HEIGHT),
        xaxis=dict(title="step"),
        yaxis=dict(title="loss"),
        # plotly.js gives an overlaying axis tickmode "sync": ticks at the loss axis' gridlines, which read as
        # 0.463, 0.581 on the metrics scale. Its own round ticks instead.
        yaxis2=dict(title="metrics", overlaying="y", side="right", showgrid=False, tickmode="auto"),
        legend=dict(orientation="h", y=-0.2),
    )


def title_of(name: str, ranks: int) -> str:
    return f"{name} · {ranks} rank{'' if ranks == 1 else 's'}"


def _trace(name, series, axis, mode, width, color, dash=None, **extra) -> dict:
    xs, ys = series.points()
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


def traces(state, raw: bool = False) -> list:
    """The scatter traces, in drawing order. With `raw`, the unsmoothed per-batch loss comes first, hidden
    (`visible: False`): the panel shows it on request; the cell leaves it out (half the data to send per redraw)."""
    colors = metric_colors(state.epoch_series)
    out = []
    if raw and len(state.batch_loss_raw):
        out.append(
            _trace(RAW_LOSS, state.batch_loss_raw, "y", "lines", 1, colors[RAW_LOSS], opacity=0.35, visible=False)
        )
    out.append(_trace(BATCH_LOSS, state.batch_loss, "y", "lines", 1, colors[BATCH_LOSS]))
    for key, series in state.epoch_series.items():
        axis = "y" if key.endswith("loss") else "y2"
        dash = "dot" if key.startswith("val_") else None
        out.append(_trace(key, series, axis, "lines+markers", 2, colors[key], dash))
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


def figure(state, title: str, template: str, raw: bool = False) -> dict:
    """The whole figure as a plain dict ({"data", "layout"}), ready for `plotly.graph_objects.Figure`."""
    return {
        "data": traces(state, raw),
        "layout": {**layout(title, template), "shapes": shapes(state), "annotations": annotations(state)},
    }
