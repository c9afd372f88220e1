"""Elastic jobs (`-n MIN:MAX`) on real engines, on both backends: a zero-code `fit` grows into engines that come
free, goes on after a rank is killed, and gives GPUs back to a pool (simulated GPUs, real `jupyter-dl-pool` service
behind a real JupyterHub) when another user's gang arrives.

The module has its own cluster (it grows to 4 engines; the session's shared cluster keeps its 2). The cells wait
for the kernel's decision where a test needs a change at a known epoch (`elastic.pending_change()`), so nothing
here depends on how fast engines start on a loaded machine.
"""

import os
import threading
import time

import numpy as np
import pytest

from jupyter_dl.errors import UsageError
from jupyter_dl.kernel.job.work import CellWork
from jupyter_dl.wire.options import RunOptions

BACKENDS = ["horovod", "tf"]

# The digits classifier, with a metric that counts the samples each rank trains on per epoch: epoch metrics are
# averaged over ranks, so ranks x `seen` is what the whole group saw in that epoch.
CELL = """
import os, time
import keras
from jupyter_dl.runtime import elastic
from jupyter_dl.runtime.job_backend import backend

keras.utils.set_random_seed(1)

class Seen(keras.metrics.Metric):
    def __init__(self, name="seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")
    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(keras.ops.cast(keras.ops.shape(y_true)[0], "float32"))
    def result(self):
        return self.count

class Scenario(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        rank, size = backend().rank_and_size()
        if rank == 0 and epoch == WAIT_AT and size == WAIT_SIZE:  # until the kernel asks for the change
            deadline = time.monotonic() + 120
            while not elastic.pending_change() and time.monotonic() < deadline:
                time.sleep(0.05)
        if KILL and epoch == 2 and rank == 1 and not os.path.exists(KILL):
            open(KILL, "w").close()
            os._exit(1)  # the engine dies as a killed process does

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=keras.optimizers.Adam(0.002), loss="sparse_categorical_crossentropy",
              metrics=["accuracy", Seen()])
# In order (no shuffle): the fixed path's strided batches and the elastic global order's are then the same.
history = model.fit(x_train, y_train, epochs=EPOCHS, batch_size=32, verbose=0, callbacks=[Scenario()], shuffle=False)
"""


@pytest.fixture(scope="module")
def own_session():
    from jupyter_dl.kernel.api import Session

    own = Session()
    own.runner.elastic_grow_wait = 600  # grow once, into both engines, however slowly the second one starts
    yield own
    own.cluster.stop()


@pytest.fixture
def session(own_session):
    """The module's session with a cluster of exactly 2 engines (a test before may have grown it)."""
    if own_session.cluster.client is not None and len(own_session.cluster.engine_ids()) != 2:
        own_session.cluster.stop()
    if own_session.cluster.client is None:
        own_session.cluster.start(n=2)
    return own_session


def _run(session, digits, n, backend, epochs=8, wait_at=-1, wait_size=0, kill=""):
    namespace = {
        "x_train": digits["x_train"],
        "y_train": digits["y_train"],
        "EPOCHS": epochs,
        "WAIT_AT": wait_at,
        "WAIT_SIZE": wait_size,
        "KILL": kill,
    }
    result = session.runner.run(CellWork(CELL, namespace, 2), RunOptions(n=n, backend=backend))
    return result, result.values["history"]


_FIXED: dict = {}  # backend -> the History of the same cell on a fixed 2 ranks, run once per backend


def _fixed_history(session, digits, backend):
    if backend not in _FIXED:
        _FIXED[backend] = _run(session, digits, 2, backend)[1]
    return _FIXED[backend]


def _group_sizes_by_epoch(history, membership, total) -> list:
    """The number of ranks each epoch ran on, read from how many samples each rank trained on in it (N // size when
    the epoch ran whole on one group: every sample but the strided remainder, once), in the groups' order."""
    groups = [change["n"] for change in membership]
    at, sizes = 0, []
    for epoch, seen in enumerate(history.history["seen"]):
        later = [i for i in range(at, len(groups)) if round(seen) == total // groups[i]]
        assert later, f"epoch {epoch}: {seen} samples per rank fits no group of {groups[at:]} over {total} samples"
        at = later[0]
        sizes.append(groups[at])
    return sizes


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fit_grows_into_engines_that_come_free_and_trains_as_a_fixed_run(session, digits, backend, capsys):
    fixed_history = _fixed_history(session, digits, backend)
    result, history = _run(session, digits, (2, 4), backend, wait_at=1, wait_size=2)
    sizes = [change["n"] for change in result.job.membership]
    reasons = [change["reason"] for change in result.job.membership]
    assert sizes == [2, 4] and reasons[0] == "started" and reasons[1].startswith("grew: 2 engines free")
    assert result.job.state == "succeeded" and result.diverged is None  # the 4 ranks ended with equal weights
    assert history.epoch == list(range(8))  # one History, the epochs before the change included
    assert _group_sizes_by_epoch(history, result.job.membership, len(digits["x_train"])) == [2, 2] + [4] * 6
    # Up to the change the run is the fixed one; after it, 4 ranks at twice the learning rate (--lr-scale linear).
    np.testing.assert_allclose(history.history["loss"][:2], fixed_history.history["loss"][:2], rtol=1e-5)
    assert abs(history.history["accuracy"][-1] - fixed_history.history["accuracy"][-1]) < 0.05
    err = capsys.readouterr().err
    assert "grew: 2 engines free; going on with 4 ranks (was 2) from the commit after epoch 2" in err
    assert all(np.isfinite(w).all() for w in result.values["model"].get_weights())


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_survivors_of_a_killed_rank_go_on_from_the_last_commit(session, digits, backend, tmp_path, capsys):
    fixed_history = _fixed_history(session, digits, backend)
    started = time.monotonic()
    result, history = _run(session, digits, (1, 2), backend, kill=str(tmp_path / "killed"))
    took = time.monotonic() - started
    membership = result.job.membership
    assert [change["n"] for change in membership][0] == 2
    assert membership[1]["reason"] == "lost rank 1 on " + result.job.hosts[0]
    assert result.job.state == "succeeded" and result.diverged is None
    # Epoch 2 was cut short by the kill before its commit: the survivors trained it again from epoch 1's commit.
    assert history.epoch == list(range(8))
    sizes = _group_sizes_by_epoch(history, membership, len(digits["x_train"]))
    assert sizes[:2] == [2, 2] and set(sizes[2:]) <= {1, 2}
    np.testing.assert_allclose(history.history["loss"][:2], fixed_history.history["loss"][:2], rtol=1e-5)
    assert abs(history.history["accuracy"][-1] - fixed_history.history["accuracy"][-1]) < 0.05
    print(f"{backend}: job with a killed rank took {took:.1f}s; groups {membership}")
    assert "lost rank 1 on" in capsys.readouterr().err


# The same classifier, shuffled, with each sample's id in y's second column: every rank saves after each step how
# often it trained on each sample in this epoch (RECORDS/e{epoch}-n{size}-r{rank}-{run}.npy). At step AT_STEP of
# epoch AT_EPOCH on AT_SIZE ranks, rank 0 waits for the kernel's change, or rank 1 dies (KILL).
WITHIN_EPOCH_CELL = """
import os, time
import numpy as np
import keras
from jupyter_dl.runtime import elastic
from jupyter_dl.runtime.job_backend import backend

keras.utils.set_random_seed(1)
RUN = f"{os.getpid()}-{time.time_ns()}"

class Seen(keras.metrics.Metric):
    def __init__(self, name="seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.counts = self.add_variable(shape=(len(x_train),), initializer="zeros", name="counts")
    def update_state(self, y_true, y_pred, sample_weight=None):
        ids = keras.ops.cast(y_true[:, 1], "int32")
        self.counts.assign_add(keras.ops.sum(keras.ops.one_hot(ids, len(x_train)), axis=0))
    def result(self):
        return keras.ops.sum(self.counts)

def loss(y_true, y_pred):
    return keras.losses.sparse_categorical_crossentropy(y_true[:, 0], y_pred)

def accuracy(y_true, y_pred):
    return keras.metrics.sparse_categorical_accuracy(y_true[:, 0], y_pred)

seen = Seen()

class Scenario(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
    def on_train_batch_end(self, batch, logs=None):
        rank, size = backend().rank_and_size()
        with open(os.path.join(RECORDS, f"e{self.epoch}-n{size}-r{rank}-{RUN}.npy"), "wb") as record:
            np.save(record, seen.counts.numpy())  # (into an open file: np.save(path) is rank 0's alone in fit)
        if (self.epoch, batch + 1, size) != (AT_EPOCH, AT_STEP, AT_SIZE):
            return
        if KILL and rank == 1:
            os._exit(1)  # the engine dies as a killed process does
        if not KILL and rank == 0:
            open(os.path.join(RECORDS, "go"), "w").close()  # the test's kernel may decide from now on
            deadline = time.monotonic() + 120
            while not elastic.pending_change() and time.monotonic() < deadline:
                time.sleep(0.05)

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=keras.optimizers.Adam(0.002), loss=loss, metrics=[accuracy, seen])
history = model.fit(x_train, y_ids, sample_weight=weights, epochs=4, batch_size=32, verbose=0, callbacks=[Scenario()])
"""
WITHIN_SAMPLES = 1280  # 20 steps of 2 x 32 per epoch, 10 of 4 x 32: every split leaves no sample out


def _run_within(session, digits, n, backend, records, at=(1, 6, 2), kill=False):
    x, y = digits["x_train"][:WITHIN_SAMPLES], digits["y_train"][:WITHIN_SAMPLES]
    namespace = {
        "x_train": x,
        "y_ids": np.stack([y, np.arange(len(y))], axis=1).astype("float32"),
        # (sample weights: a 2-rank elastic fit once ordered the samples with rank 0's half of them, then failed)
        "weights": 0.5 + np.arange(len(y)) % 2,
        "RECORDS": str(records),
        "AT_EPOCH": at[0],
        "AT_STEP": at[1],
        "AT_SIZE": at[2],
        "KILL": kill,
    }
    records.mkdir(exist_ok=True)
    result = session.runner.run(CellWork(WITHIN_EPOCH_CELL, namespace, 2), RunOptions(n=n, backend=backend))
    return result, result.values["history"]


_FIXED_WITHIN: dict = {}  # backend -> the History of WITHIN_EPOCH_CELL on a fixed 2 ranks, run once per backend


def _fixed_within_history(session, digits, backend, records):
    if backend not in _FIXED_WITHIN:
        _FIXED_WITHIN[backend] = _run_within(session, digits, 2, backend, records, at=(-1, 0, 0))[1]
    return _FIXED_WITHIN[backend]


def _times_each_sample_was_trained(records) -> dict:
    """{(epoch, group size): per-sample counts summed over the ranks of that size}, from the ranks' last saves."""
    counts: dict = {}
    for path in records.glob("e*.npy"):
        epoch, size = (int(part[1:]) for part in path.name.split("-")[:2])
        counts[(epoch, size)] = counts.get((epoch, size), 0) + np.load(path)
    return counts


def _assert_every_sample_once_per_epoch(counts, epochs):
    """Summed over every group that trained part of it, each epoch trained every sample exactly once."""
    for epoch in range(epochs):
        seen = sum(count for (e, _), count in counts.items() if e == epoch)
        assert (seen == 1).all(), f"epoch {epoch}: counts {np.unique(seen, return_counts=True)}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fit_grows_in_the_middle_of_an_epoch_and_the_new_group_trains_the_rest_of_it_once(
    session, digits, backend, tmp_path, monkeypatch, capsys
):
    from jupyter_dl.kernel.job.elastic import ElasticGroups

    monkeypatch.setattr(session.runner, "elastic_commit_steps", 4)
    fixed_history = _fixed_within_history(session, digits, backend, tmp_path / "fixed")
    # The kernel grows the job only once rank 0 reached step 6 of epoch 1 (its "go"): the next commit point, after
    # step 8, is where the group changes, however fast the new engines start.
    gate, decide = tmp_path / "elastic" / "go", ElasticGroups.wanted_change
    monkeypatch.setattr(
        ElasticGroups, "wanted_change", lambda group, ids: decide(group, ids) if gate.exists() else None
    )
    result, history = _run_within(session, digits, (2, 4), backend, tmp_path / "elastic")
    membership = result.job.membership
    assert [change["n"] for change in membership] == [2, 4] and membership[1]["reason"].startswith("grew: ")
    assert result.job.state == "succeeded" and result.diverged is None  # the 4 ranks ended with equal weights
    assert history.epoch == [0, 1, 2, 3]
    counts = _times_each_sample_was_trained(tmp_path / "elastic")
    # Epoch 1 ran on both groups: 2 ranks to the commit after step 8 (8 x 64 samples), 4 ranks for the rest.
    assert sorted(counts) == [(0, 2), (1, 2), (1, 4), (2, 4), (3, 4)]
    assert counts[(1, 2)].sum() == 8 * 64 and counts[(1, 4)].sum() == WITHIN_SAMPLES - 8 * 64
    _assert_every_sample_once_per_epoch(counts, 4)
    assert abs(history.history["accuracy"][-1] - fixed_history.history["accuracy"][-1]) < 0.05
    assert "(was 2) from the commit after 512 of epoch 2's 1280 samples" in capsys.readouterr().err


def test_the_survivors_of_a_rank_killed_in_the_middle_of_an_epoch_go_on_from_its_last_commit(
    session, digits, tmp_path, monkeypatch
):
    monkeypatch.setattr(session.runner, "elastic_commit_steps", 4)
    started = time.monotonic()
    # Rank 1 dies right after step 8 of epoch 1, a commit point, which rank 0 committed before it failed.
    result, history = _run_within(session, digits, (1, 2), "horovod", tmp_path, at=(1, 8, 2), kill=True)
    took = time.monotonic() - started
    membership = result.job.membership
    assert [change["n"] for change in membership][:2] == [2, 1]
    assert membership[1]["reason"] == "lost rank 1 on " + result.job.hosts[0]
    assert result.job.state == "succeeded" and result.diverged is None and history.epoch == [0, 1, 2, 3]
    counts = _times_each_sample_was_trained(tmp_path)
    # The 2 ranks' part of epoch 1 is what rank 0 committed; the survivor (perhaps grown back meanwhile) the rest.
    assert counts[(1, 2)].sum() == 8 * 64 and (1, 1) in counts
    _assert_every_sample_once_per_epoch(counts, 4)
    print(f"job with a rank killed mid-epoch took {took:.1f}s; groups {membership}")


PY_DATASET_CELL = """
import keras

class Batches(keras.utils.PyDataset):
    def __init__(self, x, y, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y = x, y
    def __len__(self):
        return len(self.x) // 64
    def __getitem__(self, index):
        return self.x[index * 64:(index + 1) * 64], self.y[index * 64:(index + 1) * 64]

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
history = model.fit(Batches(x_train, y_train), epochs=2, verbose=0)
"""


def test_other_inputs_than_arrays_keep_their_epoch_end_commits(session, digits):
    """A PyDataset is not arrays: no global order (deciding must not read it), commits at epoch ends as before."""
    namespace = {"x_train": digits["x_train"], "y_train": digits["y_train"]}
    result = session.runner.run(CellWork(PY_DATASET_CELL, namespace, 2), RunOptions(n=(1, 2)))
    assert result.job.state == "succeeded" and result.values["history"].epoch == [0, 1]


# Cells as notebooks write them, each with a callback that kills rank 1 after step 5 of epoch 1 on 2 ranks (once):
# past the commit point after step 3, so the survivor goes on from inside the epoch.
KILL_MID_EPOCH = """
import os
import numpy as np
import keras
from jupyter_dl.runtime.job_backend import backend

class Kill(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
    def on_train_batch_end(self, batch, logs=None):
        rank, size = backend().rank_and_size()
        if self.epoch == KILL_EPOCH and batch == 4 and (rank, size) == (1, 2) and not os.path.exists(MARK):
            open(MARK, "w").close()
            os._exit(1)

rng = np.random.default_rng(0)
"""
EVERYDAY_FITS = {
    # A functional model over a dict of inputs, validation_split and class_weight.
    "dict-inputs": """
a, b = rng.normal(size=(600, 5)).astype("float32"), rng.normal(size=(600, 3)).astype("float32")
y = (a[:, 0] + b[:, 0] > 0).astype("int32")
ia, ib = keras.Input((5,), name="a"), keras.Input((3,), name="b")
hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([ia, ib]))
model = keras.Model({"a": ia, "b": ib}, keras.layers.Dense(2, activation="softmax")(hidden))
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit({"a": a, "b": b}, y, epochs=4, batch_size=16, validation_split=0.2,
                    class_weight={0: 1.0, 1: 2.0}, callbacks=[Kill()], verbose=0)
""",
    # Transfer learning's two fits in one cell: the first (frozen base) done, the second killed and resumed.
    "fine-tuning": """
x = rng.normal(size=(640, 8)).astype("float32")
y = (x.sum(1) > 0).astype("int32")
base = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu")], name="base")
model = keras.Sequential([base, keras.layers.Dense(2, activation="softmax")])
base.trainable = False
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, epochs=2, batch_size=16, verbose=0)
base.trainable = True
model.compile(keras.optimizers.Adam(1e-4), "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x, y, epochs=5, initial_epoch=2, batch_size=16, callbacks=[Kill()], verbose=0)
""",
    # Sample weights with a weighted validation set, EarlyStopping with its best weights, ReduceLROnPlateau.
    "weighted-early-stopping": """
x = rng.normal(size=(800, 8)).astype("float32")
y = x.sum(1, keepdims=True)
w = rng.uniform(0.5, 1.5, size=800).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(keras.optimizers.Adam(0.01), "mse")
callbacks = [keras.callbacks.EarlyStopping(patience=3, restore_best_weights=True),
             keras.callbacks.ReduceLROnPlateau(patience=1), Kill()]
history = model.fit(x, y, sample_weight=w, validation_data=(x[:100], y[:100], w[:100]), epochs=5, batch_size=32,
                    callbacks=callbacks, verbose=0)
""",
}


@pytest.mark.parametrize("kind", sorted(EVERYDAY_FITS))
def test_everyday_fits_go_on_from_inside_an_epoch_after_a_rank_is_killed(session, kind, tmp_path, monkeypatch):
    monkeypatch.setattr(session.runner, "elastic_commit_steps", 3)
    mark, kill_epoch = tmp_path / "killed", 3 if kind == "fine-tuning" else 1
    cell = KILL_MID_EPOCH + EVERYDAY_FITS[kind]
    result = session.runner.run(
        CellWork(cell, {"MARK": str(mark), "KILL_EPOCH": kill_epoch}, 2), RunOptions(n=(1, 2), name=kind)
    )
    assert mark.exists(), "rank 1 was never killed"
    membership = result.job.membership
    assert [change["n"] for change in membership][:2] == [2, 1] and membership[1]["reason"].startswith("lost rank 1")
    assert result.job.state == "succeeded" and result.diverged is None
    epochs = result.values["history"].epoch
    if kind == "weighted-early-stopping":  # EarlyStopping may end it before its 5 epochs
        assert epochs == list(range(len(epochs))) and len(epochs) > 2
    else:
        assert epochs == {"dict-inputs": [0, 1, 2, 3], "fine-tuning": [2, 3, 4]}[kind]
    assert all(np.isfinite(w).all() for w in result.values["model"].get_weights())


# Rank 1's engine dies at the end of epoch 1 on 2 ranks; rank 0 writes the error its fit ended with to REPORT.
DEAD_PEER_CELL = """
import os
import keras
from jupyter_dl.runtime.job_backend import backend

rank, size = backend().rank_and_size()

class Die(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1 and size == 2 and rank == 1:
            os._exit(1)

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
try:
    history = model.fit(x_train, y_train, epochs=4, verbose=0, callbacks=[Die()])
except Exception as error:
    if size == 2:
        with open(REPORT, "w") as report:
            report.write(f"{type(error).__name__}: {error}")
    raise
"""


def test_on_tensorflows_collectives_the_survivors_hear_of_a_dead_engine_from_the_kernel(session, digits, tmp_path):
    """TensorFlow sees a peer that died between collectives only when its heartbeats have stopped for 10 s; the
    kernel sees the engine die at once and says so on the job's board, and the survivor's listener ends its
    collectives with that news (the error it leaves with names it)."""
    report = tmp_path / "report.txt"
    namespace = {"x_train": digits["x_train"], "y_train": digits["y_train"], "REPORT": str(report)}
    result = session.runner.run(CellWork(DEAD_PEER_CELL, namespace, 2), RunOptions(n=(1, 2), backend="tf"))
    assert result.job.state == "succeeded" and result.values["history"].epoch == [0, 1, 2, 3]
    assert result.job.membership[1]["reason"].startswith("lost rank 1 on ")
    assert "a peer left the job (rank 1's engine died)" in report.read_text()


TWO_FITS_CELL = """
import time
import keras
from jupyter_dl.runtime import elastic
from jupyter_dl.runtime.job_backend import backend

keras.utils.set_random_seed(1)

class WaitForTheKernel(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        rank, size = backend().rank_and_size()
        if rank == 0 and epoch == 0 and size == 2:
            deadline = time.monotonic() + 120
            while not elastic.pending_change() and time.monotonic() < deadline:
                time.sleep(0.05)

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
# Stops after its second epoch: no loss improves by 100.
stopped = model.fit(x_train, y_train, epochs=10, verbose=0,
                    callbacks=[keras.callbacks.EarlyStopping("loss", min_delta=100, patience=1)])
second = model.fit(x_train, y_train, epochs=4, verbose=0, callbacks=[WaitForTheKernel()])
"""


def test_a_fit_that_early_stopping_ended_is_restored_whole_when_a_later_fit_changes_group(session, digits):
    namespace = {"x_train": digits["x_train"], "y_train": digits["y_train"]}
    result = session.runner.run(CellWork(TWO_FITS_CELL, namespace, 2), RunOptions(n=(2, 4)))
    assert [change["n"] for change in result.job.membership] == [2, 4]
    # The cell ran twice; its first fit trained 2 epochs on 2 ranks and was restored, not trained on, the second time.
    assert result.values["stopped"].epoch == [0, 1]
    assert result.values["second"].epoch == [0, 1, 2, 3]


LOOP_CELL = """
import os
import keras
import numpy as np
import tensorflow as tf
import jupyter_dl
from jupyter_dl.runtime.job_backend import backend

keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
optimizer = keras.optimizers.Adam(0.002)
loss_fn = keras.losses.SparseCategoricalCrossentropy()
runs = []  # the epochs this run of the cell trained
for epoch in jupyter_dl.elastic_epochs(6, model, optimizer):
    runs.append(epoch)
    for start in range(0, len(x_train), 256):
        x, y = x_train[start:start + 256], y_train[start:start + 256]
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    if KILL and epoch == 3 and backend().rank_and_size()[0] == 1 and not os.path.exists(KILL):
        open(KILL, "w").close()
        os._exit(1)
final_loss = float(loss_fn(y_train, model(x_train)))
steps = int(optimizer.iterations.numpy())
"""


def test_a_custom_loop_resumes_after_its_last_committed_epoch_on_the_survivors(session, digits, tmp_path):
    namespace = {"x_train": digits["x_train"], "y_train": digits["y_train"]}
    fixed = session.runner.run(CellWork(LOOP_CELL, {**namespace, "KILL": ""}, 2), RunOptions(n=2))
    kill = str(tmp_path / "killed")
    result = session.runner.run(CellWork(LOOP_CELL, {**namespace, "KILL": kill}, 2), RunOptions(n=(1, 2)))
    assert os.path.exists(kill) and result.job.membership[1]["reason"].startswith("lost rank 1 on ")
    assert result.job.state == "succeeded" and result.diverged is None
    # Rank 1 died after epoch 3's last step, which rank 0 took with it and committed: the survivors' run of the
    # cell began after epoch 3.
    assert result.values["runs"] == [4, 5]
    # Every epoch's steps were taken once in the optimizer's count: the commit holds its iterations too.
    assert result.values["steps"] == fixed.values["steps"] == 6 * 6
    assert abs(result.values["final_loss"] - fixed.values["final_loss"]) < 0.1 * fixed.values["final_loss"]


def test_a_manual_loop_with_its_own_allreduce_resumes_likewise(session, digits, tmp_path):
    """A --manual cell averages its gradients itself (jupyter_dl.collectives, on either backend)."""
    line = "        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), " + (
        "model.trainable_variables))"
    )
    assert line in LOOP_CELL
    cell = LOOP_CELL.replace(
        line,
        "        grads = [collectives.allreduce(g) for g in tape.gradient(loss, model.trainable_variables)]\n"
        "        optimizer.apply_gradients(zip(grads, model.trainable_variables))",
    ).replace("import jupyter_dl\n", "import jupyter_dl\nfrom jupyter_dl import collectives\n")
    kill = str(tmp_path / "killed")
    namespace = {"x_train": digits["x_train"], "y_train": digits["y_train"], "KILL": kill}
    result = session.runner.run(CellWork(cell, namespace, 2), RunOptions(n=(1, 2), manual=True))
    assert os.path.exists(kill) and result.job.membership[1]["reason"].startswith("lost rank 1 on ")
    assert result.values["runs"] == [4, 5] and result.values["steps"] == 6 * 6


def test_elastic_epochs_is_a_plain_range_outside_an_elastic_job():
    import jupyter_dl

    assert list(jupyter_dl.elastic_epochs(3)) == [0, 1, 2]


def test_bad_elastic_options_are_refused_in_one_line_before_anything_starts():
    for options, words in [
        (RunOptions(n=(4, 2)), "MIN <= MAX"),
        (RunOptions(n=(2, 4), restarts=1, checkpoint_dir="/tmp/x"), "drop --restarts"),
        (RunOptions(n=(0, 4)), "two positive numbers"),
    ]:
        with pytest.raises(UsageError, match=words) as err:
            options.validate()
        assert "\n" not in str(err.value)
    fixed = RunOptions(n=(3, 3)).validate()
    assert fixed.n == 3 and not fixed.elastic


# --------------------------------------------------------------------------------------- with a GPU pool
def test_an_elastic_job_gives_gpus_back_in_the_middle_of_an_epoch_when_another_users_gang_arrives(
    session, digits, tmp_path, monkeypatch
):
    """ann's 2:4 job holds the pool's 4 (simulated) GPUs on 4 engines; bob's 2-GPU gang arrives while ann's job is
    at step 6 of epoch 1; the pool asks ann's job to shrink, it does so at its next commit point (after step 8), bob's
    gang is granted, and 2 ranks train the rest of that epoch: every sample once."""
    from local_hub import SERVICE, running_hub, user_token

    from jupyter_dl.pool.client import PoolClient

    monkeypatch.setattr(session.runner, "elastic_commit_steps", 4)
    fixed_history = _fixed_within_history(session, digits, "horovod", tmp_path / "fixed")
    session.cluster.ensure(4)
    records = tmp_path / "elastic"
    with running_hub(tmp_path, {"ann", "bob"}, ["--simulate-gpus=sim0:4", "--max-gpus=4"]) as hub:
        scopes = [f"access:services!service={SERVICE}"]
        bob = PoolClient(hub["url"], user_token(hub, "bob", scopes))
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", user_token(hub, "ann", scopes))
        monkeypatch.setattr(session.runner, "pool_url", hub["url"])
        outcome: dict = {}

        def run():
            outcome["value"] = _run_within(session, digits, (2, 4), "horovod", records, at=(1, 6, 4))

        job = threading.Thread(target=run)
        job.start()
        deadline = time.monotonic() + 180
        while not (records / "go").exists():  # rank 0 of 4 ranks at step 6 of epoch 1, waiting for a change
            assert time.monotonic() < deadline and job.is_alive(), "the elastic job never reached step 6 on 4 ranks"
            time.sleep(0.1)
        arrived = time.monotonic()
        ticket = bob.submit(2, job="bob-gang", owner="kernel-bob")
        while bob.ticket(ticket["id"])["state"] != "granted":
            assert time.monotonic() < deadline and job.is_alive(), "bob's gang was never granted"
            time.sleep(0.1)
        granted_after = time.monotonic() - arrived
        job.join(180)
        result, history = outcome["value"]
        membership = result.job.membership
        assert [change["n"] for change in membership] == [4, 2]
        assert membership[1]["reason"].startswith("shrank: ") and "bob" in membership[1]["reason"]
        assert result.job.state == "succeeded" and result.diverged is None and history.epoch == [0, 1, 2, 3]
        assert len(result.job.gpus) == 2
        counts = _times_each_sample_was_trained(records)
        # Epoch 1 ran on both groups: 4 ranks to the commit after step 8 (8 x 128 samples), 2 ranks the rest.
        assert sorted(counts) == [(0, 4), (1, 2), (1, 4), (2, 2), (3, 2)]
        assert counts[(1, 4)].sum() == 8 * 128 and counts[(1, 2)].sum() == WITHIN_SAMPLES - 8 * 128
        _assert_every_sample_once_per_epoch(counts, 4)
        assert abs(history.history["accuracy"][-1] - fixed_history.history["accuracy"][-1]) < 0.05
        print(f"bob's gang granted {granted_after:.1f}s after it arrived; ann's groups {membership}")
        bob.release(ticket["id"])


def test_a_group_whose_only_commit_holder_died_while_it_formed_fails_instead_of_starting_over(session, tmp_path):
    """`-n 1:2` starts on 1 engine (the other was taken away), commits 2 epochs, grows into the replacement; the leader
    (the only engine holding the commits) dies at the grown group's first line, before it could hand them on. The new
    engine holds nothing: going on would silently train from epoch 0 again. The job must fail, naming rank 0."""
    import json

    from elastic_faults import CELL, ElasticFault, give_it_back_once_training, take_one_engine_away

    from jupyter_dl.errors import RankError

    give_it_back_once_training(session.cluster, take_one_engine_away(session.cluster), str(tmp_path))
    fault = ElasticFault("leader-lost-in-regroup", "regroup", "sigkill", rank=0, grow=True)
    with pytest.raises(RankError) as err:
        session.runner.run(CellWork(CELL, fault.namespace(str(tmp_path)), 2), RunOptions(n=(1, 2), name=fault.name))
    assert err.value.rank == 0, str(err.value)
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    # The new engine never began the fit from scratch.
    assert not [e for e in events if e["event"] == "start" and e["pid"] != events[0]["pid"]], events


def test_after_a_commit_only_ranks_holding_one_survive_a_loss():
    from jupyter_dl.kernel.job.elastic import survivors

    dead = {"ok": False, "died": True, "ename": "EngineError"}
    holder = {"ok": False, "induced": True, "ename": "HorovodInternalError", "commits": 3}
    newcomer = {"ok": False, "induced": True, "ename": "HorovodInternalError", "commits": 0}
    assert survivors([7, 8], [dead, newcomer], committed=False) == [8]  # nothing committed yet: nothing to lose
    assert survivors([7, 8], [dead, newcomer], committed=True) == []  # the commit died with engine 7
    assert survivors([6, 7, 8], [holder, dead, newcomer], committed=True) == [6]  # engine 6 leads, 8 joins as new


def test_the_ranks_of_a_silent_host_count_as_lost_and_are_named_by_host():
    from jupyter_dl.kernel.job.elastic import survivors
    from jupyter_dl.kernel.job.runner import _lost_ranks_text

    silent = {"ok": False, "ename": "HostLost", "evalue": "host b stopped answering"}
    left = {"ok": False, "induced": True, "ename": "UnknownError", "commits": 5}
    dead = {"ok": False, "died": True, "ename": "EngineError"}
    assert survivors([1, 2, 3, 4], [left, left, silent, silent], committed=True) == [1, 2]
    hosts = ["a", "a", "b", "b"]
    assert _lost_ranks_text(hosts, [left, left, silent, silent]) == "host b (ranks 2, 3)"
    assert _lost_ranks_text(hosts, [left, dead, silent, silent]) == "host b (ranks 2, 3), rank 1 on a"


# ------------------------------------------------------------------------------ Horovod's own elastic API, --manual
# Horovod's TF2 elastic example on digits: a TensorFlowKerasState committed after every batch; rank 0 writes each
# step it took (epoch, batch, group size) to STEPS. Rank 1 dies once, right after the commit that follows batch 3 of
# epoch 1.
HVD_LOOP_CELL = """
import os
import keras
import tensorflow as tf
import horovod.tensorflow as hvd

hvd.init()
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
optimizer = keras.optimizers.Adam(0.002)
loss_fn = keras.losses.SparseCategoricalCrossentropy()

@tf.function
def train_one_batch(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    tape = hvd.DistributedGradientTape(tape)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS:
        batches = len(x_train) // (32 * hvd.size())
        while state.batch < batches:
            start = (state.batch * hvd.size() + hvd.rank()) * 32
            train_one_batch(x_train[start:start + 32], y_train[start:start + 32])
            if hvd.rank() == 0:
                with open(STEPS, "a") as f:
                    f.write(f"{state.epoch} {state.batch} {hvd.size()}\\n")
            state.batch += 1
            state.commit()
            if KILL and hvd.rank() == 1 and (state.epoch, state.batch) == (1, 4) and not os.path.exists(KILL):
                open(KILL, "w").close()
                os._exit(1)
        state.epoch, state.batch = state.epoch + 1, 0
        state.commit()

state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)
train(state)
final_loss = float(loss_fn(y_train, model(x_train)))
steps = int(optimizer.iterations.numpy())
"""

# Horovod's Keras elastic example on digits: KerasState, its three callbacks, the learning rate rescaled on reset.
HVD_FIT_CELL = """
import os
import keras
import horovod.tensorflow.keras as hvd

hvd.init()
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
lr = 0.002
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(lr * hvd.size())),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
rates = []  # the learning rate each run of train() started with

def on_state_reset():
    model.optimizer.learning_rate.assign(lr * hvd.size())

class Kill(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if KILL and hvd.rank() == 1 and state.epoch == 3 and not os.path.exists(KILL):
            open(KILL, "w").close()
            os._exit(1)

state = hvd.elastic.KerasState(model, batch=0, epoch=0)
state.register_reset_callbacks([on_state_reset])
callbacks = [hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
             hvd.elastic.UpdateEpochStateCallback(state), Kill()]

@hvd.elastic.run
def train(state):
    rates.append(round(float(model.optimizer.learning_rate.numpy()), 6))
    shard = slice(hvd.rank(), None, hvd.size())
    return model.fit(x_train[shard], y_train[shard], batch_size=32, callbacks=callbacks,
                     epochs=EPOCHS - state.epoch, verbose=0)

history = train(state)
accuracy = model.evaluate(x_train, y_train, verbose=0)[1]
steps = int(model.optimizer.iterations.numpy())
"""


def _steps_taken(path) -> list:
    return [tuple(int(v) for v in line.split()) for line in path.read_text().splitlines()]


def test_horovods_own_elastic_loop_resumes_at_the_committed_batch_on_the_survivors(session, digits, tmp_path):
    namespace = {"x_train": digits["x_train"], "y_train": digits["y_train"], "EPOCHS": 3}
    fixed_steps = tmp_path / "fixed.txt"
    fixed = session.runner.run(
        CellWork(HVD_LOOP_CELL, {**namespace, "KILL": "", "STEPS": str(fixed_steps)}, 2), RunOptions(n=2, manual=True)
    )
    assert _steps_taken(fixed_steps) == [(e, b, 2) for e in range(3) for b in range(21)]
    kill, steps = tmp_path / "killed", tmp_path / "steps.txt"
    namespace.update(KILL=str(kill), STEPS=str(steps))
    result = session.runner.run(CellWork(HVD_LOOP_CELL, namespace, 2), RunOptions(n=(1, 2), manual=True))
    assert kill.exists() and result.job.membership[1]["reason"].startswith("lost rank 1 on ")
    assert result.job.state == "succeeded" and result.diverged is None
    taken = _steps_taken(steps)
    # Up to the commit after batch 3 of epoch 1, the fixed run's steps; then the survivor went on from that commit
    # (batch 4) on its own, each batch once, nothing from the start again (a grow back to 2 later is another commit).
    assert taken[: 21 + 4] == _steps_taken(fixed_steps)[: 21 + 4]
    assert taken[21 + 4][:3] == (1, 4, 1), taken[21 + 4]
    positions = [(epoch, batch) for epoch, batch, _ in taken]
    assert positions == sorted(set(positions)) and positions[-1][0] == 2
    # The optimizer's step count came back with the commit: one per step taken, in every group.
    assert result.values["steps"] == len(taken)
    # One rank alone takes twice the steps per epoch (the cell's own batching): it trains at least as far.
    assert result.values["final_loss"] < 1.15 * fixed.values["final_loss"]


def test_horovods_own_keras_elastic_state_and_callbacks_resume_from_the_commit(session, digits, tmp_path):
    namespace = {"x_train": digits["x_train"], "y_train": digits["y_train"], "EPOCHS": 6}
    fixed = session.runner.run(CellWork(HVD_FIT_CELL, {**namespace, "KILL": ""}, 2), RunOptions(n=2, manual=True))
    assert len(fixed.values["history"].epoch) == 6 and fixed.values["rates"] == [0.004]
    kill = tmp_path / "killed"
    result = session.runner.run(
        CellWork(HVD_FIT_CELL, {**namespace, "KILL": str(kill)}, 2), RunOptions(n=(1, 2), manual=True)
    )
    membership = result.job.membership
    assert kill.exists() and membership[1]["reason"].startswith("lost rank 1 on ")
    assert result.job.state == "succeeded" and result.diverged is None
    # Rank 1 died after epoch 3's commits (Horovod's callbacks commit before the epoch count moves on, so the commit
    # says epoch 2): the last group's fit trained only the epochs after it, not all 6 again.
    history = result.values["history"]
    assert 1 <= len(history.epoch) <= 6 - 2, history.epoch
    # The reset callback rescaled the restored learning rate for the group's size (--manual: the cell's own rule).
    assert result.values["rates"] == [round(0.002 * membership[-1]["n"], 6)]
    assert result.values["steps"] > fixed.values["steps"] // 2  # the commit's step count, not a fresh optimizer's
    assert abs(result.values["accuracy"] - fixed.values["accuracy"]) < 0.05
