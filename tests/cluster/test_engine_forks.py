"""The embedded local cluster's CPU engines come from one fork server that imported TensorFlow once
(EngineCluster.fork_engines): ipyparallel still starts, watches and stops each engine through the small process
that stands in for it, and a dead engine's replacement forks instead of importing TensorFlow again. Real engines,
a real fork server, real signals."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from ipyparallel import interactive

from jupyter_dl.cluster.fork_server import ForkServer
from jupyter_dl.runtime.forked_engine import Messages, send_message


@interactive  # sent by value: the engines cannot import this test module
def _who():
    import os
    import sys

    import numpy as np

    return {
        "pid": os.getpid(),
        "parent": os.getppid(),
        "imported": "tensorflow" in sys.modules and "keras" in sys.modules,
        "draw": float(np.random.rand()),
        "quiet": os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
        "connection": "IPP_CONNECTION_INFO" in os.environ,
    }


def _until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _stand_ins(cluster):
    return [
        launcher.pid for engine_set in cluster.cluster.engines.values() for launcher in engine_set.launchers.values()
    ]


def test_engines_fork_from_one_server_and_end_with_what_stands_in_for_them():
    from jupyter_dl.cluster.engines import EngineCluster

    cluster = EngineCluster()
    cluster.start(n=2)
    try:
        server = cluster._forks
        ids = cluster.engine_ids()
        first = cluster.client[ids].apply_sync(_who)
        # Both engines are the server's children, TensorFlow already imported; each as a launched engine would be:
        # its own random draws, the launcher's environment (the controller's address) and the cluster's.
        assert {who["parent"] for who in first} == {server.pid}, first
        assert all(who["imported"] and who["connection"] and who["quiet"] == "2" for who in first), first
        assert first[0]["draw"] != first[1]["draw"], first

        # An engine killed: the process ipyparallel launched for it ends too, and its replacement is forked.
        stand_ins = _stand_ins(cluster)
        os.kill(first[0]["pid"], signal.SIGKILL)
        _until(lambda: not all(_running(pid) for pid in stand_ins))
        (other_stand_in,) = [pid for pid in stand_ins if _running(pid)]  # engine 1's
        cluster.replace_dead([ids[0]])
        cluster.ensure(2)
        live = cluster.engine_ids()
        replacement = cluster.client[[i for i in live if i != ids[1]]].apply_sync(_who)[0]
        assert replacement["parent"] == server.pid and replacement["imported"], replacement

        # The process standing in for an engine killed (the launcher's last resort): the engine ends with it.
        os.kill(other_stand_in, signal.SIGKILL)
        _until(lambda: not _running(first[1]["pid"]))
    finally:
        cluster.stop()
    # Stopping the cluster ends the server and removes its socket's folder.
    _until(lambda: not _running(server.pid))
    assert not os.path.exists(server.directory)
    assert not _running(replacement["pid"])


def _run_stand_in(socket_path):
    """The stand-in as the launcher runs it, asking for an engine that prints its help and exits."""
    command = [sys.executable, "-m", "jupyter_dl.runtime.forked_engine", socket_path, "--help"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("server_running", [True, False])
def test_the_engine_writes_to_the_stand_in_s_output_and_a_dead_server_leaves_a_plain_engine(server_running):
    server = ForkServer({"TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        if not server_running:
            server.process.kill()
            server.process.wait()
        done = _run_stand_in(server.socket_path)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "IPEngine" in done.stdout  # the engine's own help, on the stand-in's stdout (passed to the fork)
    fell_back = "the engine fork server is not running; starting a plain engine" in done.stderr
    assert fell_back == (not server_running), done.stderr[-2000:]


def test_a_server_whose_kernel_is_gone_ends_and_removes_its_folder():
    """A kernel killed (a restart from the notebook's menu kills it) cannot stop its fork server: the server sees the
    kernel gone, ends, and removes its folder, which every such kernel used to leave in the temp folder."""
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    folder = tempfile.mkdtemp(prefix="jdl-engines-")  # as ForkServer makes it, with the server's log in it
    socket_path = os.path.join(folder, "forks.sock")
    with open(os.path.join(folder, "server.log"), "ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter_dl.runtime.engine_forks", socket_path, str(kernel.pid)],
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _until(lambda: os.path.exists(socket_path + ".ready"), timeout=120)  # imported, serving
        kernel.kill()
        kernel.wait()
        assert server.wait(30) == 0
    finally:
        kernel.kill()
        server.kill()
    assert not os.path.exists(folder)


@pytest.mark.fast
def test_messages_arrive_whole_and_in_order_however_the_reads_cut_them():
    """An engine that exits at once sends its pid and its exit code in one read; an environment may take several."""
    left, right = socket.socketpair()
    with left, right, open(os.devnull) as extra:
        big = {"env": {"K": "v" * 300_000}}  # more than the socket holds: the sender waits for the reader

        def send():
            send_message(left, big, fds=[extra.fileno()])
            send_message(left, {"pid": 7})
            send_message(left, {"exit": 3})
            left.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        messages = Messages(right)
        first, fds = messages.next(max_fds=3)
        assert first == big and len(fds) == 1
        os.close(fds[0])
        assert messages.next()[0] == {"pid": 7}
        assert messages.next()[0] == {"exit": 3}
        assert messages.next()[0] is None
        sender.join()
