"""Servers and kernels a test starts die with the pytest that started them, even when it is killed (SIGKILL, a CI
timeout): a leftover JupyterLab, hub or busy kernel would load the machine for the next run and make its timings
lie. Linux's parent-death signal does it without any cleanup code having to run."""

import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_pytest():
    """A subprocess.Popen preexec_fn: this child gets SIGKILL when its parent (pytest) exits."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
