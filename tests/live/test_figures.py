"""One chart path: the loss figure the cell's live view draws and the one the jobs panel gets over REST are built by
the same code from the same TrainingState; the server's replay of metrics.jsonl reads only what was appended."""

import json
from types import SimpleNamespace

import pytest

from jupyter_dl.live.job_figures import job_figures
from jupyter_dl.live.loss_figure import BATCH_LOSS, RAW_LOSS
from jupyter_dl.live.replay import MetricsReplay, ReplayCache
from jupyter_dl.live.state import TrainingState
from jupyter_dl.live.view import LiveView

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


def _run(epochs=3, steps=4, restart_at=None):
    """Records as a 1-rank job writes them; with `restart_at`, a failure there and a resume from its epoch."""
    records = [{"kind": "begin", "rank": 0, "t": 0.0, "epochs": epochs, "steps": steps, "batch_size": 8}]
    t = 0.0
    for epoch in range(epochs):
        if epoch == restart_at:
            records += [
                {"kind": "batch", "t": t, "epoch": epoch, "step": 1, "steps": steps, "logs": {"loss": 9.0}},
                {"kind": "restart", "attempt": 1, "reason": "rank 0 died", "t": t},
                {"kind": "begin", "rank": 0, "t": t, "epochs": epochs, "steps": steps, "initial_epoch": epoch},
            ]
        mean = 0.0
        for k in range(1, steps + 1):
            t += 0.1
            loss = 2.0 / (1 + epoch * steps + k)
            mean += (loss - mean) / k
            records.append({"kind": "batch", "t": t, "epoch": epoch, "step": k, "steps": steps, "logs": {"loss": mean}})
        records.append({"kind": "epoch", "rank": 0, "t": t, "epoch": epoch, "logs": {"loss": mean, "accuracy": 0.5}})
    return records


def test_the_cell_and_the_panel_draw_the_same_loss_figure():
    state = TrainingState()
    state.consume(_run(restart_at=2))
    view = LiveView(show_plot=True)
    job = SimpleNamespace(name="same", n=1, state="succeeded")
    view.started(job)
    view.update(state, force=True)
    cell = json.loads(view.figure.to_json())
    panel = job_figures(job, state, "plotly_white")["loss"]
    shown = [t for t in panel["data"] if t["name"] != RAW_LOSS]
    assert [(t["name"], list(t["x"]), list(t["y"])) for t in shown] == [
        (t["name"], t["x"], t["y"]) for t in cell["data"]
    ]
    assert [s["x0"] for s in panel["layout"]["shapes"]] == [s["x0"] for s in cell["layout"]["shapes"]]
    assert panel["layout"]["annotations"][0]["text"] == cell["layout"]["annotations"][0]["text"] == "restart 1"
    assert panel["layout"]["title"] == cell["layout"]["title"] and panel["layout"]["width"] == cell["layout"]["width"]
    raw = next(t for t in panel["data"] if t["name"] == RAW_LOSS)
    assert raw["visible"] is False and len(raw["y"]) == len(next(t for t in shown if t["name"] == BATCH_LOSS)["y"])


def test_a_restart_record_rewinds_like_the_kernel_s_restarted_call():
    by_record = TrainingState()
    by_record.consume(_run(restart_at=1))
    by_call = TrainingState()
    for record in _run(restart_at=1):
        if record["kind"] == "restart":
            by_call.restarted(record["attempt"], record["reason"])
        else:
            by_call.consume([record])
    assert (
        by_record.restarts
        == by_call.restarts
        == [{"attempt": 1, "reason": "rank 0 died", "label": "restart 1", "step": 4, "epoch": 1}]
    )
    assert by_record.batch_loss.points() == by_call.batch_loss.points()
    assert by_record.global_step == 12


def _append(path, records, partial=""):
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records) + partial)


def test_the_replay_reads_only_what_was_appended_and_waits_for_whole_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = _run(epochs=4, steps=5)
    replay = MetricsReplay(path)
    assert replay.refresh() is False  # no file yet: nothing
    half = len(records) // 2
    line = json.dumps(records[half])
    _append(path, records[:half], partial=line[:10])  # a line still being written
    assert replay.refresh() and replay.state.global_step == sum(r["kind"] == "batch" for r in records[:half])
    offset = replay.offset
    assert replay.refresh() is False and replay.offset == offset  # nothing new: nothing read
    with open(path, "a") as f:
        f.write(line[10:] + "\n")
    _append(path, records[half + 1 :])
    assert replay.refresh()
    whole = TrainingState()
    whole.consume(records)
    assert replay.state.batch_loss.points() == whole.batch_loss.points()
    assert replay.state.epoch_logs == whole.epoch_logs and replay.state.global_step == 20


def test_the_replay_starts_over_when_the_file_shrinks_or_is_replaced(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _append(path, _run(epochs=2))
    replay = MetricsReplay(path)
    replay.refresh()
    generation = replay.generation
    path.write_text(json.dumps(_run(epochs=1)[0]) + "\n")  # shorter: rewritten in place
    assert replay.refresh() and replay.state.global_step == 0 and replay.generation > generation
    other = tmp_path / "other.jsonl"
    _append(other, _run(epochs=1))
    other.replace(path)  # another file under the same name
    assert replay.refresh() and replay.state.global_step == 4


def test_the_server_keeps_replays_of_the_most_recent_jobs_only(tmp_path):
    cache = ReplayCache(max_jobs=2)
    first = cache.get("a", tmp_path / "a")
    second = cache.get("b", tmp_path / "b")
    assert cache.get("a", tmp_path / "a") is first  # used again: now the most recent
    cache.get("c", tmp_path / "c")  # one too many: the least recently used (b) goes
    assert cache.get("a", tmp_path / "a") is first
    assert cache.get("b", tmp_path / "b") is not second


@pytest.mark.parametrize("template", ["plotly_white", "plotly_dark"])
def test_panel_figures_carry_their_template_and_the_epoch_rows(template):
    state = TrainingState()
    state.consume(_run(epochs=3))
    figures = job_figures(SimpleNamespace(name="t", n=2, state="running"), state, template)
    assert figures["loss"]["layout"]["template"]["layout"]["colorway"]  # expanded: plotly.js knows no names
    assert [r["epoch"] for r in figures["epochs"]] == [0, 1, 2]
    assert figures["status"] == {
        "state": "running",
        "epochs_done": 3,
        "epochs": 3,
        "steps": 12,
        "restarts": 0,
        "ranks": [],
    }


def test_each_metric_keeps_its_colour_when_the_raw_loss_shows():
    """plotly colours traces by their place: showing the hidden raw-loss trace turned the loss green to purple and
    the accuracy red to green. Every trace names its colour; a metric and its validation share one."""
    state = TrainingState()
    records = _run(epochs=2)
    for record in records:
        if record["kind"] == "epoch":
            record["logs"] = {**record["logs"], "val_loss": 1.0, "val_accuracy": 0.4}
    state.consume(records)
    figure = job_figures(SimpleNamespace(name="c", n=1, state="succeeded"), state, "plotly_white")["loss"]
    colours = {t["name"]: t["line"]["color"] for t in figure["data"]}
    assert all(colours.values()), colours
    assert colours[RAW_LOSS] == colours[BATCH_LOSS]
    assert colours["val_loss"] == colours["loss"] != colours[BATCH_LOSS]
    assert colours["val_accuracy"] == colours["accuracy"] != colours["loss"]
    from jupyter_dl.live.loss_figure import traces

    assert {t["name"]: t["line"]["color"] for t in traces(state)} == {
        name: colour for name, colour in colours.items() if name != RAW_LOSS
    }


def test_a_job_that_ended_before_its_first_step_says_so_instead_of_empty_axes():
    """A failed job (a NameError after 0.4 s) showed empty loss axes and a CPU chart of one sample per rank (no line,
    axes from -1 to 1). Now: no resources figure, and a note the panel shows in place of the loss figure."""
    state = TrainingState()
    state.consume([{"kind": "begin", "rank": r, "t": 0.0, "epochs": 3, "steps": 4} for r in range(2)])
    state.consume([{"kind": "resources", "rank": r, "t": 0.3, "cpu": 155.0, "rss_mb": 400.0} for r in range(2)])
    failed = job_figures(SimpleNamespace(name="f", n=2, state="failed"), state, "plotly_white")
    assert failed["note"] == "no data: the job ended before its first step"
    assert failed["resources"] is None
    waiting = job_figures(SimpleNamespace(name="f", n=2, state="running"), state, "plotly_white")
    assert waiting["note"].startswith("no data yet")
    state.consume(_run(epochs=1)[1:])
    state.consume([{"kind": "resources", "rank": r, "t": 0.6, "cpu": 90.0, "rss_mb": 410.0} for r in range(2)])
    drawn = job_figures(SimpleNamespace(name="f", n=2, state="failed"), state, "plotly_white")
    assert drawn["note"] is None and drawn["resources"] is not None


def _elastic_run():
    """An elastic job's records (-n 2:4): 2 ranks, grown to 4 after epoch 1, shrunk to 2 after epoch 2 (the kernel
    writes a restart record per change and the next group begins at its commit's epoch), and its job record's
    membership."""
    records, t = [], 0.0
    groups = [(2, "started"), (4, "grew: 2 engines free"), (2, "shrank: job 'big' of user bob waited")]
    for epoch, (n, reason) in enumerate(groups):
        if epoch:
            label = f"{n} ranks"
            records.append({"kind": "restart", "attempt": epoch, "reason": reason, "label": label, "t": t})
        records += [
            {"kind": "begin", "rank": r, "t": t, "epochs": 3, "steps": 4, "batch_size": 8, "initial_epoch": epoch}
            for r in range(n)
        ]
        for k in range(1, 5):
            t += 0.1
            records.append({"kind": "batch", "t": t, "epoch": epoch, "step": k, "steps": 4, "logs": {"loss": 1.0 / k}})
        records.append({"kind": "epoch", "rank": 0, "t": t, "epoch": epoch, "logs": {"loss": 0.5}})
    membership = [{"t": 100.0 + i, "n": n, "reason": reason} for i, (n, reason) in enumerate(groups)]
    return records, membership


def _ranks_trace(figure):
    return [t for t in figure["data"] if t["name"] == "ranks"]


def test_an_elastic_job_draws_its_rank_count_as_a_step_line_under_the_loss():
    """Issue 27: the rank count over the loss' own steps, in a strip under it, in the cell's live figure (and the
    static copy made from it) and the panel's; each change's reason in the hover. A fixed-size job has none."""
    records, membership = _elastic_run()
    state = TrainingState()
    state.consume(records)
    job = SimpleNamespace(name="elastic", n=2, state="succeeded", membership=membership)
    view = LiveView(show_plot=True)
    view.started(job)
    view.update(state, force=True)
    cell = json.loads(view.figure.to_json())
    panel = job_figures(job, state, "plotly_white")["loss"]
    for figure in (cell, panel):
        (ranks,) = _ranks_trace(figure)
        assert ranks["yaxis"] == "y3" and ranks["line"]["shape"] == "hv"
        assert (list(ranks["x"]), list(ranks["y"])) == ([0, 4, 8, 12], [2, 4, 2, 2])
        hover = list(ranks["hovertext"])
        assert "grew: 2 engines free" in hover[1] and "job 'big' of user bob waited" in hover[2], hover
        strip, loss = figure["layout"]["yaxis3"]["domain"], figure["layout"]["yaxis"]["domain"]
        assert strip[1] < loss[0], (strip, loss)  # under the loss, not over it
        assert figure["layout"]["xaxis"]["anchor"] == "y3"  # one step axis for both, at the bottom
        assert figure["layout"]["height"] > 360  # the strip adds height: the loss keeps its own
    assert cell["layout"]["height"] == panel["layout"]["height"]
    # The loss tab's status line: two changes of group, no restart (the state marks them as restarts to draw them).
    status = job_figures(job, state, "plotly_white")["status"]
    assert (status["restarts"], status["ranks"]) == (0, [2, 4, 2])

    fixed = TrainingState()
    fixed.consume(_run())
    fixed_job = SimpleNamespace(name="fixed", n=2, state="succeeded", membership=[])
    view = LiveView(show_plot=True)
    view.started(fixed_job)
    view.update(fixed, force=True)
    for figure in (json.loads(view.figure.to_json()), job_figures(fixed_job, fixed, "plotly_white")["loss"]):
        assert not _ranks_trace(figure) and "yaxis3" not in figure["layout"]
        assert figure["layout"]["height"] == 360


def test_live_redraws_send_a_few_hundred_points_and_measure_no_tick_labels():
    """Issue 30: each live redraw blocks the page for as long as plotly.js takes. The cell's widget gets each series
    thinned to LIVE_POINTS (the static copy at the end keeps the state's full budget), and no axis asks plotly.js to
    measure its tick labels on every redraw (its default for a linear axis, "hide past div")."""
    from jupyter_dl.jobs import Job
    from jupyter_dl.live.view import LIVE_POINTS

    state = TrainingState()
    records = _run(epochs=4, steps=600)
    state.consume(records[:-1])
    view = LiveView(show_plot=True)
    job = Job(name="long", n=2)
    job.transition("running")
    view.started(job)
    view.update(state, force=True)
    sent = {t["name"]: t for t in view.widget.figure_data}
    assert 0 < len(sent[BATCH_LOSS]["y"]) <= LIVE_POINTS < len(state.batch_loss)
    state.consume(records[-1:])
    job.transition("succeeded")
    view.finished(job, state)
    final = {t.name: t for t in view.figure.data}
    assert len(final[BATCH_LOSS].y) == len(state.batch_loss)  # the static copy: every point the state keeps

    figures = job_figures(job, state, "plotly_white")
    for figure in (figures["loss"], figures["resources"] or {"layout": {}}, {"layout": view.widget.figure_layout}):
        axes = {k: v for k, v in figure["layout"].items() if k.startswith(("xaxis", "yaxis"))}
        assert all(axis.get("ticklabeloverflow") == "allow" for axis in axes.values()), axes
        # Nor grow the margins to their labels (the templates' automargin): measured, then the figure drawn twice.
        assert all(axis.get("automargin") is False for axis in axes.values()), axes
    assert view.widget.figure_layout["xaxis"]["tickangle"] == 0


def test_the_resources_figure_is_redrawn_less_often_than_the_loss():
    """Issue 30: each live figure's redraw blocks the page; the resources figure (lines that move little in a
    second) is sent again every `resources_interval`, the loss every `figure_interval`."""
    view = LiveView(show_plot=True, refresh_interval=0, figure_interval=0, resources_interval=3600)
    view.started(SimpleNamespace(name="res", n=2, state="running"))
    state = TrainingState()
    records = _run(epochs=2, steps=4)
    state.consume(records[:3])
    state.consume([{"kind": "resources", "rank": r, "t": 0.1 * i, "cpu": 90.0} for i in range(2) for r in range(2)])
    view.update(state)
    sent = []
    for widget in (view.widget, view.resources.widget):
        widget.observe(lambda change, w=widget: sent.append(w), names=["figure_data"])
    state.consume(records[3:])
    state.consume([{"kind": "resources", "rank": r, "t": 1.0, "cpu": 95.0} for r in range(2)])
    view.update(state)
    assert sent == [view.widget]  # the loss only: the resources wait for their interval
    view.update(state, force=True)  # the job ended: every figure follows
    assert sent[-1] is view.resources.widget
