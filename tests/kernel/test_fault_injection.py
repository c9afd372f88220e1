"""The fault-injection suite: every kind of failure from tests/support/fault_catalog.py, on real engines with real
Horovod, and a representative subset with TensorFlow's own collectives (backend="tf").

For each fault: the cell raises the right error, naming the failing rank, within the time the issue promises
(measured from the injected failure or the stop request); the job's record says how it ended; and the next job runs
on as many engines as before (dead or stuck engines were replaced).
"""

import pytest
from fault_catalog import FAULTS, run_fault

import jupyter_dl
from jupyter_dl.errors import JobCancelled, JobStalled, JobTimeout, RankError

EXPECTED = {
    "rank_error": RankError,
    "stalled": JobStalled,
    "timeout": JobTimeout,
    "cancelled": JobCancelled,
    "interrupted": KeyboardInterrupt,
}
# Seconds from the failure to the error. Stops (cancel, interrupt) must take under 3 s; errors under 10 s;
# a stall is noticed after --stall-timeout, and a timeout fires after --timeout.
LIMITS = {"rank_error": 10.0, "cancelled": 3.0, "interrupted": 3.0, "stalled": 5 + 10.0, "timeout": 4 + 10.0}
FINAL_STATE = {
    "rank_error": "failed",
    "stalled": "failed",
    "timeout": "failed",
    "cancelled": "cancelled",
    "interrupted": "cancelled",
    "restarted": "succeeded",
}


# On backend="tf", one fault of each kind (the whole catalog runs on Horovod): CI time grows by about 2 minutes.
TF_FAULTS = {
    "raise-fit-rank1",  # a raise inside fit: the peer waits in the compiled step's collective_reduce_v2
    "exit-fit-rank1",  # an engine that exits during fit (EngineError)
    "sigkill-fit-rank0",  # the group's leader killed
    "stall-allreduce-rank1",  # a sleep while the peer waits in an eager collective
    "timeout-sleep",
    "cancel-allreduce",
    "interrupt-fit",
    # Not "stall-deadlock": TensorFlow matches collectives by order, sees rank 0's allreduce meet rank 1's broadcast
    # as the same instance, and fails it at once ("Collective instance 3 expected type 0 ... but got type 1": a
    # RankError with InternalError in ~0.05 s, every run) instead of hanging, so there is no stall to detect.
}
CASES = [("horovod", f) for f in FAULTS] + [("tf", f) for f in FAULTS if f.name in TF_FAULTS]


def _size():
    from jupyter_dl import collectives

    return collectives.size()


@pytest.mark.parametrize(("backend", "fault"), CASES, ids=[f"{b}-{f.name}" for b, f in CASES])
def test_injected_failure_is_reported_and_repaired(dl_session, tmp_path, backend, fault):
    # warm engines (and this backend): the limits are for failing, not starting
    assert jupyter_dl.distribute(_size, n=2, backend=backend) == 2
    run = run_fault(fault, str(tmp_path), backend=backend)
    assert run.injected is not None, f"the failure was never injected ({run.error!r})"
    job = dl_session.jobs.all()[-1]
    assert job.name == fault.name and job.state == FINAL_STATE[fault.expect], (job.state, job.error, run.error)
    if fault.expect == "restarted":
        assert run.error is None, repr(run.error)
        assert len(job.restarts) == 1 and f"rank {fault.rank} failed" in job.restarts[0]["reason"]
        assert run.result.state.restarts[0]["epoch"] == 2  # resumed after the 2 epochs it had checkpointed
    else:
        assert isinstance(run.error, EXPECTED[fault.expect]), repr(run.error)
        took = run.time_to_error
        print(f"{backend} {fault.name}: time to error {took:.2f}s")
        assert took < LIMITS[fault.expect], f"{fault.name}: {took:.2f}s from failure to error"
    if fault.expect == "rank_error":
        assert run.error.rank == fault.rank and run.error.ename == fault.ename, str(run.error)
        assert 1 - fault.rank in run.error.others  # the peer was released and said what it saw
    if fault.expect == "stalled":
        message = str(run.error)
        waiting = [0, 1] if fault.rank == -1 else [1 - fault.rank]
        for r in waiting:
            assert f"rank {r} waited" in message, message
        if fault.rank != -1:
            assert f"rank {fault.rank} was at cell line" in message and "time.sleep(120)" in message, message
    # The cluster is whole again: the next job gets its 2 ranks.
    assert jupyter_dl.distribute(_size, n=2, backend=backend) == 2


SLOW_FIRST_STEP = """
import time
import numpy as np
import keras
import horovod.tensorflow as hvd

class SlowStart(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        if hvd.rank() == 0:
            time.sleep(4)   # like a rank still tracing a big model: its peer waits in the first compiled step
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(np.ones((64, 8), "float32"), np.ones(64, "float32"), epochs=1, batch_size=8, verbose=0,
          callbacks=[SlowStart()])
"""


def test_a_peer_slow_to_reach_the_first_step_is_not_a_stall(dl_session):
    # 4 s alone before the first step, with --stall-timeout 1.5: the first step gets 5x the patience.
    result = jupyter_dl.distribute(SLOW_FIRST_STEP, n=2, namespace={}, stall_timeout=1.5)
    assert result.job.state == "succeeded"


LONG_BUSY_TRAINING = """
import time
import numpy as np
import keras
import horovod.tensorflow as hvd
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
model.compile("sgd", "mse")

def all_past(start, seconds, name):
    # Whether every rank has run `seconds` since `start`: all stop together, however fast this machine is.
    past = np.array([time.monotonic() - start > seconds], "float32")
    return bool(hvd.allreduce(past, op=hvd.Min, name=name)[0] > 0)

class UntilPast(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = all_past(start, 6.0, f"fit.{epoch}")

start = time.monotonic()
model.fit(np.ones((1024, 8), "float32"), np.ones(1024, "float32"), epochs=1000, batch_size=4, verbose=0,
          callbacks=[UntilPast()])
fit_s = time.monotonic() - start
start, calls = time.monotonic(), 0
while not all_past(start, 6.0, f"calls.{calls}"):  # many short eager collectives, one after another
    for _ in range(200):
        hvd.allreduce(np.ones(4), name="busy")
    calls += 1
calls_s = time.monotonic() - start
"""


def test_long_runs_of_short_collectives_are_not_a_stall(dl_session):
    # Frame objects of successive calls can share an address; progress (steps, calls) must reset the clock.
    # 2.5 s, not less: at the end of fit rank 0 alone does the epoch's bookkeeping while rank 1 already waits in the
    # first allreduce below, which on a loaded machine took over 1 s once.
    namespace = {}
    result = jupyter_dl.distribute(LONG_BUSY_TRAINING, n=2, namespace=namespace, stall_timeout=2.5)
    assert result.job.state == "succeeded"
    assert namespace["fit_s"] > 5 and namespace["calls_s"] > 5, namespace  # both outlast the stall timeout twice


STUCK_PAST_THE_GRACE = """
import signal, time
from jupyter_dl import collectives

def wait_for_a_peer_that_is_gone():
    time.sleep(600)  # like a collective in native code: no interrupt gets it out

if collectives.rank() == 1:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wait_for_a_peer_that_is_gone()
raise RuntimeError("rank 0 failed")
"""


def test_a_rank_killed_after_the_stop_grace_leaves_its_threads_stacks(dl_session, monkeypatch):
    """Rank 0 fails; rank 1 ignores every interrupt, so it is killed after the stop grace. Before the kill its
    engine writes each thread's stack (SIGUSR1, faulthandler: host/stack_dumps.py), and the error says where."""
    import os
    import re

    monkeypatch.setattr(dl_session.runner, "stop_grace", 2.0)
    assert jupyter_dl.distribute(_size, n=2) == 2
    with pytest.raises(RankError) as failed:
        jupyter_dl.distribute(STUCK_PAST_THE_GRACE, n=2, name="stuck", namespace={})
    assert failed.value.rank == 0 and failed.value.evalue == "rank 0 failed"
    killed = failed.value.others[1]
    assert "did not stop within 2s" in killed and "killed and replaced" in killed, killed
    path, host = re.search(r"its threads' stacks: (\S+) on ([^\s)]+)", killed).groups()
    assert host == os.uname().nodename  # a local cluster: the file is on this machine
    with open(path) as stacks:
        text = stacks.read()
    assert "Thread 0x" in text and "wait_for_a_peer_that_is_gone" in text, text
    assert jupyter_dl.distribute(_size, n=2) == 2  # the killed engine was replaced
