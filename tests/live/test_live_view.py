"""The live training view on a real 2-rank job, and its bounds on a long synthetic one."""

import json

import pytest

import jupyter_dl
from jupyter_dl.live.series import DownsampledSeries
from jupyter_dl.live.state import TrainingState
from jupyter_dl.live.theme import template_for
from jupyter_dl.live.view import LiveView

CELL = """
import keras
keras.utils.set_random_seed(3)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=4, validation_data=(x_test, y_test), verbose=0)
"""


@pytest.fixture(scope="module")
def live_run(dl_session, digits):
    ns = dict(digits)
    result = jupyter_dl.distribute(CELL, n=2, namespace=ns, plot=True)
    return result, ns


def test_figure_epoch_loss_equals_returned_history(live_run):
    result, ns = live_run
    figure = result.view.figure
    traces = {t.name: t for t in figure.data}
    history = ns["history"].history
    assert list(traces["loss"].y) == history["loss"]
    assert list(traces["val_loss"].y) == history["val_loss"]
    assert list(traces["accuracy"].y) == history["accuracy"]
    assert len(traces["loss (batch, smoothed)"].y) == 4 * 22  # 1400 samples / 2 ranks / batch 32 = 22 steps
    assert [s["x0"] for s in figure.layout.shapes] == [22, 44, 66, 88]  # epoch boundaries marked


def test_progress_reaches_100_percent(live_run):
    result, _ = live_run
    assert result.job.progress["fraction"] == 1.0
    assert result.view.progress_bar.value == 1.0
    assert result.job.progress["epoch"] == 4 and result.job.progress["step"] == 22


def test_summary_reports_throughput_per_rank(live_run):
    result, _ = live_run
    summary = result.view.summary
    assert set(summary["samples_per_s_by_rank"]) == {0, 1}
    assert all(v > 0 for v in summary["samples_per_s_by_rank"].values())
    assert summary["samples_per_s"] == pytest.approx(sum(summary["samples_per_s_by_rank"].values()))
    assert set(summary["final_metrics"]) == {"loss", "accuracy", "val_loss", "val_accuracy"}


def test_job_store_holds_the_full_series(live_run, dl_session):
    result, _ = live_run
    store = dl_session.store
    job = store.load(result.job.id)
    assert job.state == "succeeded" and job.progress["fraction"] == 1.0
    records, _ = store.metrics(result.job.id)
    assert sum(1 for r in records if r["kind"] == "batch") == 4 * 22
    assert sum(1 for r in records if r["kind"] == "throughput") == 2 * 4
    logs = store.job_dir(result.job.id) / "logs"
    assert (logs / "rank0.stdout.log").exists() and (logs / "rank1.stderr.log").exists()


def test_scaling_efficiency_against_a_single_rank_run(dl_session, digits):
    ns = dict(digits)
    jupyter_dl.distribute(CELL, n=1, namespace=ns, plot=True)
    summary = jupyter_dl.distribute(CELL, n=2, namespace=ns, plot=True).view.summary
    assert summary["baseline_samples_per_s"] > 0
    assert 0 < summary["scaling_efficiency"] < 2


def test_no_plot_keeps_the_summary_but_no_figure(dl_session, digits):
    result = jupyter_dl.distribute(CELL, n=2, namespace=dict(digits), plot=False)
    assert result.view is None or result.view.figure is None
    assert result.state.epoch_logs and result.job.progress["fraction"] == 1.0


def test_manual_cells_stream_with_the_public_callback(dl_session, digits):
    code = (
        "import horovod.tensorflow as hvd, keras, jupyter_dl\n"
        "model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation='softmax')])\n"
        "model.compile('adam', 'sparse_categorical_crossentropy')\n"
        "model.fit(x_train[hvd.rank()::2], y_train[hvd.rank()::2], epochs=2, verbose=0,\n"
        "          callbacks=[jupyter_dl.LiveMetrics()])\n"
    )
    result = jupyter_dl.distribute(code, n=2, namespace=dict(digits), manual=True, plot=True)
    assert len(result.state.epoch_logs) == 2
    assert set(result.state.throughput) == {0, 1}
    assert len(result.view.figure.data) >= 2


def _synthetic(steps, steps_per_epoch=1000):
    records = [
        {
            "kind": "begin",
            "rank": 0,
            "t": 0.0,
            "epochs": steps // steps_per_epoch,
            "steps": steps_per_epoch,
            "batch_size": 32,
        }
    ]
    mean = 0.0
    for i in range(steps):
        epoch, k = divmod(i, steps_per_epoch)
        loss = 1.0 / (1 + i / 1000)
        mean = loss if k == 0 else mean + (loss - mean) / (k + 1)
        records.append(
            {
                "kind": "batch",
                "t": i * 0.01,
                "epoch": epoch,
                "step": k + 1,
                "steps": steps_per_epoch,
                "logs": {"loss": mean},
            }
        )
        if k == steps_per_epoch - 1:
            records.append({"kind": "epoch", "t": i * 0.01, "epoch": epoch, "logs": {"loss": mean}})
    return records


def test_100k_steps_stay_within_the_point_budget():
    state = TrainingState(budget=2000)
    view = LiveView(show_plot=True)
    view.started(type("J", (), {"name": "synthetic", "n": 2})())
    records = _synthetic(100_000)
    for start in range(0, len(records), 5000):  # arrives in chunks, as from a long run
        state.consume(records[start : start + 5000])
        view.update(state, force=True)
    assert state.global_step == 100_000
    for trace in view.figure.data:
        assert 0 < len(trace.x) <= 2000, (trace.name, len(trace.x))
    assert len(view.figure.layout.shapes) <= 200
    assert state.progress()["fraction"] == 1.0 or state.progress()["global_step"] == 100_000


def test_downsampling_preserves_the_mean_and_the_budget():
    series = DownsampledSeries(budget=100)
    for i in range(12_345):
        series.add(i, 2.0)
        assert len(series) <= 100
    xs, ys = series.points()
    assert all(y == 2.0 for y in ys)
    assert xs[0] < 100 and xs[-1] > 12_000
    with pytest.raises(ValueError):
        DownsampledSeries(budget=3)


def test_batch_loss_is_recovered_from_keras_running_means():
    state = TrainingState(smoothing=0.0)  # no smoothing: the recovered per-batch values themselves
    losses = [4.0, 2.0, 3.0]
    means = [4.0, 3.0, 3.0]
    state.consume(
        [
            {"kind": "batch", "t": i, "epoch": 0, "step": i + 1, "steps": 3, "logs": {"loss": m}}
            for i, m in enumerate(means)
        ]
    )
    assert state.batch_loss.points()[1] == pytest.approx(losses)


def test_theme_follows_jupyterlab_settings(tmp_path):
    settings = tmp_path / "themes.jupyterlab-settings"
    settings.write_text('{\n  // chosen in Settings > Theme\n  "theme": "JupyterLab Dark"\n}')
    assert template_for("auto", settings) == "plotly_dark"
    settings.write_text(json.dumps({"theme": "JupyterLab Light"}))
    assert template_for("auto", settings) == "plotly_white"
    assert template_for("auto", tmp_path / "missing") == "plotly_white"
    assert template_for("dark", settings) == "plotly_dark"


def _luminance(colour):
    """WCAG relative luminance of a CSS colour plotly writes ('white', '#2a3f5f', 'rgb(17,17,17)')."""
    import plotly.colors

    named = {"white": (255, 255, 255), "black": (0, 0, 0)}
    if colour in named:
        rgb = named[colour]
    elif colour.startswith("#"):
        rgb = plotly.colors.hex_to_rgb(colour)
    else:
        rgb = plotly.colors.unlabel_rgb(colour)
    channels = [c / 255 for c in rgb]
    channels = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]


def _contrast(a, b):
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("template", ["plotly_white", "plotly_dark"])
def test_static_figure_carries_its_own_readable_background(template):
    """The static copy left in the notebook outlives a theme switch: its background is its template's, opaque, and
    its text reads on it (a transparent one put plotly_white's dark text on JupyterLab Dark's near-black)."""
    import plotly.io as pio

    from jupyter_dl.live.view import static_figure_bundle

    view = LiveView(template=template, show_plot=True)
    view.started(type("J", (), {"name": "themed", "n": 2})())
    state = TrainingState()
    state.consume(_synthetic(50))
    view.update(state, force=True)
    layout = static_figure_bundle(view.figure)["application/vnd.plotly.v1+json"]["layout"]
    paper, plot = layout["paper_bgcolor"], layout["plot_bgcolor"]
    assert "rgba" not in paper and "rgba" not in plot  # opaque
    text = pio.templates[template].layout.font.color
    assert _contrast(text, paper) >= 4.5 and _contrast(text, plot) >= 4.5, (template, text, paper, plot)


def test_static_figure_names_its_plotly_figure_for_the_extension():
    """Issue 30: JupyterLab's plotly renderer draws a static figure three times over as it arrives (300-660 ms of
    blocked page at a job's end); the bundle names its plotly figure for jupyter-dl's own renderer, which draws it
    once when the page is idle, and keeps it where every other front end finds it."""
    from jupyter_dl.live.view import FIGURE_MIME, PLOTLY_MIME, static_figure_bundle

    view = LiveView(show_plot=True)
    view.started(type("J", (), {"name": "named", "n": 2})())
    state = TrainingState()
    state.consume(_synthetic(50))
    view.update(state, force=True)
    bundle = static_figure_bundle(view.figure)
    assert bundle[FIGURE_MIME] == {"figure": PLOTLY_MIME}  # a name, not a second copy of the figure's data
    assert bundle[PLOTLY_MIME]["data"] and bundle[PLOTLY_MIME]["layout"]["width"] == 760
    assert "text/html" in bundle and "text/plain" in bundle


def test_cold_start_steps_show_in_the_progress_area_before_the_figure():
    """Before the first step the progress area says what happens (the job runner calls status()), in the same widgets
    the progress then uses; the figure joins them when the job starts."""
    view = LiveView(show_plot=True)
    view.status("starting the cluster: 2 engines")
    assert view.figure is None and view.progress_bar.description == "starting"
    assert "starting the cluster: 2 engines" in view.label.value
    label, bar = view.label, view.progress_bar
    view.status("2 ranks: importing TensorFlow and Horovod, Horovod rendezvous")
    view.started(type("J", (), {"name": "cold", "n": 2})())
    assert view.label is label and view.progress_bar is bar  # one progress area, no second bar
    assert "Horovod rendezvous" in view.label.value
    state = TrainingState()
    records = _synthetic(3000)
    state.consume(records[:1])  # fit began on the ranks; no step yet
    view.update(state, force=True)
    assert "first step" in view.label.value
    assert view.widget is None and len(view._box.children) == 1  # no figure before the first step
    state.consume(records[1:400])
    view.update(state, force=True)
    assert view._box.children[-1] is view.widget  # the figure joins the progress area with the first step
    assert "samples/s (last 3 s)" in view.label.value and "ETA" in view.label.value
    assert "whole fit" in view.label.value  # the tooltip says what the figure is and where the average is


def test_the_job_runner_tells_the_view_each_phase(dl_session):
    from jupyter_dl.kernel.job.observer import QuietObserver
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.wire.options import RunOptions

    heard = []

    class Recorder(QuietObserver):  # updates are not recorded
        def status(self, text):
            heard.append(("status", text))

        def started(self, job):
            heard.append(("started", job.n))

        def finished(self, job, state):
            heard.append(("finished", job.state))

    dl_session.runner.run(CellWork("x = 1", {}), RunOptions(n=2, name="phases", plot=False), observers=[Recorder()])
    assert heard[0] == ("status", "2 ranks: Horovod rendezvous"), heard  # a warm cluster: no start, no imports
    assert heard[1:] == [("started", 2), ("finished", "succeeded")], heard


def test_live_and_static_figures_have_one_size_and_round_metric_ticks():
    """The static copy that replaces the widget has the widget's size (the output jumped from ~700 px to the cell's
    width), and the metrics axis picks its own round ticks (plotly.js syncs an overlaying axis to the loss axis'
    gridlines by default: 0.463, 0.581)."""
    from jupyter_dl.live.view import FIGURE_WIDTH, static_figure_bundle

    view = LiveView(show_plot=True)
    view.started(type("J", (), {"name": "sized", "n": 2})())
    state = TrainingState()
    state.consume(_synthetic(2000))
    view.update(state, force=True)
    live = view.figure.layout
    static = static_figure_bundle(view.figure)["application/vnd.plotly.v1+json"]["layout"]
    assert live.width == static["width"] == FIGURE_WIDTH and live.height == static["height"]
    assert static["autosize"] is False
    assert static["yaxis2"]["tickmode"] == "auto"


def test_percent_and_eta_read_steadily():
    from jupyter_dl.live.view import SmoothedEta, format_percent

    assert format_percent(0.057) == "5.7%" and format_percent(0.5) == "50%"
    assert format_percent(0.996) == "99%" and format_percent(1.0) == "100%"
    eta = SmoothedEta(10.0)
    assert eta.update(318, 0.0) == 318
    jumped = eta.update(449, 2.0)  # a raw estimate 2 m later 2 s on
    assert 316 < jumped < 345  # moves toward it, does not leap
    assert eta.update(None, 3.0) is None and eta.update(240, 4.0) == 240  # unknown resets


def test_summary_says_its_throughput_is_the_whole_fit_average():
    from jupyter_dl.live.summary import as_text

    text = as_text(
        {
            "job": "j",
            "state": "succeeded",
            "ranks": 2,
            "wall_s": 10.0,
            "samples_per_s": 1183.0,
            "samples_per_s_by_rank": {0: 600.0, 1: 583.0},
            "final_metrics": {},
            "scaling_efficiency": None,
            "baseline_samples_per_s": None,
        }
    )
    assert "1,183 samples/s averaged over the whole fit" in text and "last few seconds" in text


def test_rank_logs_reach_the_store_within_half_a_second(tmp_path):
    """The logs tab follows what the store holds: ranks' output is written at most LOG_INTERVAL after it arrives
    (the tab ran ~3 epochs behind the panel at 2 s), and a log that did not change is not rewritten."""
    import time

    from jupyter_dl.jobs import Job
    from jupyter_dl.jobs.store import JobStore
    from jupyter_dl.kernel.job.feed import MetricsFeed as _MetricsFeed
    from jupyter_dl.kernel.secrets import Redactor

    assert _MetricsFeed.LOG_INTERVAL <= 0.5
    store = JobStore(root=str(tmp_path / "jobs"))
    job = Job(name="logs", n=2)
    store.save(job)
    ranks = [type("AR", (), {"stdout": "epoch 1\n", "stderr": ""})() for _ in range(2)]
    feed = _MetricsFeed(
        job, type("C", (), {"poll": lambda self: []})(), TrainingState(), [], store, ranks, Redactor({})
    )
    feed.pump()
    logs = store.job_dir(job.id) / "logs"
    first = (logs / "rank1.stdout.log").stat().st_mtime_ns
    ranks[0].stdout += "epoch 2\n"
    time.sleep(_MetricsFeed.LOG_INTERVAL + 0.05)
    feed.pump()
    assert store.logs(job.id, 0, "stdout").endswith("epoch 2\n")
    assert (logs / "rank1.stdout.log").stat().st_mtime_ns == first  # unchanged: not rewritten


def test_a_job_that_fails_before_its_first_step_leaves_no_figure_and_adds_no_widget_at_the_end():
    """A cell that fails at once (a NameError) ends with its output replaced; a widget added to the progress area
    just before was still being built in the browser ('Could not add child view to box', then "Cannot read
    properties of null (reading 'widgets')"). No figure before the first step, and none added by the end."""
    from jupyter_dl.jobs import Job

    view = LiveView(show_plot=True)
    job = Job(name="fails", n=2)
    job.transition("running")
    view.started(job)
    state = TrainingState()
    state.consume([{"kind": "begin", "rank": r, "t": 0.0, "epochs": 5, "steps": 10} for r in range(2)])
    state.consume([{"kind": "resources", "rank": r, "t": 0.1 * i, "cpu": 155.0} for i in range(3) for r in range(2)])
    view.update(state, force=True)
    children = list(view._box.children)
    job.transition("failed", error="NameError: name 'x' is not defined")
    view.finished(job, state)
    assert list(view._box.children) == children and view.widget is None and view.resources.widget is None
    assert view.figure is None


def test_the_live_figure_sends_only_json_and_epoch_marks_only_when_they_change():
    """The live figure's data reaches the browser as JSON (a diverging loss is NaN, which JSON has not: it goes as
    null), and the layout (epoch marks) is sent again only when an epoch ended."""
    view = LiveView(show_plot=True)
    view.started(type("J", (), {"name": "nan", "n": 1})())
    state = TrainingState()
    records = _synthetic(3000)
    state.consume(records[:500])
    view.update(state, force=True)
    sent = []
    view.widget.observe(lambda change: sent.append(change["name"]), names=["figure_data", "figure_layout"])
    state.consume(records[500:600])  # no epoch ends here
    view.update(state, force=True)
    assert sent == ["figure_data"]
    state.consume(
        records[600:1200] + [{"kind": "batch", "t": 99.0, "epoch": 1, "step": 202, "logs": {"loss": float("nan")}}]
    )
    view.update(state, force=True)
    assert sent[1:] == ["figure_layout", "figure_data"]
    json.dumps(view.widget.figure_data, allow_nan=False)
