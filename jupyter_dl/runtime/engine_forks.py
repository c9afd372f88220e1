"""Engine host: the fork server of a local cluster (c.EngineCluster.fork_engines). It imports TensorFlow, Keras,
Horovod and the engine's own code once, then forks one engine per request from forked_engine.py. Each engine
starts with all of that already imported (a fresh engine spends ~7 s of CPU importing it; two engines on two
cores wait for both imports), and the pages of those modules stay shared between the engines.

Forking is safe here because nothing has run yet: TensorFlow starts its thread pools and devices at the first op,
Horovod at hvd.init, ipyparallel its sockets when the engine starts; all of that happens in the child. The server
checks that it has no Python thread before it forks, and serves no fork otherwise (the engines then start plain).

    python -m jupyter_dl.runtime.engine_forks SOCKET KERNEL_PID NICENESS
"""

import atexit
import contextlib
import importlib
import io
import os
import signal
import socket
import struct
import sys
import threading
import traceback

from jupyter_dl.host.processes import pid_running
from jupyter_dl.runtime.forked_engine import Messages, send_message

# What every engine imports before its first job (ipyparallel's engine, our rank code, and what the backends'
# preload() imports); each is optional: an engine imports what is missing itself and reports what fails.
HEAD_START = (
    "ipyparallel.engine.app",
    "horovod.tensorflow",
    "tensorflow",
    "keras",
    "keras.src.optimizers.base_optimizer",
    "keras.src.trainers.trainer",
    "jupyter_dl.runtime.rank",
)
KERNEL_CHECK_SECONDS = 1.0  # how often the server looks whether the kernel that started it is still there


def serve(path: str, kernel_pid: int, niceness: int = 0):
    """Fork engines for the requests that arrive on `path` until the kernel `kernel_pid` is gone (or a signal)."""
    if niceness:
        os.nice(niceness)  # the engines would take it anyway (rank.describe); the notebook's own import goes first
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # first, so that engines asking while the imports run wait in the backlog, not retry
    listener.listen(64)
    _import_head_start()
    with open(path + ".ready", "w"):  # for the kernel's "which stage" line (cluster/fork_server.py)
        pass
    can_fork = threading.active_count() == 1
    if not can_fork:
        print(f"[jupyter-dl] fork server: {threading.active_count()} threads after imports; engines start plain")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # engines are reaped as they end; none is waited for here
    listener.settimeout(KERNEL_CHECK_SECONDS)
    while pid_running(kernel_pid):
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(10.0)
        try:
            request, fds = Messages(conn).next(max_fds=3)
        except OSError:
            conn.close()
            continue
        if request is not None and can_fork and len(fds) == 3 and _same_user(conn):
            _fork_engine(listener, conn, request, fds)
        for fd in fds:
            os.close(fd)
        conn.close()  # the engine holds its own copy; a stand-in whose request was not served starts a plain engine
    listener.close()
    _remove_folder(path)


def _remove_folder(path: str):
    """The kernel is gone without stopping this server (killed, or restarted from the notebook's menu), so nobody
    else removes the folder it made for the socket: each such kernel left one in the temp folder. Only the files the
    server and the kernel put there go, then the folder if that emptied it (never a folder with anything else)."""
    folder = os.path.dirname(path)
    for name in (path, path + ".ready", os.path.join(folder, "server.log")):
        with contextlib.suppress(OSError):
            os.unlink(name)
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def _fork_engine(listener, conn, request, fds):
    try:
        child = os.fork()
    except OSError as exc:  # out of processes or memory: that stand-in starts a plain engine (and likely says why)
        print(f"[jupyter-dl] fork server: cannot fork ({exc})", flush=True)
        return
    if child == 0:
        _run_engine(listener, conn, request, fds)  # never returns


def _import_head_start():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Keras imports matplotlib's pyplot, which takes its backend from the environment once. Every engine's ipykernel
    # makes the inline one the default before anything imports matplotlib; so must we, or a rank's figures are lost.
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    for name in HEAD_START:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: S112  (the engine imports it again and reports what is wrong, in its job)
            continue


def _same_user(conn: socket.socket) -> bool:
    """The socket's folder is the user's own (0700); this also refuses a peer of another user that got through."""
    if not hasattr(socket, "SO_PEERCRED"):  # Linux's; elsewhere the folder's permissions are the check
        return True
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.getuid()


# ------------------------------------------------------------------------------------------ in the child
def _run_engine(listener, conn, request: dict, fds: list):
    """Become the engine the stand-in asked for: its stdio, environment and folder, an ordinary engine from there."""
    code = 1
    try:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the engine waits for its own children (the nanny)
        os.setsid()  # as ipyparallel starts engines: signals to the kernel's or the server's group do not reach it
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        if os.environ.get("PYTHONUNBUFFERED") and isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(line_buffering=True, write_through=True)
        _reseed()
        conn.settimeout(None)
        threading.Thread(target=_end_with_stand_in, args=(conn,), daemon=True, name="jdl-stand-in").start()
        send_message(conn, {"pid": os.getpid()})
        sys.argv = ["ipengine", *request["args"]]
        from ipyparallel.engine.app import main

        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        _exit(conn, code)


def _reseed():
    """A forked child starts with its parent's random state; Python's `random` reseeds itself, NumPy does not."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _end_with_stand_in(conn):
    """The stand-in never writes after its request: the connection closing means it is gone (stopped, killed), and
    an engine nobody watches would be an orphan."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _exit(conn, code):
    """Exit as a plain engine would (atexit handlers, flushed output), after telling the stand-in the code."""
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        send_message(conn, {"exit": code})
    finally:
        os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
