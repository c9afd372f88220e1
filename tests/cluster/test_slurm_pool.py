"""The GPU pool delegated to a real multi-node Slurm (tests/support/slurm_nodes.py: 2 nodes x 2 CPUs x 2 stand-in
GPUs). Two kernels (two jupyter-dl sessions in this process, so two jobs of one user: Slurm sees one user here) run
jobs with c.SlurmPool.enabled: each job's ranks are one sbatch allocation with --gres=gpu:2 per node, its engines
started for the job and cancelled when it ends. The first job takes every GPU, the second waits in Slurm's queue with
its position shown in the cell and in job.progress, then runs on its own allocation; interrupting a queued job
cancels its Slurm job."""

import contextlib
import io
import os
import signal
import subprocess
import threading
import time

import pytest
import slurm_nodes
from netns import HOSTS, KERNEL_ADDRESS

NODES = [hostname for _, hostname, *_ in HOSTS]
# Holds its allocation until the test says, then reports where each rank ran, through Horovod over gloo.
HOLD_CELL = """
import os, socket, time
import horovod.tensorflow as hvd
while not os.path.exists(MARKER):
    time.sleep(0.1)
placed = hvd.allgather_object(
    (socket.gethostname(), os.environ["SLURM_JOB_ID"], os.environ.get("CUDA_VISIBLE_DEVICES"), hvd.rank())
)
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurm_nodes.nodes(tmp_path_factory.mktemp("slurm-pool")) as running:
        yield running


def _session(**slurm_pool):
    """A kernel's jupyter-dl session whose pool is Slurm, its controller on the bridge (the nodes' engines reach it)."""
    from traitlets.config import Config, Configurable

    from jupyter_dl.kernel import api

    config = Config()
    config.Cluster = Config(controller_ip=KERNEL_ADDRESS, controller_location=KERNEL_ADDRESS)
    config.SlurmPool = Config(enabled=True, poll_interval=0.3, **slurm_pool)
    return api.Session(parent=Configurable(config=config))


@pytest.fixture(scope="module")
def kernels(slurm):
    sessions = [_session(time_limit="20"), _session(account="jdl-lab", time_limit="20")]
    yield sessions
    for session in sessions:
        session.cluster.stop()


def _slurm_jobs():
    """{name: (job id, state, nodes or reason, gres per node, account)} of the jobs' allocations in Slurm."""
    lines = subprocess.run(["squeue", "-h", "-o", "%j|%i|%T|%R|%b|%a"], capture_output=True, text=True).stdout
    return {line.split("|")[0]: tuple(line.split("|")[1:]) for line in lines.splitlines() if line.startswith("jdl-")}


def _wait(done, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not (result := done()):
        assert time.monotonic() < deadline, f"{what} within {timeout}s; squeue: {_slurm_jobs()}"
        time.sleep(0.1)
    return result


def _run(session, n, name, marker, stderr=None):
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.wire.options import RunOptions

    work = CellWork(HOLD_CELL, {"MARKER": marker})
    options = RunOptions(n=n, name=name, plot=False, timeout=120)
    return session.runner.run(work, options, stderr=stderr or io.StringIO()).values["placed"]


def _job(session, name):
    return next((job for job in session.jobs.all() if job.name == name), None)


@contextlib.contextmanager
def _holding_every_gpu(session, name, marker):
    """A 4-rank job (2 nodes x 2 GPUs: all of them) running in the background until `marker` exists."""
    first = {}
    thread = threading.Thread(target=lambda: first.update(placed=_run(session, 4, name, marker)), daemon=True)
    thread.start()
    try:
        _wait(lambda: (job := _job(session, name)) is not None and job.state == "running", f"{name} running", 180)
        yield first
    finally:
        open(marker, "w").close()
        thread.join(120)


def test_a_job_waits_in_slurms_queue_with_its_place_shown_then_runs_on_its_own_allocation(kernels, tmp_path):
    a, b = kernels
    marker = str(tmp_path / "release-first")
    seen, said = {}, io.StringIO()

    def watch_second():  # whatever happens, the first job ends (a failed wait shows as a missing entry of `seen`)
        try:
            _wait(lambda: _job(b, "second"), "second submitted")
            _wait(lambda: "Resources" in _job(b, "second").progress.get("reason", ""), "second waits for Resources")
            seen.update(progress=dict(_job(b, "second").progress), squeue=_slurm_jobs())
            # Slurm's backfill pass (every 30 s) estimates when it starts: the first job's time limit is known.
            _wait(lambda: "estimated start 20" in _job(b, "second").progress["reason"], "a start estimate", 60)
            seen["estimated"] = _job(b, "second").progress["reason"]
        finally:
            open(marker, "w").close()  # the first job ends: its allocation is cancelled, the second's can start

    with _holding_every_gpu(a, "first", marker) as first:
        (first_id, state, nodes, gres, _) = _slurm_jobs()["jdl-first"]
        assert (state, nodes) == ("RUNNING", ",".join(NODES)) and "gpu:2" in gres, _slurm_jobs()
        watcher = threading.Thread(target=watch_second, daemon=True)
        watcher.start()
        placed = _run(b, 2, "second", marker, stderr=said)
        watcher.join(5)
    # While the first job held every GPU, the second waited in Slurm's own queue: first in it, for Resources, under
    # the account its kernel was configured with; the cell and job.progress (the panel's source) said so.
    second_id, state, reason, gres, account = seen["squeue"]["jdl-second"]
    assert (state, reason, account) == ("PENDING", "(Resources)", "jdl-lab") and "gpu:2" in gres, seen
    assert seen["progress"]["queue_position"] == 1, seen
    assert seen["progress"]["reason"].startswith(f"Slurm job {second_id}: Resources, "), seen
    assert f"queued in Slurm for 2 ranks with GPUs: position 1 (Slurm job {second_id}: Resources" in said.getvalue()
    assert f"position 1 ({seen['estimated']})" in said.getvalue(), said.getvalue()
    # The first job ran on its 4 engines, 2 per node, each pinned to one of its node's GPUs, all in its allocation.
    assert sorted(p[:3] for p in first["placed"]) == sorted((n, first_id, gpu) for n in NODES for gpu in "01")
    # The second ran on its own allocation only: one node, both of its GPUs; the queue fields are gone.
    assert sorted(p[1:] for p in placed) in (
        [(second_id, "0", 0), (second_id, "1", 1)],
        [(second_id, "0", 1), (second_id, "1", 0)],
    ), placed
    assert placed[0][0] == placed[1][0] in NODES
    job = _job(b, "second")
    assert job.state == "succeeded" and "queue_position" not in job.progress and len(job.gpus) == 2, job
    # Both allocations ended with their jobs.
    _wait(lambda: not _slurm_jobs(), "both allocations cancelled", 30)


def test_interrupting_a_queued_job_cancels_its_slurm_job(kernels, tmp_path, monkeypatch):
    """The job's allocation is held in Slurm's queue (sbatch reads $SBATCH_HOLD: a user hold, as `scontrol hold` sets),
    so it waits whatever else runs; the kernel's interrupt ends the wait and scancel removes it from the queue."""
    _, b = kernels
    said, interrupted = io.StringIO(), {}
    monkeypatch.setenv("SBATCH_HOLD", "1")

    def interrupt_when_queued():
        try:
            _wait(lambda: (j := _job(b, "given-up")) and j.state == "queued", "given-up queued")
            interrupted["slurm"] = _slurm_jobs()["jdl-given-up"]
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # what interrupting the kernel does

    threading.Thread(target=interrupt_when_queued, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        _run(b, 2, "given-up", str(tmp_path / "never"), stderr=said)
    slurm_id, state, *_ = interrupted["slurm"]
    assert state == "PENDING", interrupted
    # Cancelled at once (scancel): gone from Slurm's queue.
    _wait(lambda: "jdl-given-up" not in _slurm_jobs(), f"Slurm job {slurm_id} gone from squeue", 15)
    assert _job(b, "given-up").state == "cancelled"
    assert f"queued in Slurm for 2 ranks with GPUs: position 1 (Slurm job {slurm_id}: " in said.getvalue()
