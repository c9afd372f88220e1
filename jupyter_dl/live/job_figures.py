"""What the jobs panel's loss tab shows of one job: the loss and resources figures the cell shows (built by the same
code, loss_figure.py and resources_figure.py), the rows of the epoch table and the numbers of its status line.

Figures are plotly's own JSON-able dicts (`Figure.to_plotly_json`): the template named by the cell is expanded into
them, since plotly.js knows no templates by name. Serialise the result with plotly.utils.PlotlyJSONEncoder.
"""

from jupyter_dl.jobs.model import FINAL_STATES
from jupyter_dl.live import loss_figure, resources_figure

EPOCH_ROWS = 50  # the table shows the last 50 epochs


def _plotly(spec):
    import plotly.graph_objects as go

    return go.Figure(spec).to_plotly_json() if spec is not None else None


def job_figures(job, state, template) -> dict:
    """{"loss", "note", "resources" (None until a rank's samples draw a line), "epochs": [{"epoch", "logs"}] oldest
    first, "status"}. The loss figure carries the raw per-batch loss as a hidden trace, for the panel's "Raw steps"
    toggle; `note` says why there is nothing to draw yet (the panel shows it instead of empty axes), else None."""
    title = loss_figure.title_of(job.name, job.n)
    epochs = [{"epoch": i, "logs": logs} for i, logs in enumerate(state.epoch_logs)]
    note = no_data_note(job, state)
    ended_untrained = note is not None and job.state in FINAL_STATES  # a chart of its first second says nothing
    resources = (
        None if ended_untrained else resources_figure.figure(state.resources, template, loss_figure.FIGURE_WIDTH)
    )
    return {
        "loss": _plotly(loss_figure.figure(state, title, template, raw=True, membership=_membership(job))),
        "note": note,
        "resources": _plotly(resources),
        "epochs": epochs[-EPOCH_ROWS:],
        "status": {
            "state": job.state,
            "epochs_done": len(state.epoch_logs),
            "epochs": state.epochs,
            "steps": state.global_step,
            # Restarts after a failure only: an elastic job's changes of group are not restarts (`ranks` says them).
            "restarts": len(getattr(job, "restarts", None) or []),
            "ranks": [change["n"] for change in _membership(job)],
        },
    }


def _membership(job) -> list:
    """An elastic job's groups from its record ([] for a fixed-size job, and in records written before elastic jobs)."""
    return getattr(job, "membership", None) or []


def no_data_note(job, state):
    """Why the loss figure is empty, in a line, or None when it has data."""
    if loss_figure.has_data(state):
        return None
    if job.state in FINAL_STATES:
        return "no data: the job ended before its first step"
    return "no data yet: waiting for the first training step"


def warm_up():
    """Build the figures of a tiny run once, so that plotly's imports and validators (about half a second, cold) are
    loaded before the first tab asks, not while it waits."""
    from types import SimpleNamespace

    from jupyter_dl.live.state import TrainingState

    state = TrainingState(budget=2, latency_window=0)
    state.consume(
        [
            {"kind": "begin", "rank": 0, "t": 0.0, "epochs": 1, "steps": 1},
            {"kind": "batch", "t": 0.5, "epoch": 0, "step": 1, "logs": {"loss": 1.0}},
            {"kind": "epoch", "t": 1.0, "epoch": 0, "logs": {"loss": 1.0}},
            {"kind": "restart", "attempt": 1, "reason": "warm-up"},
            {"kind": "begin", "rank": 0, "t": 2.0, "epochs": 1, "steps": 1, "initial_epoch": 1},
            {"kind": "resources", "rank": 0, "t": 2.0, "cpu": 1.0},
        ]
    )
    for template in ("plotly_white", "plotly_dark"):
        job_figures(SimpleNamespace(name="warm-up", n=1, state="running"), state, template)
