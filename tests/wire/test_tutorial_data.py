"""Data, callbacks, seeds and environment as the Keras tutorials write them, in cells before the distributed one.

The pipelines (`.cache().prefetch(AUTOTUNE)`, a shuffle before a cache, a zip, a dataset of dicts for a two-input model,
`timeseries_dataset_from_array`, `image_dataset_from_directory(subset="both")`, a notebook `PyDataset`), the callbacks
(ModelCheckpoint("best.keras", save_best_only=True), EarlyStopping(restore_best_weights=True), CSVLogger, a
LearningRateScheduler over a notebook function), `keras.utils.set_random_seed` and `os.environ[...]` are each set up
in plain notebook cells; only the training cell runs under `%%distribute -n 2` (seeds on both backends); the notebook
then uses the result as one process would (evaluate, load_model, read the log). Each check groups several cases into one
job to keep the file short to run.
"""

import csv
import math
import os

import numpy as np
import pytest
from notebook_cells import cell as _cell
from notebook_cells import close as _close

BACKENDS = ["horovod", "tf"]


IMPORTS = """
import math, os, random
import keras, numpy as np, tensorflow as tf
from keras import layers, ops
"""

# ------------------------------------------------------------------------------------------------------ pipelines

PIPELINES = """
ds_cached = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1400, seed=0).batch(32)
             .map(lambda x, y: (x * 2.0 - 1.0, y), num_parallel_calls=tf.data.AUTOTUNE)
             .cache().prefetch(tf.data.AUTOTUNE))
ds_zip = tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(x_train),
                              tf.data.Dataset.from_tensor_slices(y_train))).shuffle(1400, seed=0).batch(32)
ds_dict = tf.data.Dataset.from_tensor_slices(({"top": x_train[:, :32], "bottom": x_train[:, 32:]}, y_train)).batch(32)
series = np.sin(np.arange(1200) / 20.0).astype("float32")
ds_series = keras.utils.timeseries_dataset_from_array(series[:-10], series[10:], sequence_length=10, batch_size=32,
                                                      shuffle=True, seed=0)
train_images, val_images = keras.utils.image_dataset_from_directory(
    folder, validation_split=0.25, subset="both", seed=1337, image_size=(8, 8), batch_size=8)
train_images = train_images.map(lambda x, y: (x / 255.0, y)).cache().prefetch(tf.data.AUTOTUNE)
val_images = val_images.map(lambda x, y: (x / 255.0, y))
# Sixteen samples, each its own one-hot feature: a weight per sample counts how often training saw it.
ds_seen = (tf.data.Dataset.from_tensor_slices((np.eye(16, dtype="float32"), np.zeros(16, "float32")))
           .shuffle(16, seed=1).batch(2).cache())


class DigitBatches(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, idx):
        low = idx * self.batch_size
        high = min(low + self.batch_size, len(self.x))
        return self.x[low:high], self.y[low:high]


batches = DigitBatches(x_train, y_train, 32)
"""

MODELS = """
keras.utils.set_random_seed(0)

def classifier(shape, classes):
    model = keras.Sequential([keras.Input(shape), layers.Flatten(), layers.Dense(32, activation="relu"),
                              layers.Dense(classes, activation="softmax")])
    model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model

model_cached, model_zip, model_batches = classifier((64,), 10), classifier((64,), 10), classifier((64,), 10)
model_images = classifier((8, 8, 3), 2)
top, bottom = keras.Input((32,), name="top"), keras.Input((32,), name="bottom")
merged = layers.concatenate([layers.Dense(16, activation="relu")(top), layers.Dense(16, activation="relu")(bottom)])
model_dict = keras.Model({"top": top, "bottom": bottom}, layers.Dense(10, activation="softmax")(merged))
model_dict.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
model_series = keras.Sequential([keras.Input((10,)), layers.Dense(16, activation="relu"), layers.Dense(1)])
model_series.compile(keras.optimizers.Adam(3e-3), "mse")

def seen_loss(y_true, y_pred):  # each time a sample is in a batch, its weight grows by the same step
    return -ops.mean(y_pred)

model_seen = keras.Sequential([keras.Input((16,)), layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
model_seen.compile(keras.optimizers.SGD(1.0), seen_loss)
"""

FITS = """
h_cached = model_cached.fit(ds_cached, epochs=2, verbose=0)
h_zip = model_zip.fit(ds_zip, epochs=2, verbose=0)
h_dict = model_dict.fit(ds_dict, epochs=2, verbose=0)
h_series = model_series.fit(ds_series, epochs=2, verbose=0)
h_images = model_images.fit(train_images, validation_data=val_images, epochs=8, verbose=0)
h_batches = model_batches.fit(batches, epochs=2, verbose=0)
h_seen = model_seen.fit(ds_seen, epochs=3, verbose=0)
seen = model_seen.get_weights()[0].ravel()
"""

EVALUATIONS = """
scores = {
    "cached": model_cached.evaluate(ds_cached, verbose=0)[0],
    "zip": model_zip.evaluate(ds_zip, verbose=0)[0],
    "dict": model_dict.evaluate(ds_dict, verbose=0)[0],
    "series": model_series.evaluate(ds_series, verbose=0),
    "images": model_images.evaluate(val_images, verbose=0)[0],
    "batches": model_batches.evaluate(batches, verbose=0)[0],
}
"""


def _write_images(folder, per_class=40):
    """Two classes of 8x8 RGB PNGs: dark noise and bright noise."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for name, low, high in (("dark", 0, 110), ("bright", 145, 256)):
        os.makedirs(folder / name)
        for i in range(per_class):
            pixels = rng.integers(low, high, (8, 8, 3)).astype("uint8")
            tf.io.write_file(str(folder / name / f"{i:03d}.png"), tf.io.encode_png(pixels))


def test_pipelines_built_in_earlier_cells_train_on_two_ranks(shell, digits, tmp_path):
    """Six tutorial pipelines, each built in a notebook cell, fed to six models in one distributed cell. Afterwards
    the notebook's pipelines still feed the models that came back, and each model's loss is below its untrained
    loss and within x2.5 of one process's (measured: time series 0.0094 in one process, 0.024 on two ranks after
    half the steps of twice the batch; the classifiers within 20%; the images need 8 epochs of 4 steps a rank to
    leave chance)."""
    _write_images(tmp_path / "images")
    shell.user_ns.update(digits, folder=str(tmp_path / "images"))
    _cell(shell, IMPORTS + PIPELINES)
    untrained = _cell(shell, MODELS + EVALUATIONS)["scores"]
    _cell(shell, FITS)
    one = _cell(shell, EVALUATIONS)["scores"]
    assert np.allclose(shell.user_ns["seen"], 1.5), shell.user_ns["seen"]  # every sample once an epoch, 3 epochs
    _cell(shell, MODELS)
    _cell(shell, FITS, distribute=True, backend="tf")  # the ranks shard the pipelines the same on either backend
    two = _cell(shell, EVALUATIONS)["scores"]
    for name in one:
        assert two[name] < untrained[name], (name, two[name], untrained[name])
        _close(two[name], one[name], 2.5, name)
    ns = shell.user_ns
    # Every sample once an epoch on two ranks too: with a .cache() after the shuffle a rank that stopped reading
    # short of the end re-shuffled each epoch while the other replayed the cached order, so their shares overlapped.
    assert np.allclose(ns["seen"], 1.5), ns["seen"]
    # 1400 samples in batches of 32 shared by 2 ranks: 22 steps an epoch each (the PyDataset's 44 batches too).
    assert [int(ns[m].optimizer.iterations.numpy()) for m in ("model_cached", "model_zip", "model_batches")] == [44] * 3
    assert len(ns["h_images"].history["val_accuracy"]) == 8, ns["h_images"].history


# ------------------------------------------------------------------------------------------------------ callbacks

CALLBACKS = """
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), layers.Dense(32, activation="relu"),
                          layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])

def scheduler(epoch, lr):
    if epoch < 2:
        return lr
    return float(lr * ops.exp(-0.5))

callbacks = [
    keras.callbacks.ModelCheckpoint("best.keras", monitor="val_loss", save_best_only=True),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True),
    keras.callbacks.CSVLogger("training.log"),
    keras.callbacks.LearningRateScheduler(scheduler),
]
"""

CALLBACK_FIT = (
    "history = model.fit(x_train, y_train, epochs=4, batch_size=32, validation_data=(x_test, y_test), "
    "callbacks=callbacks, verbose=0)\n"
)

AFTER_CALLBACKS = """
best = keras.models.load_model("best.keras")
best_loss = best.evaluate(x_test, y_test, verbose=0)[0]
model_loss = model.evaluate(x_test, y_test, verbose=0)[0]
rate = float(model.optimizer.learning_rate)
"""


def test_callbacks_made_in_the_notebook_write_where_the_notebook_reads(shell, digits, tmp_path, monkeypatch):
    """The usual callbacks with relative paths, made in a plain cell: after the distributed fit the notebook loads
    best.keras from its own folder and it is the best epoch's model (EarlyStopping restored the same weights), the
    CSV log has one row an epoch (written once, not once per rank), and the scheduler's rate is the notebook's."""
    monkeypatch.chdir(tmp_path)
    shell.user_ns.update(digits)
    _cell(shell, IMPORTS)
    for run in ("one", "two"):
        os.makedirs(run)
        os.chdir(run)
        _cell(shell, CALLBACKS)
        _cell(shell, CALLBACK_FIT, distribute=run == "two")  # rank 0 alone writes files, on either backend
        ns = _cell(shell, AFTER_CALLBACKS)
        epochs = len(ns["history"].history["loss"])
        best_val = min(ns["history"].history["val_loss"])
        assert sorted(os.listdir()) == ["best.keras", "training.log"], (run, os.listdir())
        with open("training.log") as log:
            rows = list(csv.DictReader(log))
        assert [int(row["epoch"]) for row in rows] == list(range(epochs)), (run, rows)
        assert np.isclose(ns["best_loss"], best_val, rtol=1e-4), (run, ns["best_loss"], best_val)
        assert np.isclose(ns["model_loss"], best_val, rtol=1e-4), (run, ns["model_loss"], best_val)
        assert np.isclose(ns["rate"], 3e-3 * math.exp(-0.5) ** max(0, epochs - 2), rtol=1e-4), (run, ns["rate"])
        os.chdir("..")


# ---------------------------------------------------------------------------------------- seed and environment

SEEDED_CELL = """
model = keras.Sequential([keras.Input((64,)), layers.Dense(16, activation="relu"),
                          layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy")
initial = [w.copy() for w in model.get_weights()]
drawn = (random.random(), float(np.random.rand()), float(keras.random.uniform(())),
         int(tf.random.uniform((), 0, 10**9)))
flag = os.environ.get("DIGITS_FLAG")
kept_out = (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("TF_CONFIG"))
in_colab = ("google.colab" in str(get_ipython()), get_ipython() is not None)
history = model.fit(x_train, y_train, epochs=1, batch_size=64, verbose=0)
"""

AFTER_SEEDED = "after = (random.random(), float(np.random.rand()))\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_seed_and_variables_set_in_earlier_cells_hold_on_the_ranks(shell, digits, monkeypatch, backend):
    """`keras.utils.set_random_seed(1)` in an earlier cell: the model the distributed cell builds starts from the
    weights one process would draw, every generator the cell draws from (Python, NumPy, Keras, TensorFlow) gives
    what it gives in one process, and the notebook's next cell draws on from there. A variable an earlier cell set
    in os.environ is there for the cell, gone from the engines afterwards; `get_ipython()` answers on the ranks
    (notebooks check for Colab with it); the notebook's device
    and TensorFlow cluster settings are not sent (each rank's own placement holds)."""
    shell.user_ns.update(digits)
    monkeypatch.delenv("DIGITS_FLAG", raising=False)
    _cell(shell, IMPORTS)
    runs = {}
    for run in ("one", "two"):
        _cell(shell, "keras.utils.set_random_seed(1)\nwarm_up = random.random()\n")  # draws between seed and cell
        _cell(shell, 'os.environ["DIGITS_FLAG"] = "on"\n')
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # as a notebook might, for its own process
        monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
        ns = _cell(shell, SEEDED_CELL, distribute=run == "two", backend=backend)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        monkeypatch.delenv("TF_CONFIG")
        ns = _cell(shell, AFTER_SEEDED)
        runs[run] = {name: ns[name] for name in ("initial", "drawn", "flag", "kept_out", "after", "in_colab")}
    one, two = runs["one"], runs["two"]
    for mine, theirs in zip(two["initial"], one["initial"]):
        np.testing.assert_array_equal(mine, theirs)
    assert two["drawn"] == one["drawn"]
    assert two["after"] == one["after"]
    assert one["flag"] == two["flag"] == "on"
    assert one["in_colab"] == two["in_colab"] == (False, True)  # the Colab check: get_ipython() on a rank too
    assert "7" != two["kept_out"][0] and two["kept_out"][1] is None, two["kept_out"]
    monkeypatch.delenv("DIGITS_FLAG")
    left = _cell(shell, 'left = os.environ.get("DIGITS_FLAG")', distribute=True, backend=backend)["left"]
    assert left is None
