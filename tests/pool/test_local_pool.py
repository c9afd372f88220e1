"""The embedded GPU pool: one user's kernels on one host share its GPUs through a locked state file.

This machine has no GPU, so the pool's inventory is simulated (`LocalPool.simulate_gpus`, said here): the pool only
counts GPUs, so the admission, queueing and lease code is the code a GPU host runs; the ranks run on CPU engines.
Everything else is real: separate kernel processes, each with its own ipyparallel cluster and Horovod jobs.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from process_guard import die_with_pytest

from jupyter_dl.pool.gang import PoolError
from jupyter_dl.pool.local import LocalPool

HOLDER = textwrap.dedent("""
    import sys, time
    from jupyter_dl.pool.local import LocalPool
    ticket = LocalPool(simulate_gpus=2, state_file=sys.argv[1]).submit(2, job="holder")
    print(ticket["state"], flush=True)
    time.sleep(120)
""")

# A second notebook of the same user: its own cluster, one job that ends, then one that runs until its kernel dies.
OTHER_KERNEL = textwrap.dedent("""
    import json, sys, jupyter_dl
    from jupyter_dl.kernel import api
    session = api.session()
    session.store.root = sys.argv[2]
    session.runner.local_pool.simulate_gpus = 2
    session.runner.local_pool.state_file = sys.argv[1]
    session.cluster.start(n=2)
    print(json.dumps({"ready": True}), flush=True)
    names = {}
    jupyter_dl.distribute("import time\\ntime.sleep(6)\\nended = time.monotonic()\\n", n=2, namespace=names,
                          name="other-first")
    print(json.dumps({"first_ended": names["ended"]}), flush=True)
    jupyter_dl.distribute("import time\\nwhile True:\\n    time.sleep(0.1)\\n", n=2, namespace={}, manual=True,
                          name="other-forever")
""")


@pytest.fixture
def pool_file(tmp_path):
    return str(tmp_path / "pool.json")


def test_a_dead_kernels_gpus_go_to_the_next_job_in_line(pool_file):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, pool_file], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "granted"
        pool = LocalPool(simulate_gpus=2, state_file=pool_file)
        waiting = pool.submit(2, job="mine")
        assert waiting["state"] == "queued" and waiting["position"] == 1 and waiting["devices"] == []
        assert waiting["reason"] == "waiting for 2 GPUs to be free at once (0 free now)"
        assert pool.summary() == {"gpus": 2, "free": 0, "queued": 1}
    finally:
        holder.kill()
        holder.wait()
    granted = pool.ticket(waiting["id"])
    assert granted["state"] == "granted" and len(granted["devices"]) == 2
    assert pool.release(waiting["id"])["state"] == "released"
    assert pool.summary() == {"gpus": 2, "free": 2, "queued": 0}


def test_requests_the_pool_cannot_serve_are_refused_in_one_line(pool_file):
    pool = LocalPool(simulate_gpus=2, state_file=pool_file)
    with pytest.raises(PoolError, match="asked for 3 GPUs; the pool has 2 in all: ask for at most 2"):
        pool.submit(3)
    with pytest.raises(PoolError, match="asked for 2 GPUs; the pool has 1 in all for this cluster"):
        pool.submit(2, allowed=[(pool.inventory.popitem()[0], 1)])
    assert pool.summary()["queued"] == 0  # nothing was left behind


def test_a_release_interrupted_by_a_second_ctrl_c_still_gives_the_gpus_back(pool_file):
    from jupyter_dl.jobs import Job
    from jupyter_dl.pool.lease import PoolLease

    class InterruptedOnce(LocalPool):
        interrupted = False

        def release(self, ticket_id):
            if not self.interrupted:
                self.interrupted = True
                raise KeyboardInterrupt
            return super().release(ticket_id)

    pool = InterruptedOnce(simulate_gpus=2, state_file=pool_file)
    with PoolLease(pool, 2, Job(name="j", n=2), pool.owner, poll_s=0.05) as ticket:
        assert ticket["state"] == "granted" and pool.summary()["free"] == 0
    assert pool.interrupted and pool.summary()["free"] == 2


def test_a_damaged_state_file_is_reported_not_reset(pool_file):
    """Resetting would forget who holds which GPUs (two jobs on one GPU): the user is told what to do instead."""
    with open(pool_file, "w") as handle:
        handle.write('{"next_id": 3, "tick')
    with pytest.raises(PoolError, match=r"pool.json is not valid JSON; delete it when no notebook is running a job"):
        LocalPool(simulate_gpus=2, state_file=pool_file).submit(1)


def test_only_the_gpus_a_kernels_engines_hold_are_granted_to_it(pool_file):
    pool = LocalPool(simulate_gpus=4, state_file=pool_file)
    (host,) = pool.inventory
    ticket = pool.submit(2, allowed=[(host, 2), (host, 3)])
    assert ticket["state"] == "granted" and sorted(ticket["devices"]) == [[host, 2], [host, 3]]
    blocked = pool.submit(1, allowed=[(host, 3)])
    assert blocked["state"] == "queued" and "(0 free now)" in blocked["reason"]  # GPUs 0 and 1 are of no use to it
    pool.release(ticket["id"])
    assert pool.ticket(blocked["id"])["devices"] == [[host, 3]]


def _start_time():
    import time

    return time.monotonic()


def test_two_notebooks_jobs_take_turns_on_the_gpus(dl_session, pool_file, tmp_path, monkeypatch, capsys):
    """Another kernel of the same user holds both (simulated) GPUs: this kernel's job waits as `queued`, position
    1, and its ranks start only after the other job's ranks ended; when the other kernel dies mid-job, its GPUs
    come back at once."""
    import threading

    import jupyter_dl

    monkeypatch.setattr(dl_session.runner.local_pool, "simulate_gpus", 2)
    monkeypatch.setattr(dl_session.runner.local_pool, "state_file", pool_file)
    jupyter_dl.distribute(_start_time, n=2, name="warm-up")  # Horovod and TensorFlow imported before the race below
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_KERNEL, pool_file, str(tmp_path / "other-jobs")],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_pytest,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    other_cluster = []
    try:
        assert json.loads(other.stdout.readline()) == {"ready": True}
        other_cluster = psutil.Process(other.pid).children(recursive=True)
        pool = LocalPool(simulate_gpus=2, state_file=pool_file)
        deadline = time.monotonic() + 60
        while pool.summary()["free"]:
            assert time.monotonic() < deadline, "the other notebook's job never took the GPUs"
            time.sleep(0.1)

        assert "0 of 2 GPUs free, 0 jobs queued" in dl_session.runner.pools.status()
        outcome = {}
        runner = threading.Thread(
            target=lambda: outcome.update(
                starts=jupyter_dl.distribute(_start_time, n=2, all_ranks=True, name="mine-first")
            )
        )
        runner.start()
        _wait_queued(dl_session, "mine-first", runner)
        first_ended = json.loads(other.stdout.readline())["first_ended"]
        runner.join(120)
        assert min(outcome["starts"]) > first_ended  # never both jobs on the GPUs at once
        assert "queued for 2 GPUs: position 1" in capsys.readouterr().err

        while pool.summary()["free"]:  # the other kernel's endless job holds the GPUs again
            assert time.monotonic() < deadline + 60, "the other notebook's second job never took the GPUs"
            time.sleep(0.1)
        runner = threading.Thread(
            target=lambda: outcome.update(
                second=jupyter_dl.distribute(_start_time, n=2, all_ranks=True, name="mine-second")
            )
        )
        runner.start()
        _wait_queued(dl_session, "mine-second", runner)
        killed = time.monotonic()
        other.send_signal(signal.SIGKILL)
        other.wait(10)
        runner.join(120)
        assert outcome["second"] and min(outcome["second"]) - killed < 8.0  # its GPUs came back at the next poll
    finally:
        other.kill()
        for proc in other_cluster:  # the dead kernel's cluster is not ours to keep
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
    assert pool.summary() == {"gpus": 2, "free": 2, "queued": 0}


def _wait_queued(session, name, runner):
    deadline = time.monotonic() + 30
    while not any(
        j.name == name and j.state == "queued" and j.progress.get("queue_position") == 1 for j in session.jobs.all()
    ):
        assert time.monotonic() < deadline and runner.is_alive(), f"{name} never queued"
        time.sleep(0.05)
    job = next(j for j in session.jobs.all() if j.name == name)
    assert session.store.load(job.id).progress["queue_position"] == 1  # what the panel reads


def test_cluster_status_shows_the_embedded_pool(shell, dl_session, pool_file, monkeypatch, capsys):
    monkeypatch.setattr(dl_session.runner.local_pool, "simulate_gpus", 2)
    monkeypatch.setattr(dl_session.runner.local_pool, "state_file", pool_file)
    shell.run_cell("%dl_cluster status")
    out = capsys.readouterr().out
    assert f"GPU pool, embedded ({pool_file}): 2 of 2 GPUs free, 0 jobs queued" in out


def test_recommendations_count_only_the_gpus_free_in_the_pool(dl_session, pool_file, monkeypatch):
    """The recommender plans with what the pool can grant now; its own bandwidth probe does not queue for GPUs."""
    monkeypatch.setattr(dl_session.runner.local_pool, "simulate_gpus", 2)
    monkeypatch.setattr(dl_session.runner.local_pool, "state_file", pool_file)
    monkeypatch.setattr(dl_session.advisor, "_interconnect", None)  # measured again, on both engines
    other_job = LocalPool(simulate_gpus=2, state_file=pool_file).submit(1, job="other")
    assert [(d.kind, d.free) for d in dl_session.advisor.devices()] == [("cpu", 1)]
    LocalPool(simulate_gpus=2, state_file=pool_file).release(other_job["id"])
    assert [(d.kind, d.free) for d in dl_session.advisor.devices()] == [("cpu", 2)]
