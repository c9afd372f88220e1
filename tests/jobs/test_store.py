"""The job store's files: job.json round trips, metrics paging, per-rank logs, cancel requests, lost kernels, pruning.

Pure: a JobStore rooted in tmp_path, real Job records, real (dead and alive) processes. No cluster or server.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from jupyter_dl.jobs import Job
from jupyter_dl.jobs.store import CANCEL_FILE, JobStore
from jupyter_dl.wire.native_tags import NATIVE_TAG

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


@pytest.fixture
def store(tmp_path):
    return JobStore(root=str(tmp_path / "jobs"))


@pytest.fixture(scope="module")
def dead_pid():
    """The pid of a process this test started and reaped: it really is gone."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert child.wait(timeout=30) == 0
    return child.pid


def make_job(**kwargs):
    kwargs.setdefault("name", "job")
    kwargs.setdefault("n", 2)
    return Job(**kwargs)


# --------------------------------------------------------------------------------------------------- job.json
def test_save_load_round_trip(store):
    """Every field written to job.json comes back equal from load(), including nested dicts and lists."""
    job = make_job(
        name="resnet",
        n=4,
        notebook="train.ipynb",
        kernel_id="k-1",
        engine_ids=[0, 1, 2, 3],
        hosts=["a", "b"],
        gpus=[[0], [1]],
        options={"lr_scale": "sqrt", "timeout": 60.0},
        progress={"epoch": 2, "epochs": 5, "fraction": 0.4},
        timings={"launch_s": 1.25},
        restarts=[{"attempt": 1, "reason": "rank 1 died", "t": 12.5}],
    )
    job.transition("running")
    store.save(job)
    loaded = store.load(job.id)
    assert loaded == job
    assert loaded is not job
    assert loaded.state == "running" and loaded.timestamps["running"] == job.timestamps["running"]


def test_job_json_is_plain_json_with_elapsed(store):
    """job.json is readable by anything (the server, the panel): plain JSON, with elapsed added for readers."""
    job = make_job()
    store.save(job)
    data = json.loads((store.job_dir(job.id) / "job.json").read_text())
    assert data["id"] == job.id and data["name"] == "job" and data["n"] == 2
    assert isinstance(data["elapsed"], float) and data["elapsed"] >= 0
    assert not [p.name for p in store.job_dir(job.id).iterdir() if p.name != "job.json"]  # no temp file left


def test_save_stringifies_what_json_cannot_hold(store, tmp_path):
    """A non-JSON value in options (a path) is stored as its string instead of failing the save."""
    job = make_job(options={"checkpoint_dir": tmp_path / "ck"})
    store.save(job)
    assert store.load(job.id).options == {"checkpoint_dir": str(tmp_path / "ck")}


def test_load_missing_job_raises(store):
    """Loading a job that was never saved is an error, not an empty record."""
    with pytest.raises(FileNotFoundError):
        store.load("nope")


def test_progress_only_saves_are_rate_limited(tmp_path):
    """Within save_interval a progress-only save is dropped; a state save always lands."""
    store = JobStore(root=str(tmp_path), save_interval=3600)
    job = make_job()
    store.save(job)
    job.progress = {"fraction": 0.5}
    store.save(job, progress_only=True)
    assert store.load(job.id).progress == {}
    job.transition("running")
    store.save(job)
    loaded = store.load(job.id)
    assert (loaded.state, loaded.progress) == ("running", {"fraction": 0.5})


def test_first_progress_only_save_lands(tmp_path):
    """A job's first save lands even when it is progress-only (nothing was written for it yet)."""
    store = JobStore(root=str(tmp_path), save_interval=1.0)
    job = make_job(progress={"step": 1})
    store.save(job, progress_only=True)
    assert store.load(job.id).progress == {"step": 1}


def test_progress_only_rate_limit_is_per_job(tmp_path):
    """One job's recent save does not hold back another job's progress."""
    store = JobStore(root=str(tmp_path), save_interval=3600)
    a, b = make_job(name="a"), make_job(name="b")
    store.save(a)
    b.progress = {"step": 3}
    store.save(b, progress_only=True)
    assert store.load(b.id).progress == {"step": 3}


def test_rate_limit_ignores_machine_uptime(tmp_path):
    """The clock reads 0.5 s (a machine booted half a second ago, where monotonic time starts): a job never saved
    is not treated as saved at boot, and the interval is measured from its own last write."""
    now = [0.5]
    store = JobStore(root=str(tmp_path), save_interval=1.0, clock=lambda: now[0])
    job = make_job(progress={"step": 1})
    store.save(job, progress_only=True)
    assert store.load(job.id).progress == {"step": 1}
    job.progress = {"step": 2}
    now[0] = 1.4  # 0.9 s after the last write: held back
    store.save(job, progress_only=True)
    assert store.load(job.id).progress == {"step": 1}
    now[0] = 1.6  # 1.1 s after: lands
    store.save(job, progress_only=True)
    assert store.load(job.id).progress == {"step": 2}


def test_zero_interval_saves_every_progress_update(tmp_path):
    """save_interval=0 writes every progress update."""
    store = JobStore(root=str(tmp_path), save_interval=0)
    job = make_job()
    for step in range(3):
        job.progress = {"step": step}
        store.save(job, progress_only=True)
        assert store.load(job.id).progress == {"step": step}


# ---------------------------------------------------------------------------------------------------- metrics
def test_metrics_round_trip(store):
    """Appended records come back in order, with the next line to ask from."""
    store.append_metrics("j", [{"kind": "batch", "step": 1, "loss": 2.5}, {"kind": "batch", "step": 2, "loss": 2.0}])
    store.append_metrics("j", [{"kind": "epoch", "epoch": 0, "loss": 1.75}])
    records, next_line = store.metrics("j")
    assert records == [
        {"kind": "batch", "step": 1, "loss": 2.5},
        {"kind": "batch", "step": 2, "loss": 2.0},
        {"kind": "epoch", "epoch": 0, "loss": 1.75},
    ]
    assert next_line == 3
    assert store.metrics("j", since=next_line) == ([], 3)
    assert store.metrics("j", since=1) == (records[1:], 3)


def test_metrics_numpy_like_values_become_floats(store):
    """Values json cannot write natively (numpy scalars from Keras logs) are stored as floats."""
    np = pytest.importorskip("numpy")
    store.append_metrics("j", [{"loss": np.float32(0.5), "acc": np.float64(0.25)}])
    assert store.metrics("j") == ([{"loss": 0.5, "acc": 0.25}], 1)


def test_metrics_empty_append_creates_nothing(store):
    """Appending no records writes no file; reading a job without metrics gives nothing and keeps `since`."""
    store.append_metrics("j", [])
    assert not (store.job_dir("j") / "metrics.jsonl").exists()
    assert store.metrics("j") == ([], 0)
    assert store.metrics("j", since=7) == ([], 7)


def test_metrics_paging_with_limit(store):
    """With a limit, each page stops at `limit` records and `next` points just past the last one returned."""
    store.append_metrics("j", [{"i": i} for i in range(5)])
    pages, since = [], 0
    while True:
        records, since_next = store.metrics("j", since=since, limit=2)
        if not records:
            assert since_next == since == 5
            break
        pages.append(([r["i"] for r in records], since_next))
        since = since_next
    assert pages == [([0, 1], 2), ([2, 3], 4), ([4], 5)]


def test_metrics_limit_larger_than_available(store):
    """A limit beyond what is written returns everything once."""
    store.append_metrics("j", [{"i": 0}, {"i": 1}])
    assert store.metrics("j", limit=100) == ([{"i": 0}, {"i": 1}], 2)


def test_metrics_since_past_the_end_is_kept(store):
    """Asking from beyond the end (a reader ahead of a truncated file) returns nothing and never goes backwards."""
    store.append_metrics("j", [{"i": 0}])
    assert store.metrics("j", since=10) == ([], 10)


def test_metrics_half_written_last_line_waits(store):
    """A last line still being written (no newline yet) is left for the next call, then read whole."""
    store.append_metrics("j", [{"i": 0}, {"i": 1}])
    path = store.job_dir("j") / "metrics.jsonl"
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"i": 2, "lo')
    assert store.metrics("j") == ([{"i": 0}, {"i": 1}], 2)
    assert store.metrics("j", since=2) == ([], 2)
    with open(path, "a", encoding="utf-8") as f:
        f.write('ss": 0.5}\n')
    assert store.metrics("j", since=2) == ([{"i": 2, "loss": 0.5}], 3)


def test_metrics_only_a_half_written_line(store):
    """A file holding just a partial first line reads as empty with next line 0."""
    store.job_dir("j").mkdir(parents=True)
    (store.job_dir("j") / "metrics.jsonl").write_text('{"i": 0')
    assert store.metrics("j") == ([], 0)


def test_metrics_blank_lines_skipped_but_counted(store):
    """Blank lines are skipped, yet line numbers stay file lines, so `next` is stable across calls."""
    store.job_dir("j").mkdir(parents=True)
    (store.job_dir("j") / "metrics.jsonl").write_text('{"i": 0}\n\n   \n{"i": 1}\n\n')
    assert store.metrics("j") == ([{"i": 0}, {"i": 1}], 5)
    assert store.metrics("j", since=1) == ([{"i": 1}], 5)
    assert store.metrics("j", since=1, limit=1) == ([{"i": 1}], 4)


# ------------------------------------------------------------------------------------------------------- logs
def test_logs_per_rank_and_stream(store):
    """Each rank's stdout and stderr are kept apart and read back as written."""
    store.write_logs("j", {0: "r0 out\n", 1: "r1 out\n"})
    store.write_logs("j", {1: "r1 err\n"}, stream="stderr")
    assert store.logs("j") == "r0 out\n"
    assert store.logs("j", rank=1) == "r1 out\n"
    assert store.logs("j", rank=1, stream="stderr") == "r1 err\n"
    assert store.logs("j", rank=0, stream="stderr") == ""
    assert store.logs("j", rank=5) == ""
    assert store.logs("missing") == ""


def test_write_logs_replaces_the_file(store):
    """write_logs writes the whole text so far: a second write replaces the first, it does not append."""
    store.write_logs("j", {0: "a\n"})
    store.write_logs("j", {0: "a\nb\n"})
    assert store.logs("j") == "a\nb\n"


def test_logs_tail(store):
    """tail=N returns the last N lines (all of them when there are fewer)."""
    store.write_logs("j", {0: "".join(f"line {i}\n" for i in range(10))})
    assert store.logs("j", tail=3) == "line 7\nline 8\nline 9\n"
    assert store.logs("j", tail=1) == "line 9\n"
    assert store.logs("j", tail=50).count("\n") == 10
    assert store.logs("j", tail=0) == ""


def test_logs_untag_native_lines(store):
    """Lines native code wrote (tagged on the engine) are kept in the log as plain lines."""
    store.write_logs("j", {0: f"python\n{NATIVE_TAG}E0000 gloo said no\n"}, stream="stderr")
    assert store.logs("j", stream="stderr") == "python\nE0000 gloo said no\n"


def test_log_ranks_sorted_numerically(store):
    """log_ranks lists each rank with a log once, in numeric order (10 after 2), across streams."""
    assert store.log_ranks("j") == []
    store.write_logs("j", {10: "x", 2: "y", 0: "z"})
    store.write_logs("j", {2: "e", 3: "e"}, stream="stderr")
    assert store.log_ranks("j") == [0, 2, 3, 10]


# ----------------------------------------------------------------------------------------------------- cancel
def test_cancel_request_with_source(store):
    """A cancel for a running job in a live kernel leaves the request, with where it came from, for the kernel."""
    job = make_job(kernel_pid=os.getpid())
    job.transition("running")
    store.save(job)
    assert store.cancel_requested(job.id) is False
    assert store.cancel_source(job.id) is None
    returned = store.request_cancel(job.id, source="the jobs panel")
    assert returned.state == "running"
    assert store.cancel_requested(job.id) is True
    assert store.cancel_source(job.id) == "the jobs panel"
    assert store.load(job.id).state == "running"  # the kernel, not the store, stops it


def test_cancel_source_is_one_short_line(store):
    """A source is kept as its first line, stripped, at most 120 characters."""
    job = make_job()
    store.save(job)
    store.request_cancel(job.id, source="  %dl_jobs cancel  \nsecond line")
    assert store.cancel_source(job.id) == "%dl_jobs cancel"
    store.request_cancel(job.id, source="x" * 500)
    assert store.cancel_source(job.id) == "x" * 120


def test_cancel_without_source(store):
    """A cancel with no source is still a cancel; its source reads as None."""
    job = make_job()
    store.save(job)
    store.request_cancel(job.id)
    assert (store.job_dir(job.id) / CANCEL_FILE).read_text() == ""
    assert store.cancel_requested(job.id) is True
    assert store.cancel_source(job.id) is None


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled", "lost"])
def test_cancel_of_finished_job_is_a_no_op(store, state):
    """Cancelling a finished job leaves no request behind and does not change its state."""
    job = make_job()
    job.transition(state)
    store.save(job)
    assert store.request_cancel(job.id, source="panel").state == state
    assert store.cancel_requested(job.id) is False
    assert store.load(job.id).state == state


def test_cancel_with_dead_kernel_marks_lost(store, dead_pid):
    """Nobody would read a cancel for a job whose kernel is gone: the job is marked lost at once instead."""
    job = make_job(kernel_pid=dead_pid)
    job.transition("running")
    store.save(job)
    returned = store.request_cancel(job.id, source="panel")
    assert (returned.state, returned.error) == ("lost", "its kernel is gone")
    loaded = store.load(job.id)
    assert (loaded.state, loaded.error) == ("lost", "its kernel is gone")
    assert "lost" in loaded.timestamps
    assert store.cancel_requested(job.id) is False


def test_cancel_on_other_host_is_left_for_that_host(store, dead_pid):
    """A kernel on another host cannot be checked from here: the request is written, the job is not marked lost."""
    job = make_job(kernel_pid=dead_pid, kernel_host=socket.gethostname() + "-elsewhere")
    job.transition("running")
    store.save(job)
    assert store.request_cancel(job.id).state == "running"
    assert store.cancel_requested(job.id) is True


# ---------------------------------------------------------------------------------------------------- reaping
def test_reap_lost(store, dead_pid):
    """Unfinished jobs whose kernel died are marked lost (and saved); live, finished and remote ones are left alone."""
    dead = make_job(name="dead", kernel_pid=dead_pid)
    dead.transition("running")
    queued_dead = make_job(name="queued-dead", kernel_pid=dead_pid)
    alive = make_job(name="alive", kernel_pid=os.getpid())
    alive.transition("running")
    done = make_job(name="done", kernel_pid=dead_pid)
    done.transition("succeeded")
    remote = make_job(name="remote", kernel_pid=dead_pid, kernel_host="no-such-host.invalid")
    remote.transition("running")
    for job in (dead, queued_dead, alive, done, remote):
        store.save(job)

    lost = store.reap_lost()
    assert sorted(j.name for j in lost) == ["dead", "queued-dead"]
    states = {j.name: (j.state, j.error) for j in store.list()}
    assert states == {
        "dead": ("lost", "its kernel stopped while the job ran"),
        "queued-dead": ("lost", "its kernel stopped while the job ran"),
        "alive": ("running", None),
        "done": ("succeeded", None),
        "remote": ("running", None),
    }
    assert store.reap_lost() == []  # lost is final: a second pass marks nothing


def test_reap_lost_given_jobs_only(store, dead_pid):
    """reap_lost(jobs) looks at those jobs only, not at everything in the store."""
    a = make_job(name="a", kernel_pid=dead_pid)
    b = make_job(name="b", kernel_pid=dead_pid)
    store.save(a)
    store.save(b)
    assert [j.name for j in store.reap_lost([a])] == ["a"]
    assert store.load(a.id).state == "lost"
    assert store.load(b.id).state == "queued"


# ------------------------------------------------------------------------------------------- listing, records
def test_list_and_records_oldest_first(store):
    """records() is every job.json as a dict, oldest first by `created`; list() the same as Jobs."""
    now = time.time()
    jobs = [make_job(name=name, created=now - age) for name, age in (("mid", 20), ("new", 0), ("old", 40))]
    for job in jobs:
        store.save(job)
    assert [r["name"] for r in store.records()] == ["old", "mid", "new"]
    listed = store.list()
    assert [j.name for j in listed] == ["old", "mid", "new"]
    assert listed == sorted(jobs, key=lambda j: j.created)


def test_records_empty_or_missing_root(tmp_path):
    """No root directory yet means no jobs, not an error."""
    assert JobStore(root=str(tmp_path / "absent")).records() == []
    assert JobStore(root=str(tmp_path)).list() == []


def test_records_skip_incomplete_and_corrupt(store):
    """A directory without job.json (being created) or with unreadable JSON is skipped, not fatal."""
    good = make_job(name="good")
    store.save(good)
    store.append_metrics("metrics-only", [{"i": 0}])
    store.job_dir("corrupt").mkdir()
    (store.job_dir("corrupt") / "job.json").write_text('{"name": ')
    assert [r["name"] for r in store.records()] == ["good"]


def test_records_follow_changes_and_removals(store):
    """The records cache re-reads a changed job.json and forgets a removed job."""
    import shutil

    a, b = make_job(name="a"), make_job(name="b", created=time.time() + 1)
    store.save(a)
    store.save(b)
    assert [r["state"] for r in store.records()] == ["queued", "queued"]
    a.transition("running")
    store.save(a)
    assert [(r["name"], r["state"]) for r in store.records()] == [("a", "running"), ("b", "queued")]
    shutil.rmtree(store.job_dir(b.id))
    assert [r["name"] for r in store.records()] == ["a"]
    assert set(store._records) == {a.id}


def test_records_see_same_size_rewrite_within_one_timestamp_tick(store):
    """A progress update that keeps job.json's size and lands in the same mtime tick must still be seen."""
    from jupyter_dl.jobs.store import _atomic_write

    job = make_job(progress={"fraction": 0.25})
    store.save(job)
    path = store.job_dir(job.id) / "job.json"
    before = os.stat(path)
    assert store.records()[0]["progress"] == {"fraction": 0.25}
    # Rewritten as every save writes it (a new file renamed over the old), with a change of the same length: a
    # real save also rewrites `elapsed`, whose length varies, so it cannot stage this case reliably.
    text = path.read_text()
    assert text.count("0.25") == 1
    _atomic_write(path, text.replace("0.25", "0.75"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same tick, as a coarse clock would give
    assert os.stat(path).st_size == before.st_size
    assert store.records()[0]["progress"] == {"fraction": 0.75}


# ------------------------------------------------------------------------------------------------------ prune
def test_prune_by_age(tmp_path):
    """Finished jobs older than retention_days are deleted; unfinished ones are kept however old."""
    store = JobStore(root=str(tmp_path), retention_days=30)
    old = time.time() - 40 * 86400
    old_done = make_job(name="old-done", created=old)
    old_done.transition("failed")
    old_running = make_job(name="old-running", created=old)
    old_running.transition("running")
    recent_done = make_job(name="recent-done")
    recent_done.transition("succeeded")
    for job in (old_done, old_running, recent_done):
        store.save(job)
        store.append_metrics(job.id, [{"i": 0}])
    assert store.prune() == 1
    assert sorted(j.name for j in store.list()) == ["old-running", "recent-done"]
    assert not store.job_dir(old_done.id).exists()  # metrics and logs go with it


def test_prune_by_count_keeps_newest(tmp_path):
    """Beyond max_jobs finished jobs, the oldest finished ones go; running jobs do not count."""
    store = JobStore(root=str(tmp_path), max_jobs=2)
    now = time.time()
    for i in range(4):
        job = make_job(name=f"done{i}", created=now - 100 + i)
        job.transition("succeeded")
        store.save(job)
    running = make_job(name="running", created=now - 1000)
    running.transition("running")
    store.save(running)
    assert store.prune() == 2
    assert [j.name for j in store.list()] == ["running", "done2", "done3"]
    assert store.prune() == 0


def test_prune_nothing_to_do(tmp_path):
    """With every job recent and under the count, prune deletes nothing."""
    store = JobStore(root=str(tmp_path))
    job = make_job()
    job.transition("cancelled")
    store.save(job)
    assert store.prune() == 0
    assert store.load(job.id).state == "cancelled"
