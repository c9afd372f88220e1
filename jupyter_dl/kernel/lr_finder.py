"""Kernel side of the learning-rate range test: `jupyter_dl.lr_find` and `%lr_find`.

Runs the test in the kernel, or, when a cluster is in use, as a distributed job on its engines (the same sweep with
gradients averaged across ranks). Shows loss against learning rate with the suggestion marked, and returns the
suggestion as the learning rate to write in the (single-GPU) cell: for a distributed test it is divided by the
factor `%%distribute --lr-scale` will multiply it by again.
"""

import sys
from dataclasses import dataclass, field

from jupyter_dl.errors import UsageError
from jupyter_dl.wire import remote

CELL = """
from jupyter_dl.runtime.lr_range import range_test
jdl_lr_result = range_test(jdl_lr_model, jdl_lr_x, jdl_lr_y, **jdl_lr_options)
"""


@dataclass
class LRFinderResult:
    suggestion: float | None  # the learning rate for the cell (per-rank batch, before --lr-scale)
    lrs: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    smoothed: list = field(default_factory=list)
    ranks: int = 1
    batch_size: int = 32
    figure: object = None

    def __float__(self):
        if self.suggestion is None:
            raise ValueError("the sweep was too short to suggest a learning rate; raise steps or end_lr")
        return float(self.suggestion)


def lr_find(model, x, y, *, start_lr=1e-7, end_lr=10.0, steps=100, batch_size=32, n=None, lr_scale="linear", show=None):
    """LR range test on `model` (compiled, with a constant learning rate) with data (x, y). Distributed over the
    cluster's engines when one is in use (or n ranks); in the kernel otherwise. The model's weights, optimizer
    state and learning rate are unchanged afterwards. Returns an LRFinderResult; float(result) is the suggestion."""
    from jupyter_dl.kernel import api
    from jupyter_dl.wire.lr_scale import lr_scale_factor

    _check(model, x, y, start_lr, end_lr, steps, batch_size)
    options = {"start_lr": start_lr, "end_lr": end_lr, "steps": steps, "batch_size": batch_size}
    session = api.session()
    ranks = n if n is not None else (len(session.cluster.engine_ids()) if session.cluster.client else 1)
    if ranks > 1:
        namespace = {"jdl_lr_model": model, "jdl_lr_x": x, "jdl_lr_y": y, "jdl_lr_options": options}
        api.distribute(CELL, n=ranks, namespace=namespace, name="lr_find", lr_scale=lr_scale, plot=False)
        raw = namespace["jdl_lr_result"]
    else:
        raw = remote.RANGE_TEST(model, x, y, **options)
    factor = lr_scale_factor(lr_scale, raw["ranks"])
    suggestion = raw["suggestion"] / factor if raw["suggestion"] is not None else None
    result = LRFinderResult(suggestion, raw["lrs"], raw["losses"], raw["smoothed"], raw["ranks"], batch_size)
    result.figure = figure(result, factor)
    if show if show is not None else api._in_kernel():
        from IPython.display import display

        display(result.figure)
    print(summary(result, factor, lr_scale), file=sys.stdout)
    return result


def summary(result, factor, lr_scale) -> str:
    if result.suggestion is None:
        return (
            f"[jupyter-dl] lr_find: the loss diverged after {len(result.lrs)} steps, too early to suggest a "
            f"learning rate; lower start_lr or raise steps"
        )
    text = f"[jupyter-dl] lr_find: suggested learning rate {result.suggestion:.3g}"
    if result.ranks > 1 and factor != 1.0:
        text += (
            f" for the cell (the sweep ran on {result.ranks} ranks at {result.suggestion * factor:.3g}; "
            f"%%distribute --lr-scale {lr_scale} scales it back up)"
        )
    return text


def figure(result, factor=1.0):
    """Loss against learning rate (log scale), raw and smoothed, the suggestion marked."""
    import plotly.graph_objects as go

    xs = [lr / factor for lr in result.lrs]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=result.losses, name="loss", mode="lines", line={"width": 1}, opacity=0.35)
    fig.add_scatter(x=xs, y=result.smoothed, name="smoothed", mode="lines", line={"width": 2})
    if result.suggestion is not None:
        fig.add_vline(
            x=result.suggestion,
            line={"dash": "dash", "color": "#d62728"},
            annotation_text=f"suggested {result.suggestion:.3g}",
        )
    upper = min(result.smoothed) * 4 if result.smoothed else None
    fig.update_layout(
        height=320,
        margin={"l": 50, "r": 20, "t": 40, "b": 40},
        title="learning-rate range test",
        xaxis={"type": "log", "title": "learning rate (as written in the cell)"},
        yaxis={"title": "loss", "range": [min(result.smoothed) * 0.9, upper] if upper else None},
    )
    return fig


def _check(model, x, y, start_lr, end_lr, steps, batch_size):
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        raise UsageError("lr_find needs a compiled model: call model.compile(optimizer, loss) first")
    if not 0 < start_lr < end_lr:
        raise UsageError(f"lr_find: start_lr must be positive and below end_lr (got {start_lr:g} and {end_lr:g})")
    if steps < 8:
        raise UsageError(f"lr_find: steps must be at least 8 (got {steps})")
    if batch_size < 1:
        raise UsageError(f"lr_find: batch_size must be positive (got {batch_size})")
    if len(x) != len(y):
        raise UsageError(f"lr_find: x and y differ in length ({len(x)} and {len(y)})")
