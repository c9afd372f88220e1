"""Where a rank was when it had to be killed: an engine that does not leave a job within the stop grace is stuck,
usually in native code (a collective waiting on a peer that is gone) where no interrupt reaches it. Before killing
it, the kernel sends it SIGUSR1; faulthandler (set up on every engine) writes every thread's stack to a file named
by the engine's pid. Faulthandler works at the C level, so it writes even while a stuck thread holds the GIL.
The kill's message names the file, on the engine's host."""

import atexit
import contextlib
import faulthandler
import os
import signal
import tempfile

SIGNAL = signal.SIGUSR1
WRITE_S = 1.0  # how long the kernel waits between the request and the kill: a dump takes milliseconds
_OPEN: list = []  # the file faulthandler writes to (it must stay open)


def path_for(pid: int) -> str:
    """The stack file of engine process `pid` on its host (only its user can read the folder)."""
    return os.path.join(tempfile.gettempdir(), f"jupyter-dl-stacks-{os.getuid()}", f"engine-{pid}.txt")


def enable():
    """On an engine, once: dump every thread's stack to path_for(this pid) when SIGUSR1 arrives."""
    if _OPEN:
        return
    path = path_for(os.getpid())
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        dump = open(path, "w")  # noqa: SIM115  (held open for faulthandler for the engine's life)
    except OSError:  # no writable temp folder: the engine works all the same, its kill just names no file
        return
    _OPEN.append(dump)
    faulthandler.register(SIGNAL, file=dump, all_threads=True, chain=False)
    atexit.register(_remove_if_empty, path)  # an engine that ends well leaves nothing behind; a killed one its stacks


def _remove_if_empty(path):
    with contextlib.suppress(OSError):
        if os.path.getsize(path) == 0:
            os.remove(path)
