"""The notebook surface, through a real IPython shell: namespace round trip, re-runs, output, errors, bad input."""

import threading
import time

import numpy as np
import pytest
from digits_cells import DIGITS_MODEL

CELL = (
    DIGITS_MODEL
    + """history = model.fit(x_train, y_train, batch_size=32, epochs=3, validation_split=0.1)
print("trained on", len(x_train), "samples")
"""
)


def run(shell, code):
    result = shell.run_cell(code, store_history=False)
    return result


def jobs(shell):
    from jupyter_dl.kernel import api

    return api.session().jobs.all()


def test_namespace_round_trip_arrays_in_model_and_history_out(shell, digits, capsys):
    import keras

    shell.user_ns.update(digits)
    result = run(shell, "%%distribute -n 2\n" + CELL)
    assert result.success, result.error_in_exec
    out = capsys.readouterr().out
    assert "trained on 1400 samples" in out  # rank 0's stdout streamed into the cell (full array, pre-shard)
    assert "Epoch 3/3" in out
    assert "20/20" in out  # Keras' live progress bar (rewritten with \r) arrives with its final step count
    model, history = shell.user_ns["model"], shell.user_ns["history"]
    assert isinstance(model, keras.Model)
    assert history.model is model
    assert sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert len(history.history["loss"]) == 3
    # The model is usable in the notebook with its trained weights, and its optimizer is the user's again.
    loss, accuracy = model.evaluate(digits["x_test"], digits["y_test"], verbose=0)
    assert accuracy > 0.7
    assert type(model.optimizer) is keras.optimizers.Adam
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.001)


def test_three_reruns_and_arrays_travel_once(shell, digits, capsys):
    shell.user_ns.update(digits)
    losses = []
    for _ in range(3):
        result = run(shell, "%%distribute -n 2\n" + CELL)
        assert result.success, result.error_in_exec
        losses.append(shell.user_ns["history"].history["loss"])
    assert losses[0] == losses[1] == losses[2]  # same seed, same data: re-runs are reproducible
    shipped = [job.timings["shipped"] for job in jobs(shell)[-3:]]
    assert "x_train" not in shipped[1] and "x_train" not in shipped[2]
    # Changing the array in the notebook sends it again.
    shell.user_ns["x_train"] = digits["x_train"] * 0.5
    assert run(shell, "%%distribute -n 2\n" + CELL).success
    assert "x_train" in jobs(shell)[-1].timings["shipped"]


def test_trained_model_read_from_notebook_comes_back(shell, digits):
    import keras

    shell.user_ns.update(digits)
    run(
        shell,
        "import keras\nkeras.utils.set_random_seed(2)\n"
        "net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation='softmax')])\n"
        "before = net.get_weights()[0].copy()",
    )
    result = run(
        shell,
        "%%distribute -n 2\nnet.compile('adam', 'sparse_categorical_crossentropy')\n"
        "net.fit(x_train, y_train, epochs=1, verbose=0)",
    )
    assert result.success, result.error_in_exec
    assert isinstance(shell.user_ns["net"], keras.Model)
    assert not np.allclose(shell.user_ns["net"].get_weights()[0], shell.user_ns["before"])


def test_output_all_prefixes_every_rank(shell, capsys):
    code = "%%distribute -n 2 --output all --manual\nimport horovod.tensorflow as hvd\nprint('hello from', hvd.rank())"
    assert run(shell, code).success
    out = capsys.readouterr().out
    assert "[rank 0] hello from 0" in out
    assert "[rank 1] hello from 1" in out


def test_rank_error_names_the_rank_and_releases_the_others(shell):
    from jupyter_dl.errors import RankError

    code = (
        "%%distribute -n 2 --manual\n"
        "import horovod.tensorflow as hvd\n"
        "import numpy as np\n"
        "def check(r):\n"
        "    if r == 1:\n"
        "        raise ValueError('boom on purpose')\n"
        "check(hvd.rank())\n"
        "hvd.allreduce(np.ones(3), name='never_completed')\n"
    )  # rank 0 waits here for rank 1
    started = time.monotonic()
    result = run(shell, code)
    elapsed = time.monotonic() - started
    err = result.error_in_exec
    assert isinstance(err, RankError), err
    assert err.rank == 1 and err.ename == "ValueError" and "boom on purpose" in err.evalue
    rendered = "\n".join(err._render_traceback_())
    assert "check(hvd.rank())" in rendered and "raise ValueError" in rendered  # the user's own frames
    assert 0 in err.others  # rank 0 was released and reported, not left hanging
    assert elapsed < 20
    assert jobs(shell)[-1].state == "failed"
    # The next cell works on the same engines.
    assert run(shell, "%%distribute -n 2 --manual\nimport horovod.tensorflow as hvd\nok = hvd.size()").success
    assert shell.user_ns["ok"] == 2


def test_timeout_stops_a_stalled_job(shell):
    from jupyter_dl.errors import JobTimeout

    code = "%%distribute -n 2 --manual --timeout 3\nimport time\nwhile True:\n    time.sleep(0.1)\n"
    started = time.monotonic()
    result = run(shell, code)
    assert isinstance(result.error_in_exec, JobTimeout)
    assert time.monotonic() - started < 15
    assert run(shell, "%%distribute -n 2 --manual\nafter = 1").success


@pytest.mark.parametrize(
    "line, needle",
    [
        ("-n 0", "-n"),
        ("-n -3", "-n"),
        ("-n two", "-n"),
        ("--lr-scale cubic", "--lr-scale"),
        ("--output rank7", "--output"),
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--timeout -1", "--timeout"),
        ("--restarts 2", "--checkpoint-dir"),
        ("--restarts -1", "--restarts"),
        ("--manual --checkpoint-dir ckpt", "--manual"),
        ("--stall-timeout -2", "--stall-timeout"),
    ],
)
def test_bad_arguments_print_one_line_and_start_nothing(shell, capsys, line, needle):
    before = len(jobs(shell))
    result = run(shell, f"%%distribute {line}\nx = 1")
    assert not result.success
    captured = capsys.readouterr()
    text = captured.err + captured.out
    assert "UsageError" in text and needle in text
    usage_lines = [l for l in text.splitlines() if "UsageError" in l]
    assert len(usage_lines) == 1 and text.strip().count("\n") == 0
    assert len(jobs(shell)) == before
    assert "x" not in shell.user_ns


def test_unsendable_variable_is_named_before_launch(shell, capsys):
    shell.user_ns["lock"] = threading.Lock()
    before = len(jobs(shell))
    run(shell, "%%distribute -n 2\nwith lock:\n    pass")
    text = capsys.readouterr().err
    assert "cannot send variable 'lock'" in text
    assert len(jobs(shell)) == before


def test_syntax_error_is_reported_before_launch(shell):
    before = len(jobs(shell))
    result = run(shell, "%%distribute -n 2\ndef broken(:\n    pass")
    assert isinstance(result.error_in_exec.error, SyntaxError)  # shown as IPython shows one (test_messages_text)
    assert len(jobs(shell)) == before


def test_bad_input_starts_no_cluster():
    """A fresh session without a cluster: bad input must not start one."""
    from jupyter_dl.errors import UsageError
    from jupyter_dl.kernel.api import Session
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.wire.options import RunOptions

    fresh = Session()
    with pytest.raises(UsageError):
        fresh.runner.run(CellWork("x = 1", {}), RunOptions(n=0))
    with pytest.raises(UsageError, match="cannot send variable 'lock'"):
        fresh.runner.run(CellWork("with lock: pass", {"lock": threading.Lock()}), RunOptions(n=2))
    with pytest.raises(SyntaxError):
        fresh.runner.run(CellWork("x = (", {}), RunOptions(n=2))
    assert fresh.cluster.client is None and fresh.jobs.all() == []


def test_cluster_magics(shell, capsys):
    run(shell, "%dl_cluster status")
    out = capsys.readouterr().out
    assert "2 engines" in out and "started here" in out
    run(shell, "%dl_cluster frobnicate")
    assert "UsageError" in capsys.readouterr().err
    run(shell, "%dl_cluster connect --profile does-not-exist-xyz")
    assert "already in use" in capsys.readouterr().err


def test_dl_jobs_lists_shows_logs_and_refuses_bad_ids(shell, capsys):
    assert run(shell, "%%distribute -n 2 --manual --name listed\nprint('line from rank0')").success
    capsys.readouterr()
    run(shell, "%dl_jobs")
    table = capsys.readouterr().out  # the table is the cell's value: IPython shows it after its Out prompt
    assert any(line.split()[:3] == ["ID", "NAME", "STATE"] for line in table.splitlines())
    row = next(line for line in table.splitlines() if " listed " in line)
    job_id = row.split()[0]
    assert "succeeded" in row
    run(shell, f"%dl_jobs logs {job_id} --rank 0")
    assert "line from rank0" in capsys.readouterr().out
    run(shell, f"%dl_jobs cancel {job_id}")
    assert "already succeeded" in capsys.readouterr().err
    run(shell, "%dl_jobs cancel nosuchjob")
    assert "no job 'nosuchjob'" in capsys.readouterr().err


def test_a_cell_ending_in_an_expression_shows_its_value_as_one_process_would(shell, digits):
    """`model.evaluate(x_test, y_test)` as the cell's last line: one process shows the list as Out[n]; so does the
    distributed cell (rank 0's value). A trailing semicolon keeps it quiet, as IPython does."""
    shell.user_ns.update(digits)
    result = run(shell, "%%distribute -n 2\nx = 20\nx + 1\n")
    assert result.success and result.result == 21 and "x" in shell.user_ns
    quiet = run(shell, "%%distribute -n 2\nx + 1;\n")
    assert quiet.success and quiet.result is None
