"""GPU pinning on the embedded cluster, with this host's GPU inventory stood in for (this machine has no GPU, so
`gpus.discover` is replaced by two GPU indices; said here). Everything else is real: engines started with
CUDA_VISIBLE_DEVICES set to their GPU, the embedded pool granting GPUs, ranks placed on the engines of the granted
GPUs, and a killed engine replaced on its own GPU. On a GPU machine the same path runs with nvidia-smi's list."""

import os
import socket

import pytest

from jupyter_dl.host import gpus
from jupyter_dl.kernel.api import Session
from jupyter_dl.kernel.job.work import FunctionWork
from jupyter_dl.pool.local import LocalPool
from jupyter_dl.wire.options import RunOptions


def _pinning():
    import os

    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")


@pytest.fixture
def two_gpu_session(monkeypatch, tmp_path):
    monkeypatch.setattr(gpus, "discover", lambda: [0, 1])
    session = Session()
    session.runner.local_pool.state_file = str(tmp_path / "pool.json")
    yield session
    session.cluster.stop()


def test_ranks_run_on_the_engines_of_the_gpus_the_pool_granted(two_gpu_session, tmp_path):
    session = two_gpu_session
    status = session.cluster.start()
    assert status.engines == 2 and status.gpus == ["0", "1"]  # one engine per GPU, each pinned at start

    other_notebook = LocalPool(state_file=str(tmp_path / "pool.json"))
    held = other_notebook.submit(1, allowed=[(socket.gethostname(), 0)])
    assert held["state"] == "granted"
    result = session.runner.run(FunctionWork(_pinning, all_ranks=True), RunOptions(n=1))
    assert result.results == [("1", "true")]  # GPU 0 is taken: the rank ran on GPU 1's engine, memory growth on
    assert result.job.gpus == [f"{socket.gethostname()}:1"]
    assert other_notebook.summary()["free"] == 1  # the job's GPU went back when it ended


def test_a_killed_engine_is_replaced_on_its_own_gpu(two_gpu_session):
    session = two_gpu_session
    session.cluster.start()
    ids = session.cluster.engine_ids()
    pinned = {info["gpu"]: eid for eid, info in zip(ids, session.cluster.describe(ids))}
    session.cluster.kill_and_replace([pinned["1"]])
    session.cluster.ensure(2)
    ids = session.cluster.engine_ids()
    assert pinned["1"] not in ids
    assert sorted(info["gpu"] for info in session.cluster.describe(ids)) == ["0", "1"]
    assert sorted(session.cluster.devices) == [0, 1]
    assert os.environ.get("CUDA_VISIBLE_DEVICES") is None  # the kernel itself is never pinned


def _dies_once_then_reports_its_gpu(marker):
    import os

    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)  # the engine dies, as a crashed GPU process would
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def test_a_restart_waits_for_the_replacement_on_its_granted_gpu(two_gpu_session, tmp_path):
    """The pool grants the lowest free GPU again, whose engine is the one just replaced: the restart must wait for
    that replacement instead of failing because another GPU's engine is already there."""
    session = two_gpu_session
    session.cluster.start()
    options = RunOptions(n=1, restarts=1, checkpoint_dir=str(tmp_path / "ckpt"))
    result = session.runner.run(FunctionWork(_dies_once_then_reports_its_gpu, (str(tmp_path / "died"),)), options)
    assert result.results == ["0"] and len(result.job.restarts) == 1
