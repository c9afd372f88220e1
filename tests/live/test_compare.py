"""Comparing runs: `%dl_compare` of a real `-n 1` and `-n 2` run of one cell shows both runs' curves and the scaling
efficiency; the table logic from store records (what differs, final metrics, efficiency, restarts); bad input."""

import json

import pytest

from jupyter_dl.jobs.comparison import BATCH_LOSS, CompareSettings, RunData, compare_jobs
from jupyter_dl.jobs.model import Job
from jupyter_dl.jobs.store import JobStore

CELL = """
import keras
keras.utils.set_random_seed(5)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.Adam(0.003), "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=2, batch_size=32, verbose=0)
"""


def _row(data, name):
    return next(r for r in data["table"] if r["name"] == name)


def _names(data, section):
    return [r["name"] for r in data["table"] if r["section"] == section]


# ------------------------------------------------------------------------------------- real jobs, real engines
def test_dl_compare_of_a_one_and_a_two_rank_run_shows_both_curves_and_the_efficiency(shell, digits, capsys):
    from jupyter_dl.kernel import api

    shell.user_ns.update(digits)
    ids = []
    for n in (1, 2):
        result = shell.run_cell(f"%%distribute -n {n} --name cmp --no-plot\n" + CELL, store_history=False)
        assert result.success, result.error_in_exec
        ids.append(api.session().jobs.all()[-1].id)
    capsys.readouterr()

    result = shell.run_cell(f"%dl_compare {ids[0]} {ids[1][:6]}", store_history=False)  # a prefix works too
    assert result.success, result.error_in_exec
    shown = result.result
    data = shown.data
    assert [r["id"] for r in data["runs"]] == ids and [r["ranks"] for r in data["runs"]] == [1, 2]
    assert data["runs"][0]["cell"] == data["runs"][1]["cell"] is not None  # the same cell, recognised as such

    # Both runs' curves: the smoothed batch loss and every epoch metric, each with all three x axes.
    for job_id, steps_per_epoch in zip(ids, (44, 22)):  # 1400 samples in batches of 32, split over the ranks
        curves = {c["metric"]: c for c in data["curves"] if c["run"] == job_id}
        assert set(curves) == {BATCH_LOSS, "loss", "accuracy"}
        batch = curves[BATCH_LOSS]
        assert len(batch["y"]) == 2 * steps_per_epoch and batch["step"][-1] == 2 * steps_per_epoch
        assert batch["epoch"][-1] == pytest.approx(2.0) and batch["time"] == sorted(batch["time"])
        assert curves["loss"]["epoch"] == [1, 2] and curves["loss"]["y"][1] < curves["loss"]["y"][0]
    figure_traces = [t.name for t in shown.figure.data]
    assert len(figure_traces) == 6 and all(any(t.startswith(r["label"]) for r in data["runs"]) for t in figure_traces)

    # The table: what differs (ranks, global batch, the learning-rate factor), not what is equal.
    settings = _names(data, "settings")
    assert {"ranks", "global batch size", "learning-rate factor"} <= set(settings)
    assert "learning rate (cell)" not in settings and "epochs" not in settings and "cell" not in settings
    assert _row(data, "global batch size")["values"] == [32, 64]
    assert _row(data, "learning-rate factor")["text"] == ["x1 (linear)", "x2 (linear)"]
    assert _names(data, "final metrics") == ["loss", "accuracy"]
    assert _row(data, "loss")["values"] == [
        pytest.approx(v)
        for v in (
            json.load(open(api.session().store.job_dir(i) / "results" / "history" / "history.json"))["history"]["loss"][
                -1
            ]
            for i in ids
        )
    ]
    rates = _row(data, "samples/s")["values"]
    efficiency = _row(data, "scaling efficiency")
    assert efficiency["values"][0] == pytest.approx(1.0)
    assert efficiency["values"][1] == pytest.approx(rates[1] / (2 * rates[0]))
    assert efficiency["text"][0] == "baseline (1 rank)" and efficiency["text"][1].endswith("% vs 1 rank")
    assert all(w > 0 for w in _row(data, "wall time")["values"])

    # Shown as the figure (a plain plotly bundle) and then the table; the text table names the efficiency.
    shell.display_formatter.format(shown)  # drives _ipython_display_
    out = capsys.readouterr().out
    assert "<Figure:" in out and "scaling efficiency" in out and "vs 1 rank" in out

    by_time = shell.run_cell(f"%dl_compare {ids[0]} {ids[1]} --x time", store_history=False).result
    assert by_time.data["x"] == "time" and by_time.figure.layout.xaxis2.title.text == "seconds since training began"
    assert list(by_time.figure.data[0].x) == by_time.data["curves"][0]["time"]
    print(shown.table_text())


# --------------------------------------------------------------------------------- table logic, store records
def _job(
    store,
    n,
    cell="x = 1",
    sps_per_rank=100.0,
    epochs=2,
    steps=10,
    batch=32,
    losses=(1.0, 0.5),
    name="run",
    state="succeeded",
    options=None,
    lr_scale="linear",
    job_id=None,
):
    """A job in the store as the job runner leaves it: job.json, metrics.jsonl, and the kept cell source."""
    options = {"n": n, "lr_scale": lr_scale, "output": "rank0", "manual": False, "plot": True, **(options or {})}
    job = Job(name=name, n=n, options=options, **({"id": job_id} if job_id else {}))
    job.transition("starting")
    records = [
        {
            "kind": "begin",
            "rank": r,
            "t": 1000.0,
            "epochs": epochs,
            "steps": steps,
            "batch_size": batch,
            "samples_per_epoch": steps * batch,
            "initial_epoch": 0,
        }
        for r in range(n)
    ]
    t = 1000.0
    for epoch in range(epochs):
        for step in range(1, steps + 1):
            t += 0.1
            records.append(
                {"kind": "batch", "t": t, "epoch": epoch, "step": step, "steps": steps, "logs": {"loss": losses[epoch]}}
            )
        records.append({"kind": "epoch", "t": t, "epoch": epoch, "logs": {"loss": losses[epoch], "accuracy": 0.5}})
    records += [
        {"kind": "throughput", "rank": r, "t": t, "epoch": epochs - 1, "samples": 1000, "seconds": 1000 / sps_per_rank}
        for r in range(n)
    ]
    store.append_metrics(job.id, records)
    if cell is not None:
        (store.job_dir(job.id) / "results").mkdir(parents=True)
        (store.job_dir(job.id) / "results" / "cell.py").write_text(cell)
    job.transition(state)
    store.save(job)
    return job


@pytest.fixture
def store(tmp_path):
    return JobStore(root=str(tmp_path / "jobs"))


@pytest.mark.fast
def test_efficiency_is_against_the_fewest_ranks_of_the_same_cell(store):
    one, two, four = _job(store, 1), _job(store, 2, sps_per_rank=90.0), _job(store, 4, sps_per_rank=50.0)
    data = compare_jobs(store, [four.id, one.id, two.id])
    efficiency = _row(data, "scaling efficiency")
    assert efficiency["values"] == [pytest.approx(0.5), pytest.approx(1.0), pytest.approx(0.9)]
    assert efficiency["text"] == ["50% vs 1 rank", "baseline (1 rank)", "90% vs 1 rank"]
    assert _row(data, "samples/s")["values"] == [pytest.approx(200.0), pytest.approx(100.0), pytest.approx(180.0)]


@pytest.mark.fast
def test_a_single_rank_run_of_the_cell_in_the_store_is_the_baseline_when_none_is_compared(store):
    one = _job(store, 1, sps_per_rank=100.0)
    two, four = _job(store, 2, sps_per_rank=80.0), _job(store, 4, sps_per_rank=50.0)
    _job(store, 1, cell="another cell", sps_per_rank=1.0)  # newer, but not the same cell
    data = compare_jobs(store, [two.id, four.id])
    assert _row(data, "scaling efficiency")["text"] == ["80% vs 1 rank", "50% vs 1 rank"]
    assert one.id not in [r["id"] for r in data["runs"]]


@pytest.mark.fast
def test_no_efficiency_across_different_cells_or_failed_runs(store):
    a, b = _job(store, 1, cell="a = 1"), _job(store, 2, cell="b = 2")
    data = compare_jobs(store, [a.id, b.id])
    assert _row(data, "scaling efficiency")["values"] == [None, None]
    assert "cell" in _names(data, "settings")  # the runs' cells differ: said in the table
    ok, failed = _job(store, 1), _job(store, 2, state="failed")
    data = compare_jobs(store, [ok.id, failed.id])
    assert _row(data, "scaling efficiency")["text"] == ["-", "-"]
    assert _row(data, "state")["values"] == ["succeeded", "failed"]


@pytest.mark.fast
def test_only_settings_that_differ_are_listed(store):
    a = _job(store, 2, options={"timeout": 60.0, "balance": "auto"})
    b = _job(store, 2, batch=64, options={"timeout": 60.0, "balance": "on"}, lr_scale="sqrt")
    data = compare_jobs(store, [a.id, b.id])
    settings = {r["name"]: r["text"] for r in data["table"] if r["section"] == "settings"}
    assert settings == {
        "batch size per rank": ["32", "64"],
        "global batch size": ["64", "128"],
        "samples per epoch per rank": ["320", "640"],
        "learning-rate factor": ["x2 (linear)", "x1.41 (sqrt)"],
        "balance": ["auto", "on"],
    }
    same = compare_jobs(store, [a.id, _job(store, 2, options={"timeout": 60.0, "balance": "auto"}).id])
    assert _names(same, "settings") == []
    assert "settings: the same in every run" in __import__(
        "jupyter_dl.live.compare_figure", fromlist=["table_text"]
    ).table_text(same)


@pytest.mark.fast
def test_curves_carry_steps_epochs_and_time_and_recover_per_batch_losses(store):
    a, b = _job(store, 1, losses=(2.0, 1.0)), _job(store, 2)
    data = compare_jobs(store, [a.id, b.id], x="epoch", settings=CompareSettings(smoothing=0.0))
    batch = next(c for c in data["curves"] if c["run"] == a.id and c["metric"] == BATCH_LOSS)
    assert batch["step"] == list(range(1, 21))
    assert batch["epoch"][:2] == [pytest.approx(0.1), pytest.approx(0.2)] and batch["epoch"][-1] == pytest.approx(2.0)
    assert batch["time"][0] == pytest.approx(0.1)
    assert batch["y"] == [pytest.approx(2.0)] * 10 + [pytest.approx(1.0)] * 10  # running means of a constant loss
    epoch_loss = next(c for c in data["curves"] if c["run"] == a.id and c["metric"] == "loss")
    assert epoch_loss["step"] == [10, 20] and epoch_loss["epoch"] == [1, 2] and epoch_loss["y"] == [2.0, 1.0]
    json.dumps(data)  # the panel gets it as it is

    few = compare_jobs(store, [a.id, b.id], settings=CompareSettings(max_points=4))
    assert max(len(c["y"]) for c in few["curves"]) <= 4


@pytest.mark.fast
def test_a_restart_drops_what_its_checkpoint_did_not_keep():
    records = [{"kind": "begin", "rank": 0, "t": 0.0, "epochs": 3, "steps": 2, "batch_size": 8, "initial_epoch": 0}]
    for epoch in range(2):  # epochs 1 and 2 ran, then a failure: the checkpoint holds epoch 1 only
        records += [
            {"kind": "batch", "t": 1.0, "epoch": epoch, "step": s, "steps": 2, "logs": {"loss": 1.0}} for s in (1, 2)
        ]
        if epoch == 0:
            records.append({"kind": "epoch", "t": 1.0, "epoch": 0, "logs": {"loss": 1.0}})
    records += [
        {"kind": "restart", "attempt": 1, "reason": "rank 1 died", "t": 2.0},
        {"kind": "begin", "rank": 0, "t": 3.0, "epochs": 3, "steps": 2, "batch_size": 8, "initial_epoch": 1},
    ]
    for epoch in (1, 2):
        records += [
            {"kind": "batch", "t": 4.0, "epoch": epoch, "step": s, "steps": 2, "logs": {"loss": 0.5}} for s in (1, 2)
        ]
        records.append({"kind": "epoch", "t": 4.0, "epoch": epoch, "logs": {"loss": 0.5}})
    run = RunData(records)
    assert run.batch_curve()[0] == [1, 2, 3, 4, 5, 6]
    assert run.epoch_curves()["loss"][1] == [1, 2, 3]  # epoch numbers
    assert len(run.epoch_logs) == 3


# ------------------------------------------------------------------------------------------------- bad input
@pytest.mark.fast
@pytest.mark.parametrize(
    "ids, message",
    [
        (["only-one"], "give two or more job ids to compare (got 1: only-one)"),
        ([], "give two or more job ids to compare (got 0)"),
        (["nope", "nada"], "no job 'nope': see %dl_jobs"),
    ],
)
@pytest.mark.fast
def test_bad_ids_say_what_to_do(store, ids, message):
    from jupyter_dl.errors import UsageError

    _job(store, 1)
    with pytest.raises(UsageError) as info:
        compare_jobs(store, ids)
    assert str(info.value).startswith(message)


@pytest.mark.fast
def test_prefixes_and_names_resolve_when_they_name_one_job(store):
    from jupyter_dl.errors import UsageError
    from jupyter_dl.jobs.comparison import UnknownJob

    a, b = _job(store, 1, name="small"), _job(store, 2, name="big")
    assert [r["id"] for r in compare_jobs(store, [a.id[:5], "big"])["runs"]] == [a.id, b.id]
    _job(store, 1, name="twice"), (newest := _job(store, 1, name="twice"))
    assert compare_jobs(store, [a.id, "twice"])["runs"][1]["id"] == newest.id  # a name: its newest job
    _job(store, 1, job_id="feed00000001"), _job(store, 1, job_id="feed00000002")
    with pytest.raises(UnknownJob, match="'feed' starts 2 job ids: feed00000001 .*; give more of the id"):
        compare_jobs(store, [a.id, "feed"])
    with pytest.raises(UnknownJob, match="'fee' is too short"):  # shorter than jobs.lookup.MIN_PREFIX
        compare_jobs(store, [a.id, "fee"])
    with pytest.raises(UsageError, match=f"'small' names job {a.id} a second time"):
        compare_jobs(store, [a.id, "small"])


@pytest.mark.fast
def test_a_run_without_metrics_is_named(store):
    from jupyter_dl.errors import UsageError

    a = _job(store, 1)
    silent = Job(name="manual-cell", n=2)
    silent.transition("succeeded")
    store.save(silent)
    with pytest.raises(UsageError, match=f"job {silent.id} \\(manual-cell, succeeded\\) recorded no training metrics"):
        compare_jobs(store, [a.id, silent.id])


@pytest.fixture
def plain_shell():
    """An IPython shell with the extension loaded and no cluster: %dl_compare only reads the job store."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext jupyter_dl", store_history=False)
    return ip


@pytest.mark.fast
@pytest.mark.parametrize(
    "line, needle",
    [
        ("%dl_compare", "%dl_compare: give two or more job ids to compare (got 0)"),
        ("%dl_compare 0000000000ff", "%dl_compare: give two or more job ids to compare (got 1: 0000000000ff)"),
        (
            "%dl_compare 0000000000ff 0000000000fe",
            "%dl_compare: no job '0000000000ff': see %dl_jobs",
        ),
        ("%dl_compare a b --x wall", "%dl_compare: argument --x: invalid choice: 'wall'"),
    ],
)
@pytest.mark.fast
def test_dl_compare_bad_input_is_one_line(plain_shell, capsys, line, needle):
    result = plain_shell.run_cell(line, store_history=False)
    assert not result.success
    text = (lambda c: c.err + c.out)(capsys.readouterr())
    assert needle in text
    assert len([l for l in text.splitlines() if l.strip()]) == 1


@pytest.mark.fast
def test_jupyter_dl_compare_is_the_api_and_shows_the_table_as_text(plain_shell):
    import jupyter_dl
    import jupyter_dl.jobs.comparison  # noqa: F401  (the magic imports it; it must not shadow jupyter_dl.compare)
    from jupyter_dl.kernel import api

    store = api.session().store
    one, two = _job(store, 1, name="api"), _job(store, 2, name="api", sps_per_rank=75.0)
    shown = jupyter_dl.compare([one.id, two.id], x="epoch")
    assert shown.data["x"] == "epoch" and shown.figure.layout.xaxis2.title.text == "epoch"
    assert "scaling efficiency" in repr(shown) and "75% vs 1 rank" in repr(shown)
    assert "<table class='jp-dl-compare'>" in shown.table_html()
