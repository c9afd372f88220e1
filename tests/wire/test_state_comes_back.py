"""What a cell trains comes back as it would in one process: the notebook's own model and optimizer objects hold the
training (so `opt` after `model.compile(optimizer=opt)` is still the model's optimizer), mixed precision keeps its
LossScaleOptimizer, a custom loop's optimizer state carries from cell to cell, and a model class registered with
`register_keras_serializable` in the cell comes back. Each case is a cell a user wrote in an outside trial that came
back wrong before; real 2-rank jobs on the local cluster."""

import numpy as np


def _run(shell, cell, line="%%distribute -n 2"):
    result = shell.run_cell(f"{line}\n{cell}", store_history=False)
    assert result.success, result.error_in_exec
    return shell.user_ns


def test_the_notebook_s_model_and_optimizer_objects_hold_the_training(shell, digits):
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras
opt = keras.optimizers.Adam(1e-3)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
same_model = model
""",
        store_history=False,
    )
    ns = _run(shell, "history = model.fit(x_train, y_train, epochs=2, batch_size=32, verbose=0)")
    assert ns["model"] is ns["same_model"]  # rebound to the same object, as in one process
    assert ns["model"].optimizer is ns["opt"]
    # 1400 samples, 2 ranks x 32 per step: 22 steps an epoch (the last one short), 2 epochs.
    assert int(ns["opt"].iterations.numpy()) == 44
    assert ns["history"].model is ns["model"]
    ns["opt"].learning_rate = 1e-5  # the user's handle still steers the model's optimizer
    assert np.isclose(float(ns["model"].optimizer.learning_rate.numpy()), 1e-5)


def test_a_model_recompiled_in_the_cell_comes_back_with_the_cell_s_optimizer(shell, digits):
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
""",
        store_history=False,
    )
    ns = _run(
        shell,
        'model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")\n'
        "model.fit(x_train, y_train, epochs=1, verbose=0)",
    )
    assert type(ns["model"].optimizer).__name__ == "SGD"


def test_mixed_precision_keeps_its_loss_scale_optimizer_both_ways(shell, digits):
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10),
                          keras.layers.Activation("softmax", dtype="float32")])
model.compile("adam", "sparse_categorical_crossentropy")
keras.mixed_precision.set_global_policy("float32")
""",
        store_history=False,
    )
    ns = _run(
        shell,
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "model.fit(x_train, y_train, epochs=1, verbose=0)\n"
        "on_rank = type(model.optimizer).__name__\n"
        'keras.mixed_precision.set_global_policy("float32")',
    )
    assert ns["on_rank"] == "LossScaleOptimizer"  # the engine rebuilt it under the sender's policy
    assert type(ns["model"].optimizer).__name__ == "LossScaleOptimizer"
    assert int(ns["model"].optimizer.iterations.numpy()) == 22


def test_a_custom_loop_s_optimizer_state_carries_from_cell_to_cell(shell, digits):
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras, tensorflow as tf
net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
nb_opt = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
""",
        store_history=False,
    )
    loop = """
for i in range(0, 1400, 64):
    with tf.GradientTape() as tape:
        loss = loss_fn(y_train[i:i + 64], net(x_train[i:i + 64], training=True))
    nb_opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
started_at = int(nb_opt.iterations.numpy()) - 22
"""
    ns = _run(shell, loop)
    assert ns["started_at"] == 0 and int(ns["nb_opt"].iterations.numpy()) == 22 and ns["nb_opt"].built
    ns = _run(shell, loop)
    assert ns["started_at"] == 22  # the engine's optimizer went on from the notebook's state, as in one process
    assert int(ns["nb_opt"].iterations.numpy()) == 44
    assert ns["nb_opt"]._trainable_variables[0] is ns["net"].trainable_variables[0]


def test_a_registered_model_class_defined_in_the_cell_comes_back(shell, digits):
    shell.user_ns.update(digits)
    ns = _run(
        shell,
        """
import keras

@keras.saving.register_keras_serializable()
class TinyMLP(keras.Model):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.inp = keras.layers.Dense(32, activation="relu")
        self.head = keras.layers.Dense(10, activation="softmax")

    def call(self, x):
        return self.head(self.inp(x))

model = TinyMLP()
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x_train, y_train, epochs=3, verbose=0)
""",
    )
    assert type(ns["model"]).__name__ == "TinyMLP"
    assert ns["model"].evaluate(ns["x_test"], ns["y_test"], verbose=0)[1] > 0.5


def test_validation_metrics_cover_every_validation_sample(shell, digits):
    """397 validation samples on 2 ranks: the history's val_loss is the loss over all 397, as one process reports
    it (it was over 396: shards were cut to equal length); likewise for validation_split's last 10%."""
    shell.user_ns.update(digits)
    ns = _run(
        shell,
        """
import keras
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=2, validation_data=(x_test, y_test), verbose=0)
expected = model.evaluate(x_test, y_test, verbose=0)   # every rank evaluates all 397 samples
split_history = model.fit(x_train, y_train, epochs=1, validation_split=0.1, verbose=0)
""",
    )
    assert len(ns["x_test"]) == 397
    val_loss, val_accuracy = ns["history"].history["val_loss"][-1], ns["history"].history["val_accuracy"][-1]
    assert np.isclose(val_loss, ns["expected"][0], rtol=1e-4), (val_loss, ns["expected"])
    assert np.isclose(val_accuracy, ns["expected"][1], rtol=1e-4), (val_accuracy, ns["expected"])
    split_loss = ns["model"].evaluate(ns["x_train"][1260:], ns["y_train"][1260:], verbose=0)[0]
    assert np.isclose(ns["split_history"].history["val_loss"][-1], split_loss, rtol=1e-4)


def test_learning_rate_callbacks_say_the_cell_s_rate(shell, digits, capsys):
    """The optimizer runs at the scaled rate (2 ranks: twice the cell's), but LearningRateScheduler and
    ReduceLROnPlateau report the rate the cell set, as the history does (they printed the scaled one)."""
    shell.user_ns.update(digits)
    ns = _run(
        shell,
        """
import keras
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.05, verbose=1)
plateau = keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=10.0, verbose=1)
history = model.fit(x_train, y_train, epochs=2, callbacks=[schedule, plateau], verbose=0)
""",
    )
    out = capsys.readouterr().out
    assert "LearningRateScheduler setting learning rate to 0.05." in out, out
    assert "ReduceLROnPlateau reducing learning rate to 0.025" in out, out
    assert "to 0.1." not in out and "to 0.05000" not in out  # the scaled rates (0.1 and 0.05) are not said
    # Keras logs the rate each epoch ran at (the reduction comes after): the cell's units, as in one process.
    assert np.allclose(ns["history"].history["learning_rate"], [0.05, 0.05])
    assert np.isclose(float(ns["model"].optimizer.learning_rate.numpy()), 0.025)  # the reduction, in cell units


def test_a_sub_model_sharing_layers_sees_the_training_and_is_not_written_back(shell, digits):
    """The Keras autoencoder tutorial: `encoder` shares its layers with `autoencoder`. On the engines they are
    separate copies and only `autoencoder` trains; its training reaches `encoder` in the notebook through the shared
    layers, and the engines' untouched `encoder` copy is not written back over it."""
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras
inp = keras.Input((64,))
code = keras.layers.Dense(8, activation="relu")(inp)
autoencoder = keras.Model(inp, keras.layers.Dense(64)(code))
encoder = keras.Model(inp, code)
autoencoder.compile("adam", "mse")
untrained = encoder.get_weights()[0].copy()
""",
        store_history=False,
    )
    ns = _run(shell, "autoencoder.fit(x_train, x_train, epochs=2, verbose=0)\nseen = encoder.name")
    trained = ns["autoencoder"].layers[1].get_weights()[0]
    assert not np.allclose(trained, ns["untrained"])
    np.testing.assert_array_equal(ns["encoder"].get_weights()[0], trained)
    assert int(ns["autoencoder"].optimizer.iterations.numpy()) == 44


def test_an_optimizer_compiled_into_the_model_in_the_cell_is_the_model_s(shell, digits):
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras
opt = keras.optimizers.Adam(1e-3)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
""",
        store_history=False,
    )
    ns = _run(
        shell,
        'model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")\n'
        "model.fit(x_train, y_train, epochs=1, verbose=0)",
    )
    assert ns["model"].optimizer is ns["opt"] and int(ns["opt"].iterations.numpy()) == 22


def test_the_best_checkpoint_is_readable_by_every_rank_right_after_fit(shell, digits, tmp_path):
    """ModelCheckpoint writes on rank 0 only; the other ranks wait at the end of fit, so a cell that loads the best
    model on the next line reads a whole file on every rank."""
    shell.user_ns.update(digits)
    shell.user_ns["path"] = str(tmp_path / "best.keras")
    ns = _run(
        shell,
        """
import keras
import horovod.tensorflow as hvd_check
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x_train, y_train, epochs=3, verbose=0,
          callbacks=[keras.callbacks.ModelCheckpoint(path, monitor="loss", save_best_only=True)])
best = keras.models.load_model(path)
loaded = hvd_check.allgather_object(len(best.get_weights()))
""",
    )
    assert ns["loaded"] == [2, 2]


def test_callbacks_and_metrics_of_the_notebook_hold_what_the_cell_did_to_them(shell, digits):
    """The "writing your own callbacks" shapes: a LossHistory callback made in the notebook collects losses in
    on_train_begin/on_batch_end, EarlyStopping records where it stopped, and a keras.metrics.Mean accumulates over a
    custom loop. In one process the notebook's objects hold all that after the cell; they must on 2 ranks too (the
    ranks' copies changed; rank 0's state comes back into the notebook's own objects, so every reference sees it)."""
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras, numpy as np, tensorflow as tf

class LossHistory(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.losses = []
    def on_batch_end(self, batch, logs=None):
        self.losses.append(logs["loss"])

loss_history = LossHistory()
callbacks = [loss_history]
stopper = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)  # stops after epoch 2
mean_loss = keras.metrics.Mean()
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy")
""",
        store_history=False,
    )
    # loss_history reaches the cell only inside the notebook's `callbacks` list; stopper by its own name.
    fit = "model.fit(x_train, y_train, epochs=5, batch_size=64, verbose=0, callbacks=callbacks + [stopper])"
    ns = _run(shell, fit)
    assert ns["callbacks"][0] is ns["loss_history"]
    assert len(ns["loss_history"].losses) == 2 * 11, len(ns["loss_history"].losses)  # 2 epochs of 11 steps a rank
    assert ns["stopper"].stopped_epoch == 1
    _run(
        shell,
        """
for start in range(0, 640, 64):
    mean_loss.update_state(keras.losses.sparse_categorical_crossentropy(y_train[start:start + 64],
                                                                        model(x_train[start:start + 64])))
""",
    )
    assert float(ns["mean_loss"].result()) > 0.1 and int(ns["mean_loss"].count.numpy()) > 0


def test_the_notebook_s_mixed_precision_policy_holds_on_the_ranks_and_the_cell_s_comes_back(shell, digits):
    """The mixed-precision guide sets the global policy in its own cell, then builds the model: the ranks must build
    it mixed too (a LossScaleOptimizer at compile). A cell that sets the policy itself leaves it set afterwards, as
    in one process."""
    import keras

    shell.user_ns.update(digits)
    build = """
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10),
                          keras.layers.Activation("softmax", dtype="float32")])
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x_train, y_train, epochs=1, batch_size=64, verbose=0)
"""
    try:
        shell.run_cell("import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')", store_history=False)
        ns = _run(shell, build)
        assert ns["model"].layers[0].dtype_policy.name == "mixed_float16"
        assert type(ns["model"].optimizer).__name__ == "LossScaleOptimizer"
        shell.run_cell("keras.mixed_precision.set_global_policy('float32')", store_history=False)
        ns = _run(shell, "keras.mixed_precision.set_global_policy('mixed_float16')\n" + build)
        assert keras.config.dtype_policy().name == "mixed_float16"  # the cell's policy is the notebook's now
        assert ns["model"].layers[0].dtype_policy.name == "mixed_float16"
    finally:
        keras.config.set_dtype_policy("float32")


def test_a_registered_class_of_the_notebook_saved_on_the_ranks_loads_in_the_notebook(shell, digits, tmp_path):
    """The serialization guide's shape: a class registered with register_keras_serializable in a notebook cell, a
    model of it saved with model.save inside the distributed cell, load_model in the next plain cell. The class
    travels by value, so the engine must register it again under the notebook's name."""
    shell.user_ns.update(digits, path=str(tmp_path / "clf.keras"))
    shell.run_cell(
        """
import keras

@keras.saving.register_keras_serializable(package="notebook")
class Classifier(keras.Model):
    def __init__(self, hidden=32, **kwargs):
        super().__init__(**kwargs)
        self.hidden = hidden
        self.inner = keras.layers.Dense(hidden, activation="relu")
        self.out = keras.layers.Dense(10)

    def call(self, x):
        return self.out(self.inner(x))

    def get_config(self):
        return {**super().get_config(), "hidden": self.hidden}
""",
        store_history=False,
    )
    _run(
        shell,
        """
clf = Classifier(hidden=24)
clf.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
clf.fit(x_train, y_train, epochs=1, batch_size=64, verbose=0)
clf.save(path)
""",
    )
    result = shell.run_cell("loaded = keras.models.load_model(path)", store_history=False)
    assert result.success, result.error_in_exec
    assert type(shell.user_ns["loaded"]) is shell.user_ns["Classifier"] and shell.user_ns["loaded"].hidden == 24


def test_variables_lists_and_dicts_of_the_notebook_changed_in_place_come_back(shell, digits):
    """A custom loop that counts steps in a notebook tf.Variable, moves a keras.Variable, appends losses to a list
    made in an earlier cell and counts in a dict: one process leaves all four changed; so must 2 ranks (rank 0's
    values, into the notebook's own objects). A list the cell did not change is left as it was."""
    shell.user_ns.update(digits)
    shell.run_cell(
        """
import keras, tensorflow as tf
step = tf.Variable(0)
temperature = keras.Variable(1.0)
train_losses = []
stats = {"batches": 0}
untouched = [1, 2, 3]
same_list = train_losses
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
optimizer = keras.optimizers.SGD(0.1)
""",
        store_history=False,
    )
    _run(
        shell,
        """
for start in range(0, 320, 64):
    with tf.GradientTape() as tape:
        logits = model(x_train[start:start + 64])
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y_train[start:start + 64], logits,
                                                                           from_logits=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    train_losses.append(loss)
    stats["batches"] += 1
    step.assign_add(1)
temperature.assign(0.5)
total = len(untouched)
""",
    )
    ns = shell.user_ns
    assert int(ns["step"].numpy()) == 5 and float(ns["temperature"].numpy()) == 0.5
    assert ns["same_list"] is ns["train_losses"] and len(ns["train_losses"]) == 5  # the notebook's own list
    assert all(np.isfinite(float(v)) for v in ns["train_losses"])
    assert ns["stats"] == {"batches": 5} and ns["untouched"] == [1, 2, 3]


def test_a_helper_module_and_the_working_directory_of_the_notebook_hold_on_the_ranks(shell, tmp_path):
    """A helper module beside the notebook, reached through sys.path, and an os.chdir in an earlier cell: the cell
    imports the helper and writes a relative path on the ranks as it would in the notebook."""
    import os
    import sys

    (tmp_path / "notebook_helpers.py").write_text("def double(x):\n    return 2 * x\n")
    kept_cwd, kept_path = os.getcwd(), list(sys.path)
    try:
        shell.run_cell(f"import os, sys\nsys.path.append({str(tmp_path)!r})\nos.chdir({str(tmp_path)!r})")
        ns = _run(
            shell,
            """
import notebook_helpers
from jupyter_dl import collectives
doubled = notebook_helpers.double(21)
if collectives.rank() == 0:
    with open("written-on-rank-0.txt", "w") as out:
        out.write("hi")
""",
        )
        assert ns["doubled"] == 42
        assert (tmp_path / "written-on-rank-0.txt").read_text() == "hi"
    finally:
        os.chdir(kept_cwd)
        sys.path[:] = kept_path
        sys.modules.pop("notebook_helpers", None)


def test_a_name_the_cell_deletes_is_there_for_the_cell_and_gone_after(shell):
    shell.user_ns["scratch"] = np.ones(3)
    ns = _run(shell, "total = float(scratch.sum())\ndel scratch\n")
    assert ns["total"] == 3.0 and "scratch" not in ns
