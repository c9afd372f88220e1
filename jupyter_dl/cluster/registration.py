"""Kernel side: waiting for a cluster's engines to register, after a scheduler's queue where there is one.

Not ipyparallel's `Client.wait_for_engines`: that counts every registered id and fails when an engine unregisters or
an engine set stops while it waits, which is exactly what happens when killed engines are being replaced (their ids
linger, their sets stop); here the count is of live engines, and the wait says why a scheduler holds them."""

import sys
import time


def wait_for_engines(n, *, count, queued, launcher, start_timeout, queue_timeout, progress=None, detail=str):
    """Until count() reaches n. While queued() says why a scheduler holds the engines ('' once they run), the wait
    is shown and bounded by queue_timeout (0: unbounded); start_timeout counts from when the scheduler runs them.
    progress(text), when given, hears each new count of registered engines, with what detail() adds."""
    queued_since = running_since = checked = time.monotonic()
    why = queued()
    shown = ""
    told = ""
    while count() < n:
        now = time.monotonic()
        text = f"starting the cluster: {count()}/{n} engines registered{detail()}"
        if progress is not None and text != told:
            told = text
            progress(text)
        if now - checked >= 1.0:  # the scheduler is asked (squeue) once a second, not at every poll
            why, checked = queued(), now
        if why:
            running_since = now
            if why != shown:
                shown = why
                _say_queued(launcher, n, why)
            if queue_timeout and now - queued_since > queue_timeout:
                raise TimeoutError(f"{launcher} did not allocate {n} engines within {queue_timeout:.0f}s ({why})")
        elif now - running_since > start_timeout:
            raise TimeoutError(f"only {count()} of {n} engines registered within {start_timeout:.0f}s")
        time.sleep(0.1)


def _say_queued(launcher, n, why):
    print(
        f"[jupyter-dl] waiting for {launcher} to allocate {n} engines at once ({why}); interrupt the kernel to give up",
        file=sys.stderr,
        flush=True,
    )
