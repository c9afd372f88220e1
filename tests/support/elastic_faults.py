"""Injected faults in elastic jobs (`-n 1:2`) on real engines, for bench/soak_elastic.py (and tests that want one);
a host cut off in a `-n 2:4` job on two hosts, for bench/soak_host_loss.py.

One cell, a small Keras `fit` over several epochs, fails in one way per fault: a rank's engine dies (os._exit or
SIGKILL) mid-epoch or at an epoch end, a rank raises, a rank stalls, the job grows into an engine that came free,
or a second rank dies while the group re-forms after a grow (the membership changes while a change is in
progress). Every rank of every run of the cell writes what it did to `events.jsonl` in the fault's folder (engine
clocks: one host), so that after the job the bench can check that no commit was lost and time each recovery:

- `begin` (the cell started on a rank), `start` (the epoch its fit began at: 0, or the epoch after the commit it
  resumed from), `step` (its first training step done), `epoch_end` (written before the commit of that epoch is
  taken), `inject` (the fault, just before it strikes), `heard` (rank 0 saw the kernel's grow request),
  `trained` (after every step: the samples trained so far in the epoch, and the commits made before this step's),
  `step_begin` (the commits made so far), `ended` (how this run's fit ended, and its commits).

A finished job loses no commit when its History holds every planned epoch once; every sample of every epoch was
trained exactly once in the steps the groups' commits hold (each rank notes after every step which samples it trained
so far in the epoch, and the commits it made before that step: a group that resumed from an older commit than its
survivors held trains samples twice, one that skipped some never); the optimizer's step count equals those committed
steps; the ranks ended with equal weights; and every run of the cell after a change began in the epoch after the last
one its surviving ranks committed at the epoch's end. Mid-epoch faults strike after step 5 of an epoch, with commit
points every 3 steps (the soak sets `elastic_commit_steps`): the survivors go on from inside the epoch.
"""

import collections
import json
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
    if ACTION == "cut":  # the host-loss soak cuts this rank's host off the network as soon as it sees the file
        import socket
        with open(os.path.join(WORKDIR, "cut"), "w") as f:
            f.write(socket.gethostname())

def here(point, epoch=None):
    return (POINT == point and RANK == FAULT_RANK and SIZE == FAULT_SIZE
            and (epoch is None or epoch == FAULT_EPOCH) and first("struck"))

note("begin")
# A second loss while the group re-forms after a grow: the cell's first line on the grown group.
if POINT == "regroup" and RANK == FAULT_RANK and SIZE == FAULT_SIZE and os.path.exists(os.path.join(WORKDIR, "heard")):
    if first("struck"):
        strike()

class Seen(keras.metrics.Metric):  # how often this rank trained on each sample in the epoch (ids: y's 2nd column)
    def __init__(self, name="seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.counts = self.add_variable(shape=(SAMPLES,), initializer="zeros", name="counts")
    def update_state(self, y_true, y_pred, sample_weight=None):
        ids = keras.ops.cast(y_true[:, 1], "int32")
        self.counts.assign_add(keras.ops.sum(keras.ops.one_hot(ids, SAMPLES), axis=0))
    def result(self):
        return keras.ops.sum(self.counts)

def commits():
    return elastic.commit_count(elastic.running_job()[0])

# This run's firsts live outside the callback: an elastic job puts a callback's committed attributes back on resume.
FIRSTS = {"start", "step"}

class Faults(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if "start" in FIRSTS:
            FIRSTS.discard("start")
            note("start", epoch=epoch)
        self.epoch = epoch
    def on_train_batch_begin(self, batch, logs=None):
        note("step_begin", epoch=self.epoch, commits=commits())  # after the commit point of the step before, if any
    def on_train_batch_end(self, batch, logs=None):
        if "step" in FIRSTS:
            FIRSTS.discard("step")
            note("step", epoch=self.epoch, batch=batch)
        # The samples this rank trained on so far in this epoch (this run), and its commits before this step's.
        counts = SEEN.counts.numpy().astype(int)
        note("trained", epoch=self.epoch, steps=batch + 1, commits=commits(),
             ids=np.repeat(np.arange(SAMPLES), counts).tolist())
        if batch == STRIKE_BATCH and here("batch", self.epoch):
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
y = np.stack([x.sum(1), np.arange(SAMPLES)], axis=1).astype("float32")  # the target, and each sample's id

def mse(y_true, y_pred):
    return keras.losses.mean_squared_error(y_true[:, :1], y_pred)

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
SEEN = Seen()
model.compile(keras.optimizers.Adam(0.01), mse, metrics=[SEEN])
try:
    history = model.fit(x, y, epochs=EPOCHS, batch_size=BATCH, verbose=0, callbacks=[Faults()])
except BaseException as exc:  # a membership change (after its commit) or a peer's loss: what this run committed
    note("ended", how=type(exc).__name__, commits=commits())
    raise
note("ended", how="finished", commits=commits())
steps = int(model.optimizer.iterations.numpy())
"""


def _cut_short(notes, epoch, steps) -> bool:
    """Whether a run of the cell left its group inside step `steps` of `epoch`: it did not finish (its host was cut,
    it was killed, or it was released as a survivor of a cut: the step's collective can finish on some ranks only),
    and its last `trained` note is the step before."""
    trained = [e for e in notes if e["event"] == "trained"]
    if not trained or any(e["event"] == "ended" and e["how"] == "finished" for e in notes):
        return False
    last = trained[-1]
    return (last["epoch"], last["steps"]) == (epoch, steps - 1) if steps > 1 else last["epoch"] == epoch - 1


@dataclass(frozen=True)
class ElasticFault:
    name: str
    point: str  # batch (mid-epoch) | epoch_end (before that epoch's commit) | regroup (cell start on the grown group)
    action: str  # exit | sigkill | raise | sleep | cut (its host's link, bench/soak_host_loss.py) | "" (a plain grow)
    rank: int = 1  # the rank that fails
    size: int = 2  # ...in a group of this size
    epoch: int = 2
    batch: int = 4  # a mid-epoch fault strikes after this step (0-based) of the epoch: with commits every 3 steps
    grow: bool = False  # the job starts on 1 engine (the other was taken away) and grows into its replacement
    expect: str = "finished"  # finished | rank_error | stalled
    ename: str = "RuntimeError"  # the exception a rank_error names
    n: tuple = (1, 2)  # the job's MIN:MAX

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
            "STRIKE_BATCH": self.batch,
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

# Two hosts of two engines (network namespaces), a `-n 2:4` job: the host of the rank named is cut off the network
# (link down, nothing sent: not even a reset); the other host's two ranks go on. An epoch is 4 steps on 4 ranks: the
# host-loss soak commits after every step, and a mid-epoch cut strikes after step 2.
HOST_FAULTS = [
    ElasticFault("host-cut-mid-epoch-rank2", "batch", "cut", rank=2, size=4, batch=1, n=(2, 4)),
    ElasticFault("host-cut-mid-epoch-rank0", "batch", "cut", rank=0, size=4, batch=1, n=(2, 4)),  # the leader's host
    ElasticFault("host-cut-at-epoch-end-rank2", "epoch_end", "cut", rank=2, size=4, n=(2, 4)),
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
        parts, missing = self.committed_parts()
        problems += missing
        committed_steps = sum(steps for steps, _, _ in parts.values())
        if values.get("steps") != committed_steps:
            problems.append(f"optimizer took {values.get('steps')} steps, the groups' commits hold {committed_steps}")
        for epoch in range(EPOCHS):
            ids = [i for (_, e), (_, trained, _) in parts.items() if e == epoch for i in trained]
            unnoted = sum(count for (_, e), (_, _, count) in parts.items() if e == epoch)
            counts = collections.Counter(ids)
            times = collections.Counter(counts.get(i, 0) for i in range(SAMPLES))
            # Every sample once; those a rank cut short in its last step trained but could not note are the ones
            # nobody noted, exactly as many as that step gave it.
            if set(counts.values()) - {1} or times.get(0, 0) != unnoted:
                groups = {g: steps for (g, e), (steps, _, _) in parts.items() if e == epoch}
                problems.append(
                    f"epoch {epoch}: samples by times trained {dict(times)} ({unnoted} unnoted by ranks cut short); "
                    f"steps by group {groups}"
                )
        if getattr(self.result, "diverged", None):
            problems.append(f"ranks ended apart: {self.result.diverged}")
        problems += self._resumed_after_commits()
        return problems

    def committed_parts(self) -> tuple:
        """({(group, epoch): (steps, sample ids, unnoted)}, problems): per group of the job (its index in
        job.membership) and epoch, how many of its steps its commits hold and the samples all its ranks trained in them
        (`unnoted`: how many of those no note names, see below). A `trained` note
        is committed when a later note of the same run counts more commits; a group's committed steps are those the
        next group's rank 0 saw committed in it, whose commit that group goes on from (the last group: the most any
        of its ranks saw). A rank that died just before a commit point saw fewer; one whose host was cut off, or even
        a survivor, can have seen one more: the last collective before a cut finishes on some ranks only. Each rank's
        samples are those of its note at that step. A rank that left inside that step gave its samples to the step's
        collective but noted nothing: `unnoted` counts them."""
        changes = [change["t"] for change in self.result.job.membership]
        runs = collections.defaultdict(list)
        for e in self.events:
            runs[e["run"]].append(e)
        group_of = {
            run: max([i for i, t in enumerate(changes) if t < notes[0]["t"]], default=0) for run, notes in runs.items()
        }
        leaders = {group_of[run]: notes[0]["pid"] for run, notes in runs.items() if notes[0]["rank"] == 0}
        steps, trained = {}, collections.defaultdict(dict)  # (group, epoch) -> steps; -> {run: {steps: ids}}
        for run, notes in runs.items():
            group = group_of[run]
            resumed_from = leaders.get(group + 1, notes[0]["pid"]) == notes[0]["pid"]
            counted = [(i, e["commits"]) for i, e in enumerate(notes) if "commits" in e]
            for i, e in enumerate(notes):
                if e["event"] != "trained":
                    continue
                key = (group, e["epoch"])
                trained[key].setdefault(run, {})[e["steps"]] = e["ids"]
                if resumed_from and any(later > e["commits"] for j, later in counted if j > i):
                    steps[key] = max(steps.get(key, 0), e["steps"])
        parts, problems = {}, []
        for key, k in steps.items():
            ids, unnoted = [], 0
            noted = [by_steps[k] for by_steps in trained[key].values() if k in by_steps]
            per_step = len(noted[0]) // k if noted else 0  # one rank's samples a step
            for run in [run for run in runs if group_of[run] == key[0]]:
                by_steps = trained[key].get(run, {})
                if k in by_steps:
                    ids += by_steps[k]
                elif _cut_short(runs[run], key[1], k):
                    ids += by_steps.get(k - 1, [])
                    unnoted += per_step
                elif by_steps:
                    problems.append(f"group {key[0]} committed {k} steps of epoch {key[1]}; run {run} noted none there")
            parts[key] = (k, ids, unnoted)
        return parts, problems

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
            CELL, n=fault.n, namespace=fault.namespace(workdir), name=fault.name, backend=backend, **options
        )
    except (Exception, KeyboardInterrupt) as exc:
        error = exc
    return ElasticRun(fault, error, result, started, time.time(), events(workdir))
