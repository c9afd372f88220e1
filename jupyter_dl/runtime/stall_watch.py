"""Engine side: notice when this rank has waited in one collective for too long, and tell the kernel where.

A stall is a rank blocked in a collective that another rank never enters (it is busy elsewhere, or entered a
different one). The blocked rank cannot be interrupted (it waits in native code), and Horovod 0.28's own stall
inspector stayed silent in our measurements with TensorFlow 2.21, so a thread samples the main thread's stack: the
same collective call still under way after `stall_s` seconds is reported once, with what it waits in and the cell
line that called it. The kernel then stops the job and reports where every rank was.
"""

import sys
import threading
import time

from jupyter_dl.runtime.job_backend import backend

FIRST_STEP_GRACE = 5  # the first compiled step waits for peers still tracing theirs: allow it 5x the time

# Bumped on every training step (by the Keras hooks and LiveMetrics) and every eager collective call: the watch treats a
# change as progress. Frame identity alone cannot tell one call from the next (frame objects are reused).
_progress = 0
_fit_steps = None  # steps since the current fit began (None: no callback tells, e.g. a --manual cell without them)


def progress():
    global _progress
    _progress += 1


def fit_started():
    global _fit_steps
    _fit_steps = 0


def step_done():
    global _fit_steps
    progress()
    if _fit_steps is not None:
        _fit_steps += 1


def waiting_in(frame):
    """(frame of the call, description, fit frame or None) when the stack is inside a collective or a compiled Keras
    training step, else None. Reads only code objects and line numbers: another thread's frame locals are not safe
    to read while it runs (a CI run lost an engine when this read the running `fit` frame's locals)."""
    innermost = frame
    depth = 0
    collective_ops = backend().COLLECTIVE_OPS
    backend_title = {"horovod": "Horovod", "tf": "TensorFlow collective"}.get(backend().NAME, backend().NAME)
    while frame is not None and depth < 60:
        code = frame.f_code
        op = collective_ops.get(code.co_name)
        if op is not None:
            return frame, f"{backend_title} {op}", None
        if "/keras/src/" in code.co_filename.replace("\\", "/"):
            # The innermost Keras frame: the train function `fit` calls (TF trainer), which holds the gradient
            # allreduce. A validation step (`evaluate` under fit) has no collective in it.
            caller = frame.f_back
            in_fit = code.co_name == "fit" or (
                code.co_name == "function" and caller is not None and caller.f_code.co_name == "fit"
            )
            if in_fit and innermost.f_code.co_name == "quick_execute":
                return (
                    frame,
                    "a compiled Keras training step (its gradient allreduce)",
                    frame if code.co_name == "fit" else caller,
                )
            return None
        frame = frame.f_back
        depth += 1
    return None


def cell_location(frame) -> str:
    """'cell line N: <source>' for the innermost frame of the user's cell on this stack, else ''."""
    import linecache

    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<distribute-cell"):
            source = linecache.getline(filename, frame.f_lineno).strip()
            return f"cell line {frame.f_lineno}" + (f": {source}" if source else "")
        frame = frame.f_back
    return ""


class StallWatch:
    """Samples the main thread every `interval` seconds while a job runs; `report(record)` is called once per
    stalled call."""

    def __init__(self, rank, stall_s, report, interval=0.5):
        self.rank = rank
        self.stall_s = stall_s
        self.report = report
        self.interval = min(interval, stall_s / 4) if stall_s else interval
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.stall_s:
            self._counting = backend().counting_collectives(progress)
            self._counting.__enter__()
            self._thread = threading.Thread(target=self._watch, name="jdl-stall-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._counting.__exit__(None, None, None)
        return False

    def _watch(self):
        current, since, reported = None, 0.0, False
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self._main)
            found = waiting_in(frame) if frame is not None else None
            key = (id(found[0]), found[0].f_code, _progress) if found else None
            now = time.monotonic()
            # The first compiled step of a fit: peers may still be tracing theirs.
            patience = FIRST_STEP_GRACE if found and found[2] is not None and _fit_steps == 0 else 1
            if key != current:
                current, since, reported = key, now, False
            elif found and not reported and now - since >= self.stall_s * patience:
                reported = True
                self.report(
                    {
                        "kind": "stall",
                        "rank": self.rank,
                        "t": time.time(),
                        "waited_s": round(now - since, 1),
                        "what": found[1],
                        "where": cell_location(frame),
                    }
                )
            del frame, found  # frames keep their locals alive
