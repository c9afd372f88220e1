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
    code = ("import horovod.tensorflow as hvd, keras, jupyter_dl\n"
            "model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation='softmax')])\n"
            "model.compile('adam', 'sparse_categorical_crossentropy')\n"
            "model.fit(x_train[hvd.rank()::2], y_train[hvd.rank()::2], epochs=2, verbose=0,\n"
            "          callbacks=[jupyter_dl.LiveMetrics()])\n")
    result = jupyter_dl.distribute(code, n=2, namespace=dict(digits), manual=True, plot=True)
    assert len(result.state.epoch_logs) == 2
    assert set(result.state.throughput) == {0, 1}
    assert len(result.view.figure.data) >= 2


def _synthetic(steps, steps_per_epoch=1000):
    records = [{"kind": "begin", "rank": 0, "t": 0.0, "epochs": steps // steps_per_epoch,
                "steps": steps_per_epoch, "batch_size": 32}]
    mean = 0.0
    for i in range(steps):
        epoch, k = divmod(i, steps_per_epoch)
        loss = 1.0 / (1 + i / 1000)
        mean = loss if k == 0 else mean + (loss - mean) / (k + 1)
        records.append({"kind": "batch", "t": i * 0.01, "epoch": epoch, "step": k + 1, "steps": steps_per_epoch,
                        "logs": {"loss": mean}})
        if k == steps_per_epoch - 1:
            records.append({"kind": "epoch", "t": i * 0.01, "epoch": epoch, "logs": {"loss": mean}})
    return records


def test_100k_steps_stay_within_the_point_budget():
    state = TrainingState(budget=2000)
    view = LiveView(show_plot=True)
    view.started(type("J", (), {"name": "synthetic", "n": 2})())
    records = _synthetic(100_000)
    for start in range(0, len(records), 5000):  # arrives in chunks, as from a long run
        state.consume(records[start:start + 5000])
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
    state.consume([{"kind": "batch", "t": i, "epoch": 0, "step": i + 1, "steps": 3, "logs": {"loss": m}}
                   for i, m in enumerate(means)])
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
