"""Injected faults in elastic jobs (`-n 1:2`) on real engines, for bench/soak_elastic.py (and tests that want one).

One cell, a small Keras `fit` over several epochs, fails in one way per fault: a rank's engine dies (os._exit or
SIGKILL) mid-epoch or at an epoch end, a rank raises, a rank stalls, the job grows into an engine that came free,
or a second rank dies while the group re-forms after a grow (the membership changes while a change is in
progress). Every rank of every run of the cell writes what it did to `events.jsonl` in the fault's folder (engine
clocks: one host), so that after the job the bench can check that no commit was lost and time each recovery:

- `begin` (the cell started on a rank), `start` (the epoch its fit began at: 0, or the epoch after the commit it
  resumed from), `step` (its first training step done), `epoch_end` (written before the commit of that epoch is
  taken), `inject` (the fault, just before it strikes), `heard` (rank 0 saw the kernel's grow request).

A finished job loses no commit when its History holds every planned epoch once, the optimizer's step count equals
the steps those epochs took on the group that ran each, the ranks ended with equal weights, and every run of the
cell after a change began exactly after the last epoch its surviving ranks committed.
"""

import json
import math
import os
import time
from dataclasses import dataclass

EPOCHS = 6
SAMPLES = 256
BATCH = 16

CELL = """
import json, os, signal, sys, time
import numpy as np
import keras
from jupyter_dl.runtime import elastic
from jupyter_dl.runtime.job_backend import backend

RANK, SIZE = backend().rank_and_size()
RUN = f"{os.getpid()}-{time.time()}"

def note(event, **fields):
    record = {"event": event, "t": time.time(), "run": RUN, "pid": os.getpid(), "rank": RANK, "size": SIZE}
    with open(os.path.join(WORKDIR, "events.jsonl"), "a") as f:
        f.write(json.dumps({**record, **fields}) + "\\n")

def first(marker):
    # True for the one rank, in the one run of the cell, that gets here first: the fault strikes once per job.
    try:
        os.close(os.open(os.path.join(WORKDIR, marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False

def strike():
    note("inject", action=ACTION)
    if ACTION == "exit":
        os._exit(3)
    if ACTION == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if ACTION == "raise":
        raise RuntimeError("injected failure")
    if ACTION == "sleep":
        time.sleep(120)

def here(point, epoch=None):
    return (POINT == point and RANK == FAULT_RANK and SIZE == FAULT_SIZE
            and (epoch is None or epoch == FAULT_EPOCH) and first("struck"))

note("begin")
# A second loss while the group re-forms after a grow: the cell's first line on the grown group.
if POINT == "regroup" and RANK == FAULT_RANK and SIZE == FAULT_SIZE and os.path.exists(os.path.join(WORKDIR, "heard")):
    if first("struck"):
        strike()

class Seen(keras.metrics.Metric):  # samples this rank trained on in the epoch
    def __init__(self, name="seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")
    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(keras.ops.cast(keras.ops.shape(y_true)[0], "float32"))
    def result(self):
        return self.count

# This run's firsts live outside the callback: an elastic job puts a callback's committed attributes back on resume.
FIRSTS = {"start", "step"}

class Faults(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if "start" in FIRSTS:
            FIRSTS.discard("start")
            note("start", epoch=epoch)
        self.epoch = epoch
    def on_train_batch_end(self, batch, logs=None):
        if "step" in FIRSTS:
            FIRSTS.discard("step")
            note("step", epoch=self.epoch, batch=batch)
        if batch == 2 and here("batch", self.epoch):
            strike()
    def on_epoch_end(self, epoch, logs=None):
        if here("epoch_end", epoch):
            strike()
        note("epoch_end", epoch=epoch)
        if GROW and RANK == 0 and SIZE == 1 and epoch == 1 and not os.path.exists(os.path.join(WORKDIR, "heard")):
            deadline = time.monotonic() + 120  # until the kernel asks to grow into the engine that came free
            while not elastic.pending_change() and time.monotonic() < deadline:
                time.sleep(0.02)
            first("heard")
            note("heard")

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 8)).astype("float32")
y = x.sum(1)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(keras.optimizers.Adam(0.01), "mse", metrics=[Seen()])
history = model.fit(x, y, epochs=EPOCHS, batch_size=BATCH, verbose=0, callbacks=[Faults()])
steps = int(model.optimizer.iterations.numpy())
"""


@dataclass(frozen=True)
class ElasticFault:
    name: str
    point: str  # batch (mid-epoch) | epoch_end (before that epoch's commit) | regroup (cell start on the grown group)
    action: str  # exit | sigkill | raise | sleep | "" (no fault: a plain grow)
    rank: int = 1  # the rank that fails
    size: int = 2  # ...in a group of this size
    epoch: int = 2
    grow: bool = False  # the job starts on 1 engine (the other was taken away) and grows into its replacement
    expect: str = "finished"  # finished | rank_error | stalled
    ename: str = "RuntimeError"  # the exception a rank_error names

    @property
    def kills_engine(self):
        return self.action in ("exit", "sigkill")

    def namespace(self, workdir):
        return {
            "WORKDIR": workdir,
            "POINT": self.point,
            "ACTION": self.action,
            "FAULT_RANK": self.rank,
            "FAULT_SIZE": self.size,
            "FAULT_EPOCH": self.epoch,
            "GROW": self.grow,
            "EPOCHS": EPOCHS,
            "SAMPLES": SAMPLES,
            "BATCH": BATCH,
        }


STALL_TIMEOUT = 5.0  # as the fixed-size catalog's stalls (tests/support/fault_catalog.py STALL)

ELASTIC_FAULTS = [
    ElasticFault("lost-exit-mid-epoch-rank1", "batch", "exit", rank=1),
    ElasticFault("lost-sigkill-mid-epoch-rank0", "batch", "sigkill", rank=0),  # the group's leader: rank 1 leads on
    ElasticFault("lost-exit-at-epoch-end-rank1", "epoch_end", "exit", rank=1),
    ElasticFault("lost-sigkill-at-epoch-end-rank0", "epoch_end", "sigkill", rank=0),
    ElasticFault("grow-into-a-free-engine", "", "", grow=True),
    ElasticFault("grow-then-new-rank-lost-in-regroup", "regroup", "exit", rank=1, grow=True),
    # The leader held the only commit (the new engine had none yet): the job ends with the loss, not from scratch.
    ElasticFault(
        "grow-then-leader-lost-in-regroup",
        "regroup",
        "sigkill",
        rank=0,
        grow=True,
        expect="rank_error",
        ename="EngineError",
    ),
    ElasticFault("raise-mid-epoch-rank1", "batch", "raise", rank=1, expect="rank_error"),
    ElasticFault("stall-mid-epoch-rank1", "batch", "sleep", rank=1, expect="stalled"),
]


def events(workdir) -> list:
    try:
        with open(os.path.join(workdir, "events.jsonl")) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except OSError:
        return []


@dataclass
class ElasticRun:
    fault: ElasticFault
    error: BaseException | None
    result: object
    started: float  # time.time(), comparable with the engines' events
    ended: float
    events: list

    def injected(self):
        return [e["t"] for e in self.events if e["event"] == "inject"]

    def recovery_s(self):
        """Seconds from the injected failure (a grow: from the commit point where rank 0 heard the request) to the
        next group's first training step, or None when none followed."""
        origins = [e["t"] for e in self.events if e["event"] in ("inject", "heard")]
        if not origins:
            return None
        origin = max(origins)  # after a second loss: from the last one
        later = [e["t"] for e in self.events if e["event"] == "step" and e["t"] > origin and self._run_after(e, origin)]
        return min(later) - origin if later else None

    def time_to_error_s(self):
        injected = self.injected()
        return self.ended - max(injected) if injected and self.error is not None else None

    def _run_after(self, step, origin):
        begins = [e["t"] for e in self.events if e["event"] == "begin" and e["run"] == step["run"]]
        return bool(begins) and begins[0] > origin

    def lost_commits(self) -> list:
        """What shows a lost commit in a finished job (empty when none): each run of the cell after a change must
        begin its fit right after the last epoch its surviving ranks committed, the History must hold each planned
        epoch once, and the optimizer must have taken as many steps as those epochs had."""
        problems = []
        values = getattr(self.result, "values", None) or {}
        history = values.get("history")
        if history is None:
            return ["no History came back"]
        if history.epoch != list(range(EPOCHS)):
            problems.append(f"History epochs {history.epoch}, planned {list(range(EPOCHS))}")
        expected_steps = sum(math.ceil(round(seen) / BATCH) for seen in history.history.get("seen", []))
        if values.get("steps") != expected_steps:
            problems.append(f"optimizer took {values.get('steps')} steps, its epochs had {expected_steps}")
        if getattr(self.result, "diverged", None):
            problems.append(f"ranks ended apart: {self.result.diverged}")
        problems += self._resumed_after_commits()
        return problems

    def _resumed_after_commits(self) -> list:
        """Each group after a change (job.membership, recorded before its ranks start) must begin its fit at the
        epoch after the newest commit an engine still alive held; and that newest commit must not have been held by
        dead engines only."""
        changes = [change["t"] for change in self.result.job.membership]
        died = {e["pid"]: e["t"] for e in self.events if e["event"] == "inject" and e["action"] in ("exit", "sigkill")}
        problems = []
        for i, t in enumerate(changes[1:], start=1):
            end = changes[i + 1] if i + 1 < len(changes) else float("inf")
            starts = [e for e in self.events if e["event"] == "start" and e["rank"] == 0 and t < e["t"] < end]
            if not starts:
                continue  # this group lost a rank before its fit began
            newest: dict = {}  # pid -> newest epoch it committed before this group (its epoch_end note precedes that)
            for e in self.events:
                if e["event"] == "epoch_end" and e["t"] < t:
                    newest[e["pid"]] = max(newest.get(e["pid"], -1), e["epoch"])
            alive = [epoch for pid, epoch in newest.items() if died.get(pid, float("inf")) > t]
            wanted = max(alive) + 1 if alive else 0
            if starts[0]["epoch"] != wanted:
                problems.append(
                    f"group {i} began at epoch {starts[0]['epoch']}, its engines had committed epoch {wanted - 1}"
                )
            if newest and max(newest.values()) + 1 > wanted:
                problems.append(
                    f"group {i}: the commit of epoch {max(newest.values())} was held only by engines that died"
                )
        return problems


def take_one_engine_away(cluster, timeout=30.0):
    """Shut one engine down without a replacement, so that the next elastic job starts on one fewer; returns its id
    for give_it_back()."""
    taken = cluster.engine_ids()[-1]
    cluster.client.shutdown(targets=[taken], block=True)
    deadline = time.monotonic() + timeout
    while taken in cluster.engine_ids():
        if time.monotonic() > deadline:
            raise RuntimeError(f"engine {taken} did not leave the cluster in {timeout:.0f}s")
        time.sleep(0.1)
    return taken


def give_it_back_once_training(cluster, taken, workdir, timeout=120.0):
    """In the background: once the job has trained an epoch, start the replacement of the engine taken away (what
    the package does for a dead engine): the engine that comes free mid-job."""
    import threading

    def later():
        deadline = time.monotonic() + timeout
        while not any(e["event"] == "epoch_end" for e in events(workdir)) and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.replace_dead([taken])

    thread = threading.Thread(target=later, daemon=True, name="jdl-soak-free-engine")
    thread.start()
    return thread


def run_elastic_fault(fault, workdir, session, backend="horovod"):
    """Run one elastic fault as a notebook would; never raises what the job raised: returns it. A grow fault takes
    an engine away first and gives it back once the job trains."""
    import jupyter_dl

    if fault.grow:
        give_it_back_once_training(session.cluster, take_one_engine_away(session.cluster), workdir)
    options = {"stall_timeout": STALL_TIMEOUT} if fault.expect == "stalled" else {}
    started = time.time()
    error = result = None
    try:
        result = jupyter_dl.distribute(
            CELL, n=(1, 2), namespace=fault.namespace(workdir), name=fault.name, backend=backend, **options
        )
    except (Exception, KeyboardInterrupt) as exc:
        error = exc
    return ElasticRun(fault, error, result, started, time.time(), events(workdir))
