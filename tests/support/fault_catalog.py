"""Injected failures on real engines, shared by tests/kernel/test_fault_injection.py and bench/soak.py.

The cells use jupyter_dl.collectives, so each fault runs unchanged on either backend (Horovod's or TensorFlow's own).

Each fault is a %%distribute cell that fails in one way, on one rank, at one point: before any collective, inside a
Keras fit (its peer waits in the gradient allreduce), after fit (its peer waits in an allreduce), or by stalling.
The failing rank writes the moment of injection to a file, so time-to-error is measured from the failure itself.
Stops (cancel, interrupt) are requested once a rank wrote that it is where the stop should find it.
"""

import os
import signal
import time
from dataclasses import dataclass, field

ACTIONS = {
    "raise": 'raise RuntimeError("injected failure")',
    "exit": "os._exit(3)",
    "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
    "sysexit": "sys.exit(4)",
    "keyboard": "raise KeyboardInterrupt",
    "sleep": "time.sleep(120)",
    "busy": "while True: pass",
}

PRELUDE = """
import os, signal, sys, time
import numpy as np
import keras
from jupyter_dl import collectives
RANK = collectives.rank()
def inject():
    with open(os.path.join({workdir!r}, "injected"), "w") as f:
        f.write(repr(time.monotonic()))
"""

FIT = """
class Inject(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2 and RANK in {ranks}:
            inject()
            {action}
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(np.ones((512, 8), "float32"), np.ones(512, "float32"), epochs=3, batch_size=8, verbose=0,
          callbacks=[Inject()])
"""

POINTS = {
    # before any collective: the peer goes on into fit and waits in its first broadcast
    "start": "if RANK in {ranks}:\n    inject()\n    {action}\n" + FIT.replace("RANK in {ranks}", "False"),
    # inside fit: the peer waits in the next compiled step's gradient allreduce
    "fit": FIT,
    # after fit: the peer waits in a plain eager allreduce
    "after": FIT.replace("RANK in {ranks}", "False")
    + "if RANK in {ranks}:\n    inject()\n    {action}\ncollectives.allreduce(np.ones(1))\n",
    # manual: the peer waits in an eager allreduce from the start
    "allreduce": "if RANK in {ranks}:\n    inject()\n    {action}\ncollectives.allreduce(np.ones(1))\n",
    # every rank waits in a different collective
    "deadlock": "inject()\nif RANK == 0:\n    collectives.allreduce(np.ones(3))\n"
    "else:\n    collectives.broadcast(np.ones(3), root=1)\n",
}

# Restart faults: the rank fails once (a marker file remembers), the restarted job resumes from its checkpoint.
ONCE = """
class FailOnce(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        marker = os.path.join({workdir!r}, "failed-once")
        if epoch == 1 and RANK == {rank} and not os.path.exists(marker):
            open(marker, "w").close()
            inject()
            {action}
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(keras.optimizers.Adam(0.01), "mse")
x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
history = model.fit(x, x.sum(1), epochs=4, batch_size=16, verbose=0, callbacks=[FailOnce()])
"""


@dataclass(frozen=True)
class Fault:
    name: str
    point: str  # a key of POINTS, or "once" (restart faults)
    action: str  # a key of ACTIONS
    rank: int = 1  # the rank that fails (-1: all ranks)
    expect: str = "rank_error"  # rank_error | stalled | timeout | cancelled | interrupted | restarted
    ename: str = ""  # the exception name the error must carry for rank_error
    options: dict = field(default_factory=dict)  # more distribute() keyword arguments
    stop: str = ""  # "cancel" | "interrupt": requested once the injection file exists

    @property
    def kills_engine(self):
        return self.action in ("exit", "sigkill")

    def code(self, workdir):
        ranks = (0, 1) if self.rank == -1 else (self.rank,)
        body = ONCE if self.point == "once" else POINTS[self.point]
        return (PRELUDE + body).format(workdir=workdir, ranks=ranks, rank=self.rank, action=ACTIONS[self.action])

    def kwargs(self, workdir):
        options = {"manual": self.point in ("allreduce", "deadlock")}
        if self.expect == "restarted":
            options.update(restarts=1, checkpoint_dir=os.path.join(workdir, "checkpoints"))
        options.update(self.options)
        return options


# Longer than a peer may legitimately take to trace its first compiled step on a loaded 2-core machine (a rank done
# tracing first waits in that step for the others: at 1.5 s, CI once saw that as a stall before the injection).
STALL = {"stall_timeout": 5}

FAULTS = [
    *(
        Fault(f"raise-{point}-rank{r}", point, "raise", r, ename="RuntimeError")
        for point in ("start", "fit", "after")
        for r in (0, 1)
    ),
    *(
        Fault(f"exit-{point}-rank{r}", point, "exit", r, ename="EngineError")
        for point in ("start", "fit", "after")
        for r in (0, 1)
    ),
    *(Fault(f"sigkill-fit-rank{r}", "fit", "sigkill", r, ename="EngineError") for r in (0, 1)),
    *(Fault(f"sysexit-fit-rank{r}", "fit", "sysexit", r, ename="SystemExit") for r in (0, 1)),
    Fault("keyboardinterrupt-raised-fit-rank1", "fit", "keyboard", 1, ename="KeyboardInterrupt"),
    *(Fault(f"stall-fit-rank{r}", "fit", "sleep", r, expect="stalled", options=STALL) for r in (0, 1)),
    *(Fault(f"stall-allreduce-rank{r}", "allreduce", "sleep", r, expect="stalled", options=STALL) for r in (0, 1)),
    Fault("stall-deadlock", "deadlock", "sleep", -1, expect="stalled", options=STALL),
    Fault("timeout-busy-loop", "fit", "busy", -1, expect="timeout", options={"timeout": 4}),
    Fault("timeout-sleep", "allreduce", "sleep", 1, expect="timeout", options={"timeout": 4, "stall_timeout": 0}),
    Fault("cancel-fit", "fit", "sleep", 1, expect="cancelled", stop="cancel", options={"stall_timeout": 0}),
    Fault("cancel-allreduce", "allreduce", "sleep", 1, expect="cancelled", stop="cancel", options={"stall_timeout": 0}),
    Fault("interrupt-fit", "fit", "sleep", 1, expect="interrupted", stop="interrupt", options={"stall_timeout": 0}),
    Fault(
        "interrupt-allreduce",
        "allreduce",
        "sleep",
        1,
        expect="interrupted",
        stop="interrupt",
        options={"stall_timeout": 0},
    ),
    Fault("restart-after-exit", "once", "exit", 1, expect="restarted"),
    Fault("restart-after-raise", "once", "raise", 0, expect="restarted"),
]


def injected_at(workdir):
    """When the failing rank injected its failure (engine clock: same host), or None if it never got there."""
    try:
        with open(os.path.join(workdir, "injected")) as f:
            return float(f.read())
    except (OSError, ValueError):
        return None


def wait_for_injection(workdir, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        t = injected_at(workdir)
        if t is not None:
            return t
        time.sleep(0.02)
    return None


@dataclass
class FaultRun:
    fault: Fault
    error: BaseException | None
    result: object
    started: float
    ended: float
    injected: float | None
    stop_requested: float | None

    @property
    def time_to_error(self):
        """Seconds from the injected failure (or the stop request) to the cell's error."""
        origin = self.stop_requested or self.injected
        return None if origin is None else self.ended - origin


def run_fault(fault, workdir, n=2, backend="horovod"):
    """Run one fault as a notebook would, on `backend` ("horovod" or "tf"), and time it. Never raises what the job
    raised: returns it."""
    import _thread
    import threading

    import jupyter_dl
    from jupyter_dl.kernel import api

    session = api.session()
    stop = {}

    def stopper():
        if wait_for_injection(workdir) is None:
            return
        time.sleep(0.3)  # the peer settles into its wait
        stop["t"] = time.monotonic()
        if fault.stop == "cancel":
            session.store.request_cancel(session.jobs.all()[-1].id)
        else:
            _thread.interrupt_main()  # what the notebook's stop button does to the kernel

    # A kernel running a cell turns SIGINT into KeyboardInterrupt; so must this process, whatever an earlier test
    # (a server app, a cluster app run in-process) left installed: interrupt_main only calls the current handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    if fault.stop:
        threading.Thread(target=stopper, daemon=True).start()
    started = time.monotonic()
    error = result = None
    try:
        result = jupyter_dl.distribute(
            fault.code(workdir), n=n, namespace={}, name=fault.name, backend=backend, **fault.kwargs(workdir)
        )
    except (Exception, KeyboardInterrupt) as exc:
        error = exc
    finally:
        signal.signal(signal.SIGINT, previous)
    return FaultRun(fault, error, result, started, time.monotonic(), injected_at(workdir), stop.get("t"))
