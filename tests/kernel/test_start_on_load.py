"""`%load_ext jupyter_dl` typed in a cell starts the local cluster in the background (c.EngineCluster.start_on_load),
in a real kernel: the first job takes that cluster, %dl_cluster start takes it or replaces it, %dl_cluster stop and
the kernel's exit end it even while it starts; a kernel that loads the extension from its config starts nothing, and
neither does one with the trait off."""

import re
import time

import psutil
from real_kernel import cluster_processes, fresh_kernel, launched_engines, run

FIRST_CELL = "%%distribute -n 2 --manual\nprint('hello from rank', 0)\n"
RUNNING = re.compile(r"cluster (\S+) \(started here\): (\d+) engines on")


def _ok(client, code):
    status, text = run(client, code)
    assert status == "ok", text
    return text


def _running(client, timeout=240):
    """(cluster id, engines) once %dl_cluster status says the cluster runs; it says so only after every engine
    registered. Polled: how long a start takes depends on the machine, not on what is tested."""
    deadline = time.monotonic() + timeout
    while True:
        text = _ok(client, "%dl_cluster status")
        found = RUNNING.search(text)
        if found:
            return found.group(1), int(found.group(2))
        assert "starting in the background" in text, text  # nothing else may show while it starts
        assert time.monotonic() < deadline, text
        time.sleep(0.5)


def _gone(procs, timeout=30):
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [(p.pid, p.name()) for p in alive]


def _nothing_started(client, pid):
    assert "no cluster" in _ok(client, "%dl_cluster status")  # also: the extension is loaded
    threads = _ok(client, "import threading; print(sorted(t.name for t in threading.enumerate()))")
    assert "jdl-start-on-load" not in threads, threads
    assert cluster_processes(pid) == []


def test_a_load_from_a_cell_starts_the_cluster_the_first_cell_runs_on():
    with fresh_kernel() as (client, pid, _):
        assert _ok(client, "%load_ext jupyter_dl") == ""  # nothing to read on load, no traceback
        assert "starting in the background" in _ok(client, "%dl_cluster status")  # the load returned before it
        cluster_id, engines = _running(client)  # registered before any job was sent
        assert engines == 2
        # %dl_cluster start with the options it was started with takes it as it is
        assert f"cluster {cluster_id} (started here): 2 engines" in _ok(client, "%dl_cluster start")
        shown = _ok(client, FIRST_CELL)
        assert "hello from rank 0" in shown and "started a local cluster" not in shown, shown
        assert f"cluster {cluster_id} (started here): 2 engines" in _ok(client, "%dl_cluster status")


def test_the_first_cell_right_after_the_load_waits_for_that_cluster():
    with fresh_kernel() as (client, pid, _):
        _ok(client, "%load_ext jupyter_dl")
        shown = _ok(client, FIRST_CELL)  # no pause: the cluster is still starting
        assert "started a local cluster: 2 engines (CPU) when jupyter-dl loaded" in shown, shown
        assert shown.count("started a local cluster") == 1, shown  # that one, not a second one
        assert "hello from rank 0" in shown


def test_a_load_from_config_starts_nothing():
    with fresh_kernel("--InteractiveShellApp.extensions=jupyter_dl") as (client, pid, _):
        _nothing_started(client, pid)
        assert "already loaded" in _ok(client, "%load_ext jupyter_dl")  # and a later load in a cell is no load
        _nothing_started(client, pid)


def test_the_trait_off_starts_nothing():
    with fresh_kernel("--EngineCluster.start_on_load=False") as (client, pid, _):
        _ok(client, "%load_ext jupyter_dl")
        _nothing_started(client, pid)


def test_start_with_other_options_replaces_the_early_cluster():
    with fresh_kernel() as (client, pid, _):
        _ok(client, "%load_ext jupyter_dl")
        early_id, _engines = _running(client)
        early = cluster_processes(pid)
        assert launched_engines(early) == 2
        shown = _ok(client, "%dl_cluster start -n 3")
        found = RUNNING.search(shown)
        assert found and found.group(1) != early_id and found.group(2) == "3", shown
        assert _gone(early) == []
        assert "hello from rank 0" in _ok(client, FIRST_CELL)


def test_stop_while_it_starts_leaves_no_process():
    with fresh_kernel() as (client, pid, _):
        _ok(client, "%load_ext jupyter_dl")
        shown = _ok(client, "%dl_cluster status\n%dl_cluster stop")
        assert "starting in the background" in shown and shown.endswith("cluster stopped"), shown
        deadline = time.monotonic() + 60
        while cluster_processes(pid):
            assert time.monotonic() < deadline, [p.cmdline() for p in cluster_processes(pid)]
            time.sleep(0.2)
        assert "no cluster" in _ok(client, "%dl_cluster status")


def test_the_kernels_exit_while_it_starts_leaves_no_process():
    with fresh_kernel() as (client, pid, manager):
        _ok(client, "%load_ext jupyter_dl")
        deadline = time.monotonic() + 120
        while launched_engines(cluster_processes(pid)) < 2:
            assert time.monotonic() < deadline, "the engines never started"
            time.sleep(0.1)
        started = cluster_processes(pid)
        manager.shutdown_kernel(now=False)  # as JupyterLab's shutdown: the kernel exits by itself
        assert _gone(started) == []


def test_a_failed_early_start_is_one_line_once():
    # Engines cannot register within a millisecond: the early start fails (and stops what it started).
    with fresh_kernel("--EngineCluster.start_timeout=0.001") as (client, pid, _):
        assert _ok(client, "%load_ext jupyter_dl") == ""  # no traceback on load
        deadline = time.monotonic() + 120
        while "starting in the background" in (shown := _ok(client, "%dl_cluster status")):
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        told, status = sorted(shown.splitlines())  # stderr's line and stdout's, in whichever order they came
        assert told.startswith("[jupyter-dl] the local cluster started when jupyter-dl loaded failed (only "), shown
        assert status.startswith("no cluster"), shown
        assert _ok(client, "%dl_cluster status").startswith("no cluster")  # told once
