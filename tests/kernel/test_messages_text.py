"""The kernel's own words after a job (issue 30), without engines: one line for a stop, a rank stopped by a peer
named as such, a syntax error shown as IPython shows one at the line the user sees, and one rank counted as one."""

import re

import pytest

from jupyter_dl.errors import JobCancelled, JobStalled
from jupyter_dl.jobs.model import Job
from jupyter_dl.kernel.job import outcomes
from jupyter_dl.kernel.job.monitor import Ending
from jupyter_dl.kernel.job.runner import JobRunner
from jupyter_dl.live import summary

pytestmark = pytest.mark.fast

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _job(n, state="running"):
    job = Job(name="long-run", n=n)
    job.transition("starting")
    job.transition(state)
    job.progress = {"epoch": 2, "epochs": 5}
    return job


@pytest.mark.parametrize("n, stopped", [(2, "all 2 ranks stopped"), (1, "its rank stopped")])
def test_an_interrupted_job_is_one_line_and_still_an_interrupt(n, stopped):
    job = _job(n)
    with pytest.raises(KeyboardInterrupt) as caught:  # a script stops; "Run all" stops
        outcomes.finish(job, Ending(status="interrupted"), [None] * n, None, None, None)
    shown = caught.value._render_traceback_()  # what IPython shows instead of a traceback
    assert len(shown) == 1, shown
    assert shown[0].startswith(f"[jupyter-dl] job 'long-run' ({job.id}) was interrupted after ")
    assert shown[0].endswith(f"at epoch 2/5; {stopped}"), shown
    assert job.state == "cancelled"


@pytest.mark.parametrize("n, stopped", [(2, "all 2 ranks stopped"), (1, "its rank stopped")])
def test_a_cancelled_job_says_from_where_and_counts_its_ranks(n, stopped):
    job = _job(n)
    with pytest.raises(JobCancelled) as caught:
        outcomes.finish(job, Ending(status="cancelled"), [None] * n, None, None, None)
    line = str(caught.value)
    assert "was cancelled from the jobs panel or %dl_jobs cancel after " in line and line.endswith(stopped), line


def test_a_one_rank_stall_does_not_speak_of_other_ranks():
    job = _job(1)
    stall = {0: {"waited_s": 130.0, "what": "a compiled Keras training step", "where": "cell line 4: model.fit(x)"}}
    with pytest.raises(JobStalled) as caught:
        outcomes.finish(job, Ending(status="stalled", stalls=stall), [None], None, None, None)
    text = str(caught.value)
    assert "its rank stopped" in text and "1 ranks" not in text and "every rank was waiting" not in text, text


def test_phase_and_summary_say_one_rank():
    assert JobRunner._phase_text(1, "horovod", cold=False) == "1 rank: Horovod rendezvous"
    assert JobRunner._phase_text(2, "tf", cold=True).startswith("2 ranks: importing TensorFlow, ")
    job = _job(1, state="running")
    job.transition("succeeded")
    one = {
        "job": "single",
        "state": "succeeded",
        "ranks": 1,
        "wall_s": 12.0,
        "samples_per_s": 900.0,
        "samples_per_s_by_rank": {0: 900.0},
        "final_metrics": {"loss": 0.5},
        "scaling_efficiency": None,
        "baseline_samples_per_s": None,
        "restarts": 1,
        "time_split": {0: {"seconds": 10.0, "allreduce_s": 1.1, "share": 0.11}},  # a single rank's "allreduce": a copy
        "resources": {},
    }
    text = summary.as_text(one)
    assert "on 1 rank after 1 restart |" in text, text
    assert "allreduce" not in text and "other ranks" not in text and "1 ranks" not in text, text


def _failed(rank, ename, evalue, induced):
    return {"rank": rank, "ok": False, "ename": ename, "evalue": evalue, "induced": induced, "traceback": ""}


def test_a_rank_stopped_by_the_failing_one_says_so_in_one_line():
    """Rank 1 raised in the cell; rank 0 had finished the cell and failed in jupyter-dl's own end-of-job check (the
    fingerprint allgather) because rank 1 had left: that is rank 1's failure, not rank 0's."""
    job = _job(3)
    ranks = [
        _failed(
            0,
            "UnknownError",
            "{{function_node __wrapped__HorovodAllgather_device_/job:localhost}} Horovod has been shut down. "
            "name: jdl.fingerprint.sz",
            induced=True,
        ),
        _failed(1, "ValueError", "boom", induced=False),
        _failed(2, "KeyboardInterrupt", "", induced=False),  # interrupted by the kernel after rank 1 failed
    ]
    with pytest.raises(Exception) as caught:
        outcomes.finish(job, Ending(status="failed", failed_order=[1, 0, 2]), ranks, None, None, None)
    error = caught.value
    assert error.rank == 1 and error.ename == "ValueError"
    assert error.others == {0: "stopped because rank 1 failed", 2: "stopped because rank 1 failed"}
    rendered = "\n".join(error._render_traceback_())
    assert "Horovod" not in rendered and "jdl.fingerprint" not in rendered, rendered


def test_a_rank_with_an_error_of_its_own_keeps_it():
    job = _job(2)
    ranks = [_failed(0, "ValueError", "boom on 0", induced=False), _failed(1, "ValueError", "boom on 1", False)]
    with pytest.raises(Exception) as caught:
        outcomes.finish(job, Ending(status="failed", failed_order=[1, 0]), ranks, None, None, None)
    assert caught.value.others == {0: "ValueError: boom on 0"}


@pytest.fixture
def plain_shell():
    """A real IPython shell with the extension loaded; nothing here starts a cluster."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext jupyter_dl", store_history=False)
    return ip


def test_a_syntax_error_is_shown_as_for_any_cell_at_the_line_the_user_sees(plain_shell, capsys):
    from jupyter_dl.kernel import api

    before = len(api.session().jobs.all())
    result = plain_shell.run_cell("%%distribute -n 2\nx = 1\ndef broken(:\n    pass\n", store_history=False)
    assert not result.success
    shown = ANSI.sub("", "".join(capsys.readouterr()))
    lines = [line for line in shown.splitlines() if line.strip()]
    # IPython's own form for a plain cell: where, the line, the caret, the error. Line 3 is `def broken(:` counting
    # the %%distribute line, as the notebook numbers the cell's lines.
    assert re.fullmatch(r"\s*Cell In\[\d+\], line 3", lines[0]), shown
    assert lines[1].strip() == "def broken(:" and lines[2].strip() == "^" and lines[3] == "SyntaxError: invalid syntax"
    assert len(lines) == 4, shown  # no frames of jupyter-dl (magics, api, runner, work, cell, ast)
    assert isinstance(result.error_in_exec.error, SyntaxError) and result.error_in_exec.error.lineno == 3
    assert len(api.session().jobs.all()) == before  # nothing started


def test_the_python_api_numbers_code_from_its_first_line(plain_shell):
    import jupyter_dl

    with pytest.raises(SyntaxError) as caught:
        jupyter_dl.distribute("x = 1\ny = (\n", n=2, namespace={})
    assert caught.value.lineno == 2


# What `import keras` wrote to descriptor 2 here (TensorFlow 2.21, no CUDA driver), whatever TF_CPP_MIN_LOG_LEVEL said:
# these records come before TensorFlow sets up its logging.
TENSORFLOW_IMPORT = """WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795561807.554826   15631 cudart_stub.cc:31] Could not find cuda drivers on your machine
I0000 00:00:1795561807.648311   15631 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available
To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate flags.
E0000 00:00:1795561819.174821   15631 cuda_fft.cc:477] Unable to register cuFFT factory
"""


def test_tensorflow_import_is_held_to_the_log_level():
    from jupyter_dl.kernel.tf_logs import kept_lines

    assert kept_lines(TENSORFLOW_IMPORT, 2) == TENSORFLOW_IMPORT.splitlines(keepends=True)[-1]
    assert kept_lines(TENSORFLOW_IMPORT, 3) == ""
    assert kept_lines(TENSORFLOW_IMPORT, 0) == TENSORFLOW_IMPORT
    assert kept_lines("Fatal Python error: Aborted\n" + TENSORFLOW_IMPORT, 3) == "Fatal Python error: Aborted\n"


def test_load_ext_sets_the_level_only_when_the_user_has_not(monkeypatch):
    import sys

    from traitlets.config import Config, Configurable

    from jupyter_dl.kernel import tf_logs

    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)  # as in a kernel that has not loaded it yet
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert tf_logs.quiet_kernel() and tf_logs.os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user's own choice stays
    assert tf_logs.quiet_kernel() and tf_logs.os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    off = Config({"KernelTensorFlowLog": {"log_level": ""}})
    assert not tf_logs.quiet_kernel(parent=Configurable(config=off))
    assert "TF_CPP_MIN_LOG_LEVEL" not in tf_logs.os.environ


def test_size_errors_agree_in_number_with_one_engine():
    from jupyter_dl.cluster import size_checks
    from jupyter_dl.errors import UsageError

    with pytest.raises(UsageError, match=r"the connected cluster has 1 engine; use -n 1"):
        size_checks.check_connected(2, 1)
    assert size_checks.counted(1, "GPU") == "1 GPU" and size_checks.counted(3, "GPU") == "3 GPUs"
