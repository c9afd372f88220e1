"""Engine side of an elastic job (`-n MIN:MAX`): commits held in this engine's memory, and the commit point where
the ranks agree to change membership.

A commit is taken at every epoch end of every `fit`, by every rank (their states are equal: each rank keeps its own
copy, so any survivor can lead the next group without reading a file). When the kernel asks for a change (engines
came free, the pool wants GPUs back), rank 0 reads the request at the next epoch end and every rank hears it in the
same collective, so they all leave at the same point with the same commit; the kernel runs the cell again on the new
group, and each `fit` resumes from its commit (a finished one is restored, not trained again).

A fit over in-memory arrays also commits inside an epoch (about every 2 s of training, CommitPace): its samples
follow one global order (elastic_batches.py), so a commit can say how much of the epoch is done and the next group,
of any size, splits the rest. Other inputs (datasets, PyDatasets, generators) have the pipeline's order, which no
commit can name: each of their epochs runs whole on one group, and a rank lost mid-epoch costs the survivors that
epoch's progress.
"""

import contextlib
import json
import threading
import time
import urllib.request

import numpy as np

from jupyter_dl.runtime.checkpoints import assign_checked, restore_into
from jupyter_dl.runtime.job_backend import backend
from jupyter_dl.runtime.lr_callbacks import rate_variable

# job id -> fit index -> Commit. Only the current job's commits are kept (forget_other_jobs).
_COMMITS: dict = {}
_COMMIT_COUNTS: dict = {}  # job id -> commits this rank has made in it: the kernel tells progress from a loop
BOARD_TIMEOUT_S = 2.0  # rank 0's read of the kernel's request; a board that does not answer means "no change"
LOSS_POLL_S = 0.25  # how often every rank asks the board whether a peer was lost: its heartbeat to the kernel


class MembershipChange(BaseException):  # not an Exception: a cell's `except Exception` around fit must not stop it
    """Every rank leaves the cell at the same commit point, for the kernel to run it again on another group."""

    def __init__(self, reason, where):
        super().__init__(f"membership change {where}: {reason}")
        self.reason, self.where = reason, where


def forget_other_jobs(job_id):
    """A new job on this engine: commits of earlier jobs will never be resumed, and they hold a model's memory."""
    for other in [key for key in _COMMITS if key != job_id]:
        del _COMMITS[other]
    for other in [key for key in _COMMIT_COUNTS if key != job_id]:
        del _COMMIT_COUNTS[other]


def commit_count(job_id) -> int:
    """Commits this rank has made in the job so far (every fit epoch and elastic_epochs epoch)."""
    return _COMMIT_COUNTS.get(job_id, 0)


class MemoryCommits:
    """One fit's commits in this engine's memory, read and written like checkpoints.FitCheckpoint (find, restore,
    save; finish where a checkpoint has mark_complete). The learning rate is kept in single-rank units: the next
    group may have another size, so another factor (--lr-scale)."""

    def __init__(self, job_id, index, updates):
        self.job_id, self.index, self.updates = job_id, index, updates

    def find(self, include_complete):
        commit = _COMMITS.get(self.job_id, {}).get(self.index)
        if commit is None or (commit["complete"] and not include_complete):
            return None
        return f"memory:{self.job_id}/fit-{self.index}", commit["meta"]

    def restore(self, _where, model):
        commit = _COMMITS[self.job_id][self.index]
        restore_into(model, commit["model"], commit["optimizer"], _rebuilt_differently)
        optimizer = model.optimizer
        if optimizer is not None and commit["optimizer"]:
            rate = rate_variable(optimizer)
            if rate is not None and commit["rate"] is not None:
                rate.assign(self.updates.scaled(commit["rate"]))

    def save(self, model, epoch, history, within=None):
        """Commit after `epoch` (the last whole one); `within`: where in the next epoch, for a fit over a global
        order (elastic_batches.py): {"epoch", "position" (samples consumed), "seed"}."""
        optimizer = model.optimizer
        rate = rate_variable(optimizer) if optimizer is not None else None
        _COMMIT_COUNTS[self.job_id] = _COMMIT_COUNTS.get(self.job_id, 0) + 1
        _COMMITS.setdefault(self.job_id, {})[self.index] = {
            "model": [np.array(v.numpy()) for v in model.variables],
            "optimizer": [np.array(v.numpy()) for v in optimizer.variables] if optimizer is not None else [],
            "rate": self.updates.unscaled(float(rate.numpy())) if rate is not None else None,
            "meta": {"epoch": epoch, "history": json.loads(json.dumps(history)), "within": within},
            "complete": False,
        }

    def finish(self, model, history):
        """The fit returned: commit what it ended with (EarlyStopping may have stopped it early and put its best
        weights back), so that a later run of the cell restores it whole instead of training it again."""
        states = self.callback_states()
        self.save(model, len(history["epochs"]) - 1, history)
        commit = _COMMITS[self.job_id][self.index]
        commit["complete"] = commit["meta"]["complete"] = True
        if states is not None:
            commit["callbacks"] = states

    # Callback state (EarlyStopping's best and wait, ReduceLROnPlateau's): the cell's callbacks are new objects on
    # every run of the cell, and their on_train_begin resets them; the commit puts it back after that.
    def save_callbacks(self, states):
        commit = _COMMITS.get(self.job_id, {}).get(self.index)
        if commit is not None:
            commit["callbacks"] = states

    def callback_states(self):
        return _COMMITS.get(self.job_id, {}).get(self.index, {}).get("callbacks")


def _rebuilt_differently(*_):
    return RuntimeError(
        "the cell built a different model on this run than when it committed its state; an elastic job "
        "runs the cell again after each change, so the model it builds must not depend on the group"
    )


_current_board: list = [""]  # the running elastic job's board, for pending_change()


def pending_change() -> str | None:
    """The change the kernel asks the running elastic job for, if any, as rank 0 will read it at the next commit
    point (None in a job that is not elastic). Lets a cell, or a test, wait for the kernel's decision."""
    return _read_board(_current_board[0])


def change_requested(board_url, rank, point, decision=None) -> tuple:
    """At a commit point: the kernel's request, read by rank 0, and rank 0's `decision` (the next commit point's
    distance), heard by every rank in one collective: (request or None, decision)."""
    reason = _read_board(board_url) if rank == 0 else None
    return tuple(backend().broadcast_object((reason, decision), name=f"jdl.elastic.{point}"))


# ------------------------------------------------------------------------------------- custom training loops
_running: dict = {}  # the elastic job this rank runs now: job_id, board, loops (how many elastic_epochs() calls so far)


_released: list = [False]  # this run's collectives were ended because the kernel said a peer was lost


def forget_release():
    """A new run of a job on this rank: nothing released it yet."""
    _released[0] = False


def released_for_a_lost_peer() -> bool:
    """Whether the last run's collectives were ended at the kernel's word that a peer was lost: an error they raised
    then (a closed connection, an abort, in whatever words the backend has) is the loss, not this rank's own."""
    return _released[0]


@contextlib.contextmanager
def running(job_id, board_url, rank):
    """While one run of an elastic job's cell lasts on this rank (rank.run), for elastic_epochs(); and a listener
    that beats to the kernel and hears from it when a peer was lost."""
    _running.update(job_id=job_id, board=board_url)
    listener = _BoardListener(board_url, rank)
    try:
        yield
    finally:
        listener.stop()
        _running.clear()
        _current_board[0] = ""  # pending_change() after the job: no change, without asking a board that is gone


class _BoardListener:
    """Asks the board every LOSS_POLL_S whether a peer was lost, which is also this rank's heartbeat: the kernel
    counts a host whose ranks all stopped asking as cut off. On a loss it ends this rank's collectives at once (a
    rank waiting for a dead peer on TensorFlow's collectives would otherwise wait for its heartbeat timeout, 10 s; one
    waiting on gloo for a silent host, or for a survivor that already left, for Horovod's collective timeout), and the
    rank leaves with its commits, as after any lost peer. It beats on after that, until the run ends."""

    def __init__(self, board_url, rank):
        self._url = f"{board_url}?rank={rank}"
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="jdl-board-listener", daemon=True)
        self._thread.start()

    def _listen(self):
        released = False
        while not self._stopped.wait(LOSS_POLL_S):
            lost = _read_board(self._url, "lost")
            if lost and not released and not self._stopped.is_set():  # (not once the run ended: the engine may
                released = True  # run the next job)
                _released[0] = backend().release_peers(f"a peer left the job ({lost})")

    def stop(self):
        self._stopped.set()
        self._thread.join(timeout=BOARD_TIMEOUT_S + 1)


def elastic_epochs(count, *objects):
    """The epochs of a custom training loop, with an elastic job's commit point at the end of each:
    `for epoch in jupyter_dl.elastic_epochs(10, model, optimizer): ...`. The objects' variables (a model's, an
    optimizer's, tf/Keras variables) are committed in memory after every epoch; when the job's group changes, the
    cell runs again and the loop resumes after its last committed epoch, with every rank holding the commit. Outside
    an elastic job it is range(count)."""
    if not _running:
        yield from range(count)
        return
    board, index = _running["board"], next_index("loop")
    rank = backend().rank_and_size()[0]
    variables = _variables_of(objects)
    commit = kept(f"loop-{index}") if rank == 0 else None
    start = backend().broadcast_object(commit["epoch"] + 1 if commit else 0, name=f"jdl.elastic.loop.{index}")
    if start:
        if rank == 0:
            assign_checked(variables, commit["values"], _rebuilt_differently, "loop")
        backend().broadcast_from_root(variables)
    for epoch in range(start, count):
        yield epoch
        keep(f"loop-{index}", {"epoch": epoch, "values": [np.array(v.numpy()) for v in variables]})
        if epoch + 1 < count:
            leave_if_asked(board, rank, f"loop.{index}.{epoch}", f"after epoch {epoch + 1}")


# ------------------------------- the running job's commits by key (elastic_epochs' loops, Horovod's elastic states)
def running_job() -> tuple | None:
    """(job id, board URL) of the elastic job this rank runs now, or None."""
    return (_running["job_id"], _running["board"]) if _running else None


def next_index(kind: str) -> int:
    """The running elastic job's next object of `kind` in this run of the cell (0, 1, ...): the same objects get the
    same indices on every rank and on every run of the cell, so a commit finds its object again on the next group."""
    key = f"{kind}_count"
    index = _running.get(key, 0)
    _running[key] = index + 1
    return index


def keep(key: str, values):
    """Commit `values` under `key` in the running elastic job."""
    job_id = _running["job_id"]
    _COMMIT_COUNTS[job_id] = _COMMIT_COUNTS.get(job_id, 0) + 1
    _COMMITS.setdefault(job_id, {})[key] = values


def kept(key: str):
    """The running elastic job's last commit under `key` on this rank, or None."""
    return _COMMITS.get(_running["job_id"], {}).get(key) if _running else None


def leave_if_asked(board_url, rank, point, where: str, decision=None):
    """A commit point: every rank leaves here together (MembershipChange) when the kernel asks for a change.
    Returns rank 0's `decision`."""
    reason, decision = change_requested(board_url, rank, point, decision)
    if reason:
        raise MembershipChange(reason, where)
    return decision


class CommitPace:
    """How many steps after the last commit point inside an epoch the next one comes: a fixed count (`steps` > 0),
    or the count rank 0 measures to take about `seconds` of training (every rank hears its choice at each commit
    point, so they all stop at the same step). By time, a commit's few milliseconds (the state copied, the kernel
    asked, one collective) stay a small share whatever a step costs; a fixed 10 steps cost a 6 ms step 1.2-1.5x."""

    FIRST_STEPS = 10  # the first commit point of a fit, before any pace is known
    MAX_SHARE = 0.05  # of the training time a commit may take: a large model's copy stretches the interval

    def __init__(self, steps, seconds, rank):
        self.fixed, self.seconds, self.rank = steps, seconds, rank
        self.interval = steps if steps > 0 else self.FIRST_STEPS
        self._mark = (0, time.monotonic())
        self._cost = 0.0  # seconds the last commit point took on this rank

    def epoch_began(self):
        self._mark = (0, time.monotonic())

    def due(self, steps) -> bool:
        return steps - self._mark[0] >= self.interval

    def proposal(self, steps):
        """Rank 0's count for the next interval (None: fixed, or not rank 0)."""
        if self.fixed > 0 or self.rank != 0:
            return None
        since, at = self._mark
        per_step = max(time.monotonic() - at, 1e-6) / max(steps - since, 1)
        seconds = max(self.seconds, self._cost / self.MAX_SHARE)
        return max(1, min(100_000, round(seconds / per_step)))

    def agreed(self, steps, interval, cost=0.0):
        """At a commit point: rank 0's interval, and what the commit point cost here."""
        if interval:
            self.interval = interval
        self._mark, self._cost = (steps, time.monotonic()), cost


def _variables_of(objects) -> list:
    """Every variable the loop trains, in an order that is the same on every rank. An optimizer not built yet (no
    step taken) is built for the model beside it, so that its slots exist to take a commit."""
    import keras

    models = [o for o in objects if isinstance(o, keras.Model)]
    variables = []
    for obj in objects:
        if isinstance(obj, keras.optimizers.Optimizer) and not obj.built and models:
            obj.build([v for model in models for v in model.trainable_variables])
        variables += list(obj.variables) if hasattr(obj, "variables") else [obj]
    return variables


def _read_board(board_url, field="change") -> str | None:
    if not board_url:
        return None
    try:
        with urllib.request.urlopen(board_url, timeout=BOARD_TIMEOUT_S) as response:
            return json.loads(response.read() or b"{}").get(field)
    except (OSError, ValueError):
        return None


def commit_callback(keras, model, commits, resume, kept, board_url, rank, epochs, within=None):
    """The last callback of an elastic job's fit: puts the committed callback state back when it resumes, commits at
    every epoch end, and leaves at the commit point when the kernel asks for a change (not after the last epoch:
    the fit is done; the request waits for the next commit point, if the cell has one). `within`: (the fit's
    EpochOrder, CommitPace) for a fit over a global order, which also commits inside an epoch at that pace."""
    from jupyter_dl.wire import object_state

    _current_board[0] = board_url
    order, pace = within or (None, None)

    class ElasticCommit(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            saved = resume["meta"]["history"] if resume else {"epochs": [], "logs": {}}
            self.history = {"epochs": list(saved["epochs"]), "logs": {k: list(v) for k, v in saved["logs"].items()}}

        def on_train_begin(self, logs=None):
            # After the cell's callbacks reset themselves in their own on_train_begin; the new rank 0's copy wins.
            states = backend().broadcast_object(commits.callback_states() if resume else None, name="jdl.elastic.cb")
            for index, callback in kept:
                state = (states or {}).get(index)
                if state and "attributes" in state:  # not `params`: Keras set them for this group's steps
                    attributes = {k: v for k, v in state["attributes"].items() if k != "params"}
                    object_state.restore(callback, {"attributes": attributes})

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch
            if order is not None:
                self._start = order.start_of(epoch)  # samples of the epoch consumed before it
                order.set_epoch_length(self._start)
                pace.epoch_began()

        def on_train_batch_end(self, batch, logs=None):
            """A commit point inside the epoch when the pace says (not at its end: on_epoch_end commits there)."""
            steps = batch + 1  # Keras' index of the last step run (several with steps_per_execution)
            if order is None or not pace.due(steps):
                return
            position = order.position_after(self._start, steps)
            if not order.resumable_at(position):  # too near the epoch's end: on_epoch_end commits soon
                return
            began, epoch = time.monotonic(), self._epoch
            commits.save(model, epoch - 1, self.history, {"epoch": epoch, "position": position, "seed": order.seed})
            commits.save_callbacks({index: object_state.state_of(callback) for index, callback in kept})
            where = f"after {position} of epoch {epoch + 1}'s {order.total} samples"
            decided = leave_if_asked(board_url, rank, f"{epoch}.{steps}", where, pace.proposal(steps))
            pace.agreed(steps, decided, time.monotonic() - began)

        def on_epoch_end(self, epoch, logs=None):
            self.history["epochs"].append(epoch)
            for key, value in (logs or {}).items():
                self.history["logs"].setdefault(key, []).append(float(value))
            next_one = {"epoch": epoch + 1, "position": 0, "seed": order.seed} if order is not None else None
            commits.save(model, epoch, self.history, next_one)
            commits.save_callbacks({index: object_state.state_of(callback) for index, callback in kept})
            if epoch + 1 < epochs and not self.model.stop_training:  # (EarlyStopping ends the fit here anyway)
                leave_if_asked(board_url, rank, epoch, f"after epoch {epoch + 1}")

    return ElasticCommit()
