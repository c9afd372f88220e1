"""Training code as the Keras guides write it, set up in plain cells and run under `%%distribute -n 2`.

Losses and metrics the way users write them (a Loss or Metric subclass with its own constructor arguments and no
get_config, a closure `make_loss(alpha)`, a loss reading a notebook global), the "customizing what happens in fit"
guide's train_step updating NOTEBOOK-GLOBAL trackers, the "training loop from scratch" guide's `@tf.function
train_step` defined in an earlier cell over the notebook's model, optimizer and metrics, a two-phase transfer learning
and the functional API guide's multi-input multi-output model with dicts. Real 2-rank jobs on the local cluster; the
notebook then uses what came back as one process would (its own objects hold the training, a dict of Histories comes
back, the notebook's classes still read the notebook's globals). Several cases share one job to keep the file short.
"""

import math

import numpy as np
import pytest
from notebook_cells import cell as _cell
from notebook_cells import close

BACKENDS = ["horovod", "tf"]


LOSSES_AND_METRICS = """
import keras
from keras import layers, ops


class ScaledCrossentropy(keras.losses.Loss):
    def __init__(self, scale, name="scaled_ce"):
        super().__init__(name=name)
        self.scale = scale

    def call(self, y_true, y_pred):
        return self.scale * keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)


class ConfidentHits(keras.metrics.Metric):
    def __init__(self, threshold, name="confident_hits"):
        super().__init__(name=name)
        self.threshold = threshold
        self.hits = self.add_variable(shape=(), initializer="zeros", name="hits")

    def update_state(self, y_true, y_pred, sample_weight=None):
        top = ops.max(ops.softmax(y_pred), axis=-1)
        self.hits.assign_add(ops.sum(ops.cast(top > self.threshold, "float32")))

    def result(self):
        return self.hits

    def reset_state(self):
        self.hits.assign(0.0)


def make_loss(alpha):
    def loss(y_true, y_pred):
        return alpha * keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)

    return loss


LABEL_SMOOTHING = 0.1


def smoothed_loss(y_true, y_pred):
    y = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), 10)
    y = y * (1 - LABEL_SMOOTHING) + LABEL_SMOOTHING / 10
    return keras.losses.categorical_crossentropy(y, y_pred, from_logits=True)


def get_model():
    return keras.Sequential([keras.Input((64,)), layers.Dense(32, activation="relu"), layers.Dense(10)])


keras.utils.set_random_seed(1)
scaled_loss = ScaledCrossentropy(0.5)
subclassed_loss = get_model()
subclassed_loss.compile(optimizer="adam", loss=scaled_loss, metrics=["accuracy", ConfidentHits(0.5)])
closure_loss = get_model()
closure_loss.compile(optimizer=keras.optimizers.Adam(1e-2), loss=make_loss(0.9), metrics=["accuracy"])
global_loss = get_model()
global_loss.compile(optimizer=keras.optimizers.Adam(1e-2), loss=smoothed_loss, metrics=["accuracy"])
"""

LOSSES_FIT = """histories = {}
for name, model in [("subclassed_loss", subclassed_loss), ("closure_loss", closure_loss), ("global_loss", global_loss)]:
    histories[name] = model.fit(x_train[:640], y_train[:640], epochs=2, batch_size=32, verbose=0)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_losses_and_metrics_written_as_users_write_them(shell, digits, backend):
    shell.user_ns.update(digits)
    _cell(shell, LOSSES_AND_METRICS)
    ns = _cell(shell, LOSSES_FIT, distribute=True, backend=backend)
    assert ns["subclassed_loss"].loss is ns["scaled_loss"] and ns["scaled_loss"].scale == 0.5
    for name in ("subclassed_loss", "closure_loss", "global_loss"):
        model = ns[name]
        assert int(model.optimizer.iterations.numpy()) == 2 * math.ceil(320 / 32), name
        results = model.evaluate(ns["x_test"], ns["y_test"], verbose=0, return_dict=True)
        assert results["accuracy"] > 0.3 and math.isfinite(results["loss"]), (name, results)
        assert ns["histories"][name].history["loss"][-1] < ns["histories"][name].history["loss"][0], name
    assert "confident_hits" in ns["histories"]["subclassed_loss"].history


CUSTOM_FIT = """
import numpy as np
import tensorflow as tf
import keras

loss_tracker = keras.metrics.Mean(name="loss")
mae_metric = keras.metrics.MeanAbsoluteError(name="mae")


class TrackedModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = keras.losses.mean_squared_error(y, y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        loss_tracker.update_state(loss)
        mae_metric.update_state(y, y_pred)
        return {"loss": loss_tracker.result(), "mae": mae_metric.result()}

    @property
    def metrics(self):
        return [loss_tracker, mae_metric]


class WeightedModel(keras.Model):
    def train_step(self, data):
        if len(data) == 3:
            x, y, sample_weight = data
        else:
            sample_weight = None
            x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred, sample_weight=sample_weight)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)
        return {m.name: m.result() for m in self.metrics}


keras.utils.set_random_seed(1)
x = np.random.default_rng(0).random((1000, 32)).astype("float32")
y = x[:, :1] * 2 + 0.1
sw = np.random.default_rng(1).random((1000, 1)).astype("float32")
inputs = keras.Input(shape=(32,))
tracked = TrackedModel(inputs, keras.layers.Dense(1)(inputs))
tracked.compile(optimizer="adam")
inputs = keras.Input(shape=(32,))
weighted = WeightedModel(inputs, keras.layers.Dense(1)(inputs))
weighted.compile(optimizer="adam", loss="mse", metrics=["mae"])
"""

CUSTOM_FIT_CELL = """tracked_history = tracked.fit(x, y, epochs=3, verbose=0)
weighted_history = weighted.fit(x, y, sample_weight=sw, epochs=3, verbose=0)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_train_step_updating_notebook_global_trackers(shell, backend):
    ns = _cell(shell, CUSTOM_FIT)
    tracker, mae = ns["loss_tracker"], ns["mae_metric"]
    ns = _cell(shell, CUSTOM_FIT_CELL, distribute=True, backend=backend)
    assert ns["loss_tracker"] is tracker and ns["mae_metric"] is mae
    # The notebook's class still reads the notebook's globals: its metrics are the notebook's own trackers.
    assert ns["tracked"].metrics[0] is tracker and ns["tracked"].metrics[1] is mae, ns["tracked"].metrics
    # ...which hold the last epoch's running means (rank 0's half of the samples), as the training left them.
    assert 0 < int(tracker.count.numpy()) <= 1000 and float(tracker.result()) > 0, float(tracker.count.numpy())
    assert math.isfinite(float(mae.result())) and float(mae.result()) > 0
    losses = ns["tracked_history"].history["loss"]
    assert losses[-1] < losses[0] and abs(float(tracker.result()) - losses[-1]) < 0.5 * losses[-1], losses
    assert set(ns["weighted_history"].history) == {"loss", "mae"}, ns["weighted_history"].history
    assert ns["weighted_history"].history["loss"][-1] < ns["weighted_history"].history["loss"][0]
    results = ns["weighted"].evaluate(ns["x"], ns["y"], verbose=0, return_dict=True)
    assert math.isfinite(results["loss"]) and results["mae"] < 1.5, results


LOOP_SETUP = """
import tensorflow as tf
import keras
from keras import layers

keras.utils.set_random_seed(1)
inputs = keras.Input(shape=(64,), name="digits")
outputs = layers.Dense(10, name="predictions")(layers.Dense(32, activation="relu")(inputs))
model = keras.Model(inputs=inputs, outputs=outputs)
optimizer = keras.optimizers.SGD(learning_rate=5e-2)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
train_acc_metric = keras.metrics.SparseCategoricalAccuracy()
val_acc_metric = keras.metrics.SparseCategoricalAccuracy()
train_dataset = tf.data.Dataset.from_tensor_slices((x_train[:640], y_train[:640])).shuffle(1024, seed=0).batch(32)
val_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(32)

eager_model = keras.Sequential([keras.Input((64,)), layers.Dense(32, activation="relu"), layers.Dense(10)])
eager_optimizer = keras.optimizers.Adam(1e-3)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply(grads, model.trainable_weights)
    train_acc_metric.update_state(y, logits)
    return loss_value


@tf.function
def test_step(x, y):
    val_logits = model(x, training=False)
    val_acc_metric.update_state(y, val_logits)


def eager_train_step(x, y):
    with tf.GradientTape() as tape:
        loss_value = loss_fn(y, eager_model(x, training=True))
    grads = tape.gradient(loss_value, eager_model.trainable_weights)
    eager_optimizer.apply_gradients(zip(grads, eager_model.trainable_weights))
    return loss_value
"""

LOOP = """for epoch in range(2):
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        loss_value = train_step(x_batch_train, y_batch_train)
    train_acc = train_acc_metric.result()
    print("Training acc over epoch: %.4f" % (float(train_acc),))
    train_acc_metric.reset_state()
    for x_batch_val, y_batch_val in val_dataset:
        test_step(x_batch_val, y_batch_val)
    val_acc = val_acc_metric.result()
    val_acc_metric.reset_state()
for i in range(0, 640, 64):
    eager_loss = eager_train_step(x_train[i : i + 64], y_train[i : i + 64])
test_step(x_test, y_test)  # the metric holds this, after the loop's reset
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_training_loop_from_scratch_over_functions_of_an_earlier_cell(shell, digits, backend):
    shell.user_ns.update(digits)
    single = _cell(shell, LOOP_SETUP)
    _cell(shell, LOOP)
    expected = {
        "weights": [w.numpy() for w in single["model"].weights + single["eager_model"].weights],
        "val_acc": float(single["val_acc_metric"].result()),
        "loss": float(single["loss_value"]),
    }
    ns = _cell(shell, LOOP_SETUP)
    objects = {name: ns[name] for name in ("model", "optimizer", "val_acc_metric", "eager_model", "eager_optimizer")}
    ns = _cell(shell, LOOP, distribute=True, backend=backend)
    for name, value in objects.items():
        assert ns[name] is value, f"{name}: the notebook's object was replaced"
    steps = 640 // 32  # every rank runs the whole loop over the whole dataset: averaged gradients agree
    assert int(ns["optimizer"].iterations.numpy()) == 2 * steps, int(ns["optimizer"].iterations.numpy())
    assert int(ns["eager_optimizer"].iterations.numpy()) == 640 // 64
    for mine, theirs in zip([w.numpy() for w in ns["model"].weights + ns["eager_model"].weights], expected["weights"]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)
    assert float(ns["val_acc_metric"].result()) == pytest.approx(expected["val_acc"], abs=1e-6)
    assert float(ns["loss_value"]) == pytest.approx(expected["loss"], rel=1e-4)
    assert ns["optimizer"].iterations.numpy() > 0 and float(ns["train_acc"]) > 0.2


TRANSFER = """
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
images = rng.random((128, 32, 32, 3)).astype("float32")
labels = (images[:, :16, :, 0].mean(axis=(1, 2)) > images[:, 16:, :, 0].mean(axis=(1, 2))).astype("float32")
base_model = keras.Sequential(
    [keras.Input((32, 32, 3)), layers.Conv2D(8, 3, strides=2), layers.BatchNormalization(), layers.ReLU()],
    name="base",
)
base_model.trainable = False
inputs = keras.Input(shape=(32, 32, 3))
x = base_model(inputs, training=False)
x = keras.layers.GlobalAveragePooling2D()(x)
x = keras.layers.Dropout(0.2)(x)
outputs = keras.layers.Dense(1)(x)
model = keras.Model(inputs, outputs)
model.compile(keras.optimizers.Adam(), keras.losses.BinaryCrossentropy(from_logits=True), metrics=["binary_accuracy"])
frozen = [w.numpy().copy() for w in base_model.weights]
"""

FINE_TUNE = """
base_model.trainable = True
model.compile(keras.optimizers.Adam(1e-5), keras.losses.BinaryCrossentropy(from_logits=True), metrics=["accuracy"])
fine_optimizer = model.optimizer
"""


def test_transfer_learning_trains_the_head_then_fine_tunes_the_base(shell):
    ns = _cell(shell, TRANSFER)
    base = ns["base_model"]
    _cell(shell, "history = model.fit(images, labels, epochs=2, batch_size=32, verbose=0)", distribute=True)
    assert ns["base_model"] is base and ns["model"].layers[1] is base
    for before, weight in zip(ns["frozen"], base.weights):  # frozen: its BatchNorm statistics too
        np.testing.assert_array_equal(before, weight.numpy(), err_msg=weight.path)
    assert int(ns["model"].optimizer.iterations.numpy()) == 4
    _cell(shell, FINE_TUNE)
    _cell(shell, "fine = model.fit(images, labels, epochs=1, batch_size=32, verbose=0)", distribute=True)
    assert ns["model"].optimizer is ns["fine_optimizer"] and int(ns["fine_optimizer"].iterations.numpy()) == 2
    kernel = base.layers[0].kernel.numpy()
    assert not np.array_equal(kernel, ns["frozen"][0]), "fine-tuning did not reach the base model"
    loss, accuracy = ns["model"].evaluate(ns["images"], ns["labels"], verbose=0)
    assert math.isfinite(loss) and 0 <= accuracy <= 1


# keras.io's "Transfer learning & fine-tuning" as it lays out its cells: the model is compiled in the cell that fits
# it, and the fine-tuning cell unfreezes `base_model` by its own name before compiling and fitting again.
TRANSFER_UNCOMPILED = "\n".join(line for line in TRANSFER.splitlines() if not line.startswith("model.compile("))
TRANSFER_FIT = """
model.compile(optimizer=keras.optimizers.Adam(), loss=keras.losses.BinaryCrossentropy(from_logits=True),
              metrics=[keras.metrics.BinaryAccuracy()])
model.fit(images, labels, epochs=2, batch_size=32, verbose=0)
"""
TRANSFER_FINE_TUNE = """
base_model.trainable = True
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.BinaryCrossentropy(from_logits=True),
              metrics=[keras.metrics.BinaryAccuracy()])
model.fit(images, labels, epochs=1, batch_size=32, verbose=0)
tuned = float(np.abs(base_model.layers[0].kernel.numpy() - frozen[0]).max())
"""


def test_keras_io_transfer_learning_compiling_in_its_fit_cells_fine_tunes_the_base(shell):
    """Before: the first fit's compile made the model come back as a copy, so the notebook's `base_model` was no
    longer inside it, and the fine-tuning cell's `base_model.trainable = True` left the model's base frozen (0.0)."""
    assert TRANSFER_UNCOMPILED != TRANSFER
    _cell(shell, TRANSFER_UNCOMPILED)
    _cell(shell, TRANSFER_FIT)
    one = _cell(shell, TRANSFER_FINE_TUNE)["tuned"]
    ns = _cell(shell, TRANSFER_UNCOMPILED)
    model, base = ns["model"], ns["base_model"]
    _cell(shell, TRANSFER_FIT, distribute=True)
    assert ns["model"] is model and model.layers[1] is base and not base.trainable
    for before, weight in zip(ns["frozen"], base.weights):  # frozen in the first fit
        np.testing.assert_array_equal(before, weight.numpy(), err_msg=weight.path)
    assert int(model.optimizer.iterations.numpy()) == 4  # the cell's optimizer, with its steps
    _cell(shell, TRANSFER_FINE_TUNE, distribute=True)
    assert ns["model"] is model and model.layers[1] is base and base.trainable
    assert int(model.optimizer.iterations.numpy()) == 2  # the fine-tuning compile's fresh optimizer
    close(ns["tuned"], one, 3, "how far fine-tuning moved the base's kernel")


# An autoencoder over the notebook's `encoder` and `decoder`, compiled and trained in one distributed cell; a later
# cell encodes with `encoder` itself.
AUTOENCODER = """
import numpy as np
import keras

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
encoder = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)], name="encoder")
decoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)], name="decoder")
autoencoder = keras.Sequential([encoder, decoder])
untrained = encoder.get_weights()[0].copy()
"""
AUTOENCODER_FIT = """
autoencoder.compile("adam", "mse")
autoencoder.fit(x, x, epochs=3, batch_size=32, verbose=0)
"""
AUTOENCODER_USE = """
codes = encoder.predict(x, verbose=0)
error = float(np.mean((decoder.predict(codes, verbose=0) - x) ** 2))
"""


def test_a_model_compiled_in_its_fit_cell_stays_the_notebook_s_so_its_parts_hold_the_training(shell):
    """Before: `encoder` kept its untrained weights (the trained autoencoder came back as a copy)."""
    _cell(shell, AUTOENCODER)
    _cell(shell, AUTOENCODER_FIT)
    one = _cell(shell, AUTOENCODER_USE)["error"]
    ns = _cell(shell, AUTOENCODER)
    autoencoder, encoder = ns["autoencoder"], ns["encoder"]
    _cell(shell, AUTOENCODER_FIT, distribute=True)
    assert ns["autoencoder"] is autoencoder and autoencoder.layers[0] is encoder
    assert not np.array_equal(encoder.get_weights()[0], ns["untrained"])
    assert int(autoencoder.optimizer.iterations.numpy()) == 3 * 256 // 64  # 2 ranks x 32 a step
    ns = _cell(shell, AUTOENCODER_USE)
    close(ns["error"], one, 1.5, "reconstruction error through the notebook's encoder and decoder")


MULTI_IO = """
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(1)
num_tags, num_words, num_departments = 12, 100, 4
title_input = keras.Input(shape=(None,), name="title")
body_input = keras.Input(shape=(None,), name="body")
tags_input = keras.Input(shape=(num_tags,), name="tags")
title_features = layers.LSTM(16)(layers.Embedding(num_words, 16)(title_input))
body_features = layers.LSTM(8)(layers.Embedding(num_words, 16)(body_input))
x = layers.concatenate([title_features, body_features, tags_input])
priority_pred = layers.Dense(1, name="priority")(x)
department_pred = layers.Dense(num_departments, name="department")(x)
model = keras.Model(
    inputs=[title_input, body_input, tags_input], outputs={"priority": priority_pred, "department": department_pred}
)
model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss={
        "priority": keras.losses.BinaryCrossentropy(from_logits=True),
        "department": keras.losses.CategoricalCrossentropy(from_logits=True),
    },
    loss_weights={"priority": 1.0, "department": 0.2},
    metrics={"priority": ["mae"], "department": ["accuracy"]},
)
rng = np.random.default_rng(0)
inputs = {
    "title": rng.integers(num_words, size=(256, 10)),
    "body": rng.integers(num_words, size=(256, 20)),
    "tags": rng.integers(2, size=(256, num_tags)).astype("float32"),
}
targets = {
    "priority": rng.random(size=(256, 1)),
    "department": rng.integers(2, size=(256, num_departments)).astype("float32"),
}
"""


def test_a_multi_input_multi_output_model_trained_on_dicts(shell):
    _cell(shell, MULTI_IO)
    ns = _cell(
        shell,
        "history = model.fit(inputs, targets, epochs=2, batch_size=32, validation_split=0.25, verbose=0)",
        distribute=True,
        backend="tf",
    )
    expected = {"loss", "priority_loss", "department_loss", "priority_mae", "department_accuracy"}
    assert expected | {f"val_{k}" for k in expected} <= set(ns["history"].history), sorted(ns["history"].history)
    assert int(ns["model"].optimizer.iterations.numpy()) == 2 * math.ceil(96 / 32)
    predicted = ns["model"].predict({k: v[:4] for k, v in ns["inputs"].items()}, verbose=0)
    assert set(predicted) == {"priority", "department"} and predicted["department"].shape == (4, 4)
    results = ns["model"].evaluate(ns["inputs"], ns["targets"], verbose=0, return_dict=True)
    assert all(math.isfinite(v) for v in results.values()), results


@pytest.mark.fast
@pytest.mark.parametrize("kind", ["loss", "metric"])
def test_a_loss_or_metric_subclass_without_get_config_travels_by_its_arguments(kind):
    """Keras rebuilds a loss or metric with `cls(**get_config())`, which lacks a subclass's own arguments."""
    import keras

    from jupyter_dl.wire import construction, keras_objects

    class HalvedError(keras.losses.Loss):
        def __init__(self, factor, name="halved"):
            super().__init__(name=name)
            self.factor = factor

        def call(self, y_true, y_pred):
            return self.factor * keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)

    class Above(keras.metrics.Metric):
        def __init__(self, threshold, name="above"):
            super().__init__(name=name)
            self.threshold = threshold
            self.count = self.add_variable(shape=(), initializer="zeros", name="count")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.count.assign_add(keras.ops.sum(keras.ops.cast(y_pred > self.threshold, "float32")))

        def result(self):
            return self.count

    keras_objects.record_constructor_arguments()
    scope = {"HalvedError": HalvedError, "Above": Above}
    made = HalvedError(0.25) if kind == "loss" else Above(0.75)
    with construction.serialising({}):
        config = keras.saving.serialize_keras_object(made)
    with construction.deserialising(construction.no_names), keras.saving.custom_object_scope(scope):
        rebuilt = keras.saving.deserialize_keras_object(config)
    assert type(rebuilt) is type(made) and rebuilt.name == made.name
    assert (rebuilt.factor if kind == "loss" else rebuilt.threshold) == (0.25 if kind == "loss" else 0.75)


OVERFIT_AND_UNDERFIT = """
import keras
from keras import layers

size_histories = {}


def get_optimizer():
    return keras.optimizers.Adam(0.01)


def compile_and_fit(model, name, optimizer=None, max_epochs=3):
    if optimizer is None:
        optimizer = get_optimizer()
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.summary()
    return model.fit(x_train, y_train, validation_split=0.2, epochs=max_epochs, batch_size=64, verbose=0)


tiny_model = keras.Sequential([keras.Input((64,)), layers.Dense(16, activation="elu"), layers.Dense(10)])
small_model = keras.Sequential([keras.Input((64,)), layers.Dense(16, activation="elu"),
                                layers.Dense(16, activation="elu"), layers.Dense(10)])
"""


def test_a_notebook_dict_filled_with_histories_in_the_cell_comes_back(shell, digits):
    """TensorFlow's "Overfit and underfit" tutorial: `size_histories = {}` in one cell, filled in the next with the
    Histories its helper returns (and `model.summary()` printed on the way). The dict stayed empty in the notebook:
    Histories were no plain data to send back."""
    shell.user_ns.update(x_train=digits["x_train"], y_train=digits["y_train"])
    ns = _cell(shell, OVERFIT_AND_UNDERFIT)
    kept = ns["size_histories"]
    ns = _cell(
        shell,
        "size_histories['Tiny'] = compile_and_fit(tiny_model, 'sizes/Tiny')\n"
        "size_histories['Small'] = compile_and_fit(small_model, 'sizes/Small')\n",
        distribute=True,
    )
    import keras

    assert ns["size_histories"] is kept and sorted(kept) == ["Small", "Tiny"]
    for history in kept.values():
        assert isinstance(history, keras.callbacks.History)
        assert history.epoch == [0, 1, 2] and history.params["epochs"] == 3
        assert len(history.history["val_accuracy"]) == 3 and history.history["loss"][-1] < history.history["loss"][0]
    assert ns["tiny_model"].optimizer.iterations.numpy() > 0  # the models trained in place came back too
