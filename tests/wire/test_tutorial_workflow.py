"""TensorFlow tutorials' training workflow, set up in plain cells and trained under `%%distribute -n 2`.

"Basic training loops" (a `tf.Module` with `tf.Variable`s trained by `assign_sub`, filling notebook lists), the
callbacks people pass to `fit` (a LambdaCallback appending to a notebook list, CSVLogger read back with pandas,
ModelCheckpoint with `{epoch:02d}-{val_loss:.2f}` in its path, BackupAndRestore, a second fit from `initial_epoch`),
and predictions and scores made inside the distributed cell. The notebook then uses what came back as one process
would. Real 2-rank jobs on the local cluster; several cases share one job to keep the file short.
"""

import warnings

import numpy as np
import pytest
from notebook_cells import cell as _cell

BACKENDS = ["horovod", "tf"]


BASIC_LOOP = """
import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(1)
TRUE_W = 3.0
TRUE_B = 2.0
NUM_EXAMPLES = 201
x = tf.cast(tf.linspace(-2, 2, NUM_EXAMPLES), tf.float32)
y = x * TRUE_W + TRUE_B + tf.random.normal(shape=[NUM_EXAMPLES])


class MyModel(tf.Module):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.w = tf.Variable(5.0)
        self.b = tf.Variable(0.0)

    def __call__(self, x):
        return self.w * x + self.b


def loss(target_y, predicted_y):
    return tf.reduce_mean(tf.square(target_y - predicted_y))


def train(model, x, y, learning_rate):
    with tf.GradientTape() as t:
        current_loss = loss(y, model(x))
    dw, db = t.gradient(current_loss, [model.w, model.b])
    model.w.assign_sub(learning_rate * dw)
    model.b.assign_sub(learning_rate * db)


class MyModelKeras(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.w = self.add_weight(shape=(), initializer=keras.initializers.Constant(5.0))
        self.b = self.add_weight(shape=(), initializer="zeros")

    def call(self, x):
        return self.w * x + self.b


model = MyModel()
weights = []
biases = []
epochs = range(10)
keras_model = MyModelKeras()
keras_model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=keras.losses.mean_squared_error)
"""

BASIC_LOOP_CELL = """for epoch in epochs:
    train(model, x, y, learning_rate=0.1)
    weights.append(model.w.numpy())
    biases.append(model.b.numpy())
    current_loss = loss(y, model(x))
    print(f"Epoch {epoch:2d}: W={weights[-1]:1.2f}, b={biases[-1]:1.2f}, loss={current_loss:2.5f}")
keras_history = keras_model.fit(x, y, epochs=10, batch_size=1000, verbose=0)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tf_module_trained_by_assign_sub_holds_its_training_in_the_notebook(shell, backend):
    """TensorFlow's "Basic training loops": the notebook's `model.w` stayed 5.0 after the distributed loop (a
    tf.Module was neither a Keras object nor a variable, so its variables never came back), while `weights` held
    the trained values. Its Keras version (`add_weight` in `__init__`) trains too, without a warning."""
    ns = _cell(shell, BASIC_LOOP)
    _cell(shell, BASIC_LOOP_CELL)
    expected = [float(ns["model"].w.numpy()), float(ns["model"].b.numpy()), float(ns["current_loss"])]
    ns = _cell(shell, BASIC_LOOP)
    model, weights, keras_model = ns["model"], ns["weights"], ns["keras_model"]
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        ns = _cell(shell, BASIC_LOOP_CELL, distribute=True, backend=backend)
    # The Keras version is built by its fit, as in one process (saving it, as the job's results do, does not warn).
    assert not [w for w in shown if "not yet been built" in str(w.message)], [str(w.message) for w in shown]
    assert ns["keras_model"] is keras_model and keras_model.built and ns["keras_history"].history["loss"][-1] < 2.0
    assert float(keras_model.w.numpy()) == pytest.approx(3.0, abs=0.5), float(keras_model.w.numpy())
    assert ns["model"] is model and ns["weights"] is weights and len(weights) == 10
    trained = [float(model.w.numpy()), float(model.b.numpy()), float(ns["current_loss"])]
    np.testing.assert_allclose(trained, expected, rtol=1e-5)
    assert float(weights[-1]) == pytest.approx(expected[0], rel=1e-5)


CALLBACKS = """
import os
import numpy as np
import pandas as pd
import keras

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x_train = rng.random((512, 16)).astype("float32")
y_train = (x_train.sum(axis=1, keepdims=True) > 8).astype("float32")


def build():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


class StopAt(keras.callbacks.Callback):
    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold

    def on_epoch_end(self, epoch, logs=None):
        if logs["accuracy"] > self.threshold:
            self.model.stop_training = True


model = build()
stopped = build()
checkpointed = build()
n_batches = len(x_train) // 32
every_two_epochs = keras.callbacks.ModelCheckpoint("cp-{epoch:04d}.weights.h5", save_weights_only=True,
                                                   save_freq=2 * n_batches)
epoch_losses = []
callbacks = [
    keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epoch_losses.append(logs["loss"])),
    keras.callbacks.CSVLogger("training.log"),
    keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.2, patience=1, min_lr=1e-4),
    keras.callbacks.TerminateOnNaN(),
    keras.callbacks.BackupAndRestore("backup"),
    keras.callbacks.ModelCheckpoint("weights.{epoch:02d}-{val_loss:.2f}.keras"),
]
"""

CALLBACKS_FIT = """history = model.fit(x_train, y_train, epochs=2, batch_size=32, validation_split=0.25, verbose=0,
                    callbacks=callbacks)
more = model.fit(x_train, y_train, epochs=history.epoch[-1] + 3, initial_epoch=history.epoch[-1] + 1, batch_size=32,
                 verbose=0, callbacks=callbacks[:1])
stop_history = stopped.fit(x_train, y_train, epochs=20, batch_size=32, verbose=0, callbacks=[StopAt(0.6)])
checkpointed.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0, callbacks=[every_two_epochs])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_callbacks_as_people_pass_them_to_fit(shell, tmp_path, monkeypatch, backend):
    """A LambdaCallback appending to a notebook list left the list empty: its lambda read a copy of the
    notebook's `epoch_losses` on the ranks. A ModelCheckpoint saving every `2 * n_batches` saved every fourth
    epoch. The rest is the keras.io callbacks people use, read back in plain cells."""
    monkeypatch.chdir(tmp_path)
    ns = _cell(shell, CALLBACKS)
    epoch_losses = ns["epoch_losses"]
    ns = _cell(shell, CALLBACKS_FIT, distribute=True, backend=backend)
    assert ns["epoch_losses"] is epoch_losses and len(epoch_losses) == 4, epoch_losses
    assert epoch_losses[:2] == pytest.approx(ns["history"].history["loss"]), (epoch_losses, ns["history"].history)
    assert epoch_losses[2:] == pytest.approx(ns["more"].history["loss"]) and ns["more"].epoch == [2, 3]
    import pandas as pd

    log = pd.read_csv(tmp_path / "training.log")
    assert list(log["epoch"]) == [0, 1] and list(log["loss"]) == pytest.approx(epoch_losses[:2], rel=1e-4), log
    saved = sorted(p.name for p in tmp_path.glob("weights.*.keras"))
    assert [name[:11] for name in saved] == ["weights.01-", "weights.02-"], saved
    assert not (tmp_path / "backup").exists() or not any((tmp_path / "backup").iterdir())  # removed after training
    assert len(ns["stop_history"].epoch) < 20 and ns["stop_history"].history["accuracy"][-1] > 0.6
    # save_freq counts one process's batches (the save-and-load tutorial's `5 * n_batches`): every other epoch, not
    # every fourth, on two ranks that each run half of them.
    assert sorted(p.name for p in tmp_path.glob("cp-*.weights.h5")) == ["cp-0002.weights.h5", "cp-0004.weights.h5"]
    assert ns["every_two_epochs"].save_freq == 32
    ns = _cell(
        shell,
        f"reloaded = keras.models.load_model({saved[-1]!r})\nscore = reloaded.evaluate(x_train, y_train, verbose=0)",
    )
    assert 0 <= ns["score"][1] <= 1 and len(ns["reloaded"].weights) == len(ns["model"].weights)


WALKTHROUGH = """
import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
features = rng.random((300, 4)).astype("float32")
labels = (features[:, 0] * 3).astype("int64")
train_dataset = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(300, seed=0).batch(32)
model = keras.Sequential([
    keras.layers.Dense(10, activation=tf.nn.relu, input_shape=(4,)),
    keras.layers.Dense(10, activation=tf.nn.relu),
    keras.layers.Dense(3),
])
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def loss(model, x, y, training):
    return loss_object(y_true=y, y_pred=model(x, training=training))


def grad(model, inputs, targets):
    with tf.GradientTape() as tape:
        loss_value = loss(model, inputs, targets, training=True)
    return loss_value, tape.gradient(loss_value, model.trainable_variables)


optimizer = keras.optimizers.SGD(learning_rate=0.01)
train_loss_results = []
train_accuracy_results = []
"""

WALKTHROUGH_LOOP = """for epoch in range(3):
    epoch_loss_avg = keras.metrics.Mean()
    epoch_accuracy = keras.metrics.SparseCategoricalAccuracy()
    for x, y in train_dataset:
        loss_value, grads = grad(model, x, y)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        epoch_loss_avg.update_state(loss_value)
        epoch_accuracy.update_state(y, model(x, training=True))
    train_loss_results.append(epoch_loss_avg.result())
    train_accuracy_results.append(epoch_accuracy.result())
    print("Epoch {:03d}: Loss: {:.3f}, Accuracy: {:.3%}".format(epoch, epoch_loss_avg.result(),
                                                                epoch_accuracy.result()))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_custom_training_walkthrough_s_metrics_made_in_the_loop_come_back_with_their_totals(shell, backend):
    """TensorFlow's "Custom training: walkthrough": `epoch_loss_avg`, a Mean the loop makes each epoch, read 0.0 in
    the notebook after the distributed cell (Keras' archive rebuilds a metric empty), 1.16 in one process."""
    ns = _cell(shell, WALKTHROUGH)
    _cell(shell, WALKTHROUGH_LOOP)
    expected = [float(v) for v in ns["train_loss_results"]] + [float(ns["epoch_loss_avg"].result())]
    expected_accuracy = float(ns["epoch_accuracy"].result())
    ns = _cell(shell, WALKTHROUGH)
    ns = _cell(shell, WALKTHROUGH_LOOP, distribute=True, backend=backend)
    got = [float(v) for v in ns["train_loss_results"]] + [float(ns["epoch_loss_avg"].result())]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert float(ns["epoch_accuracy"].result()) == pytest.approx(expected_accuracy, abs=1e-6)
    assert int(ns["optimizer"].iterations.numpy()) == 3 * 10
    ns["epoch_loss_avg"].update_state(0.0)  # a live metric the notebook goes on with
    assert float(ns["epoch_loss_avg"].result()) < expected[-1]


@pytest.mark.fast
def test_a_metric_travels_with_its_running_totals():
    import keras

    from jupyter_dl.wire import keras_objects

    mean, accuracy = keras.metrics.Mean(), keras.metrics.SparseCategoricalAccuracy()
    mean.update_state([1.0, 3.0])
    accuracy.update_state([1, 0], [[0.1, 0.9], [0.2, 0.8]])
    for metric, result in ((mean, 2.0), (accuracy, 0.5)):
        rebuilt = keras_objects.loads(keras_objects.dumps(metric))
        assert type(rebuilt) is type(metric) and float(rebuilt.result()) == result, float(rebuilt.result())
