"""Engine host: what ipyparallel's local launcher starts for each engine when engines are forked
(c.EngineCluster.fork_engines). A small process, standard library only, that asks the host's fork server
(engine_forks.py) for an engine and then stands in for it: the launcher's signals reach the engine, the engine's
end ends this process, and this process's end (even by SIGKILL) ends the engine. So ipyparallel starts, watches and
stops engines exactly as before, while TensorFlow was imported once, in the fork server, not once per engine.

If the fork server cannot be reached, this process becomes an ordinary engine (it execs one): a fork server that
died costs the next engine its head start, never the engine.

    python -m jupyter_dl.runtime.forked_engine SOCKET [ipengine arguments...]
"""

import array
import json
import os
import signal
import socket
import sys
import time

PLAIN_ENGINE = ["-m", "ipyparallel.engine"]  # what ipyparallel's local launcher runs by default
CONNECT_SECONDS = 10.0  # the fork server binds its socket before it imports anything: it is there at once or never
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
LOST_STAND_IN = 128 + signal.SIGKILL  # the engine's exit code when the process standing in for it is gone


# ------------------------------------------------------------------------------------- messages, both ends
def send_message(conn: socket.socket, message: dict, fds=()):
    """One JSON message, newline-terminated, with file descriptors alongside (SCM_RIGHTS) where given."""
    data = (json.dumps(message) + "\n").encode()
    sent = conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]) if fds else 0
    conn.sendall(data[sent:])  # a large environment may not fit in one send


class Messages:
    """The messages arriving on one connection, in order. A read may hold more than one (an engine that exits at
    once sends its pid and its exit code together) or part of one (a large environment)."""

    def __init__(self, conn: socket.socket):
        self.conn = conn
        self.buffer = b""

    def next(self, max_fds=0):
        """(message, file descriptors that came with it); (None, ...) once the other end closed."""
        fds = array.array("i")
        while b"\n" not in self.buffer:
            size = socket.CMSG_LEN(max_fds * fds.itemsize) if max_fds else 0
            data, ancillary, _flags, _addr = self.conn.recvmsg(65536, size)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
            if not data:
                return None, list(fds)
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line), list(fds)


# ----------------------------------------------------------------------------------------- the stand-in
def _connect(path: str):
    """A connection to the fork server; None when it is gone (its socket refuses) or never bound it in time."""
    deadline = time.monotonic() + CONNECT_SECONDS
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except FileNotFoundError:  # a server started a moment ago: its socket is about to exist
            conn.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        except OSError:
            conn.close()
            return None


def _become_plain_engine(engine_args):
    print("[jupyter-dl] the engine fork server is not running; starting a plain engine", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, *PLAIN_ENGINE, *engine_args])


def main(argv=None):
    path, *engine_args = sys.argv[1:] if argv is None else argv
    conn = _connect(path)
    if conn is None:
        _become_plain_engine(engine_args)
    request = {"args": engine_args, "env": dict(os.environ), "cwd": os.getcwd()}
    messages = Messages(conn)
    try:
        send_message(conn, request, fds=[0, 1, 2])
        reply, _ = messages.next()
    except OSError:
        reply = None
    if not reply or "pid" not in reply:  # the server went away before it forked, or cannot fork safely
        conn.close()
        _become_plain_engine(engine_args)
    engine_pid = reply["pid"]

    def forward(signum, _frame):
        try:
            os.kill(engine_pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    # The engine tells its exit code just before it exits; a killed engine only closes the connection.
    code = LOST_STAND_IN
    while True:
        try:
            message, _ = messages.next()
        except InterruptedError:
            continue
        except OSError:
            break
        if message is None:
            break
        code = int(message.get("exit", code))
    sys.exit(code)


if __name__ == "__main__":
    main()
