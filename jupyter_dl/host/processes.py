"""Is that process still there? One answer for the kernel, the engines, the server and the pool.

A pid alone can be reused by a new process after the old one exits; where the caller recorded the process's start
time, a process started at another time is not taken for it. A zombie (exited, not yet reaped) is not running.
Another user's process is running (we may not signal it, but it exists)."""

import psutil


def process_running(process) -> bool:
    """Whether a psutil.Process still runs (not exited, not a zombie)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_running(pid, started_at=None) -> bool:
    """Whether process `pid` on this host runs; with `started_at` (its create_time), only that same process."""
    try:
        process = psutil.Process(int(pid))
        if started_at is not None:
            # Within a second, not equal: create_time derives from the boot time, which moves when the clock is
            # stepped (NTP), and a live process must never be taken for a dead one.
            if abs(process.create_time() - float(started_at)) >= 1.0:
                return False
        return process_running(process)
    except psutil.AccessDenied:
        return True
    except (psutil.NoSuchProcess, ValueError):
        return False
