"""A kernel that dies while its job runs: the job is marked lost, its ranks stop working (they watch the kernel's
pid) instead of training on as orphans, and the engines of its own cluster exit."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
from process_guard import die_with_pytest

from jupyter_dl.jobs.store import JobStore
from jupyter_dl.server.service import JobService

KERNEL = textwrap.dedent("""
    import json, sys, jupyter_dl
    from jupyter_dl.kernel import api
    session = api.session()
    session.store.root = sys.argv[1]
    session.cluster.start(n=2)
    pids = [info["pid"] for info in session.cluster.describe(session.cluster.engine_ids())]
    print(json.dumps({"engines": pids, "controller": session.cluster.cluster.controller.pid}), flush=True)
    jupyter_dl.distribute("while True:\\n    pass\\n", n=2, namespace={}, manual=True, name="orphan")
""")


def _stopped(proc):
    """Idle, or gone altogether (ipyparallel may take an orphaned engine down with its controller)."""
    try:
        return proc.cpu_percent(interval=1.0) < 20
    except psutil.NoSuchProcess:
        return True


def test_dead_kernel_means_lost_job_and_idle_ranks(tmp_path):
    store_root = str(tmp_path / "jobs")
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, store_root],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        preexec_fn=die_with_pytest,
    )
    started = json.loads(kernel.stdout.readline())
    engines = [psutil.Process(pid) for pid in started["engines"]]
    cluster_processes = psutil.Process(kernel.pid).children(recursive=True)  # to clean up after the orphaning
    try:
        store = JobStore(root=store_root)
        deadline = time.monotonic() + 120
        while not any(j.state == "running" for j in store.list()):
            assert time.monotonic() < deadline, "job never started"
            time.sleep(0.2)
        # Past setup, the ranks spin in the user's loop: both busy training (polled, however slow the machine is).
        deadline = time.monotonic() + 60
        while not all(p.cpu_percent(interval=0.5) > 50 for p in engines):
            assert time.monotonic() < deadline, "the ranks never got busy training"

        kernel.send_signal(signal.SIGKILL)
        kernel.wait(10)
        (job,) = JobService(store).list_jobs()
        assert job["state"] == "lost"
        # The ranks' watchdog checks the kernel every second: they stop within a few (polled, not slept).
        deadline = time.monotonic() + 15
        while not all(_stopped(p) for p in engines):
            assert time.monotonic() < deadline, "the ranks kept running after their kernel died"
            time.sleep(0.2)
        # The dead kernel's own engines then exit, so none keeps a GPU's memory (they check every 2 s).
        gone, alive = psutil.wait_procs(engines, timeout=10)
        assert not alive, f"engines {[p.pid for p in alive]} outlived the kernel that started them"
        # And so does its controller with every helper process it started: nothing of the cluster is left.
        rest = [p for p in cluster_processes if p.pid not in started["engines"]]
        assert started["controller"] in [p.pid for p in rest]
        gone, alive = psutil.wait_procs(rest, timeout=15)
        assert not alive, f"{[(p.pid, p.name()) for p in alive]} outlived the kernel that started them"
    finally:
        kernel.kill()
        for proc in cluster_processes + engines:  # the orphaned cluster is not ours to keep
            try:
                proc.kill()
            except psutil.Error:
                pass
