"""Kernel side: the embedded local cluster started in a thread (c.EngineCluster.start_on_load), so its engines
register and import TensorFlow while the user is still typing the first %%distribute cell.

The thread starts a cluster object of its own and nothing else touches it while the thread runs; the kernel's
EngineCluster adopts it (or stops it) from the main thread, once the thread is over (see EngineCluster._settle).
That way no ipyparallel client or launcher is ever used from two threads at once.
"""

import threading
import time

STARTING = "starting the cluster"


class Cancelled(Exception):
    """Raised inside the starting thread when the kernel asked to stop the cluster while it was starting."""


class BackgroundStart:
    def __init__(self, cluster, n: int, request: tuple):
        self.cluster = cluster  # an EngineCluster of its own; only the thread uses it until it is over
        self.n = n
        self.request = request  # what it was started as, (engines, launcher, GPUs): %dl_cluster start compares
        self.stage = f"{STARTING}: {n} engine{'' if n == 1 else 's'}"  # the newest stage, for a waiting cell
        self.error: BaseException | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="jdl-start-on-load")
        self._thread.start()

    def _run(self):
        try:
            self.cluster.start(n=self.n, progress=self._heard)
            if self._cancel.is_set():  # asked after the last engine registered: nobody will adopt this one
                raise Cancelled("stopped while starting")
        except BaseException as exc:  # the next jupyter-dl command reports it, in one line
            self.error = exc
            self.cluster.stop()  # start() stops what it started when it fails; this covers the cancel above

    def _heard(self, text):
        # Called by the engines' registration wait at each new count: the place a start can be cut short (start()
        # then stops the engines and controller it started).
        if self._cancel.is_set():
            raise Cancelled("stopped while starting")
        self.stage = text

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    @property
    def cancelled(self) -> bool:
        return isinstance(self.error, Cancelled)

    def wait(self, progress=None, timeout=None):
        """Until the thread is over (or `timeout` s); progress(text) hears each new stage meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        told = None
        while self._thread.is_alive() and (deadline is None or time.monotonic() < deadline):
            if progress is not None and self.stage != told:
                told = self.stage
                progress(told)
            self._thread.join(0.1)

    def cancel(self, timeout: float):
        """Stop the start and everything it started. Waits up to `timeout` s; a thread still starting after that
        stops what it started itself once start() returns (nothing is stopped from two threads at once)."""
        self._cancel.set()
        self.wait(timeout=timeout)
        if self.done and self.error is None:  # it had got through before the cancel: its cluster is ours to stop
            self.error = Cancelled("stopped after it started")
            self.cluster.stop()
