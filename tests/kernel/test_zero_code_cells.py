"""Zero code change, held to account: everyday Keras cells, written the way people write them, each run under
`%%distribute -n 2` on real engines, on each backend (Horovod over gloo, TensorFlow's own collectives), and once in this
process without either.

For every cell: both ranks end with identical trainable weights (gathered on the ranks themselves, independently of
jupyter-dl's own divergence guard), the model comes back to the notebook with rank 0's weights and works for
`predict`/`evaluate`, the guard stays silent, and the score is within a stated tolerance of the single-process run.
"""

import textwrap

import numpy as np
import pytest
from notebook_cells import forget_cell_names

ACCURACY_TOLERANCE = 0.06  # absolute, on digits' 397 held-out samples, after a few epochs
LOSS_TOLERANCE = 0.35  # relative, for cells scored by a loss

# Data every cell can read, derived from sklearn's digits (no download).
DATA = """
import numpy as np
x_img = x_train.reshape(-1, 8, 8, 1); x_img_test = x_test.reshape(-1, 8, 8, 1)
x_seq = x_train.reshape(-1, 8, 8); x_seq_test = x_test.reshape(-1, 8, 8)
tokens = (x_train * 16).astype("int32"); tokens_test = (x_test * 16).astype("int32")
y_sum = x_train.sum(axis=1, keepdims=True) / 64.0; y_sum_test = x_test.sum(axis=1, keepdims=True) / 64.0
"""

# Indented like the cells below, which are dedented after concatenation.
BUILD = """
        import keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer=keras.optimizers.Adam(0.002), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
"""

ACCURACY = "float(model.evaluate(x_test, y_test, verbose=0)[1])"


def case(name, cell, setup="", score=ACCURACY, kind="accuracy", models=("model",), local_teardown="", check=""):
    """check: an expression that must hold in the notebook after the distributed run."""
    return pytest.param(
        dict(
            setup=textwrap.dedent(setup),
            cell=textwrap.dedent(cell),
            score=score,
            kind=kind,
            models=models,
            local_teardown=local_teardown,
            check=check,
        ),
        id=name,
    )


CASES = [
    case(
        "sequential-compiled-in-cell",
        BUILD
        + """
        history = model.fit(x_train, y_train, batch_size=32, epochs=4, verbose=0)
    """,
    ),
    case(
        "compiled-in-an-earlier-cell",
        setup=BUILD,
        cell="""
        history = model.fit(x_train, y_train, batch_size=32, epochs=4, verbose=0)
    """,
    ),
    case(
        "second-fit-on-the-model-that-came-back",
        setup=BUILD
        + """
        %%distribute -n 2
        history = model.fit(x_train, y_train, batch_size=32, epochs=2, verbose=0)
    """,
        cell="""
        history = model.fit(x_train, y_train, batch_size=32, epochs=2, verbose=0)
    """,
    ),
    case(
        "functional-api",
        """
        import keras
        keras.utils.set_random_seed(0)
        inputs = keras.Input((64,))
        hidden = keras.layers.Dense(64, activation="relu")(inputs)
        outputs = keras.layers.Dense(10, activation="softmax")(keras.layers.Dropout(0.1)(hidden))
        model = keras.Model(inputs, outputs)
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
    """,
    ),
    case(
        "subclassed-model-with-constructor-arguments",
        """
        import keras
        keras.utils.set_random_seed(0)

        class Net(keras.Model):
            def __init__(self, hidden=48, classes=10, **kwargs):
                super().__init__(**kwargs)
                self.hidden = keras.layers.Dense(hidden, activation="relu")
                self.out = keras.layers.Dense(classes, activation="softmax")

            def call(self, x):
                return self.out(self.hidden(x))

        model = Net(hidden=64)
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
    """,
    ),
    case(
        "subclassed-model-with-custom-train-step",
        """
        import keras
        import tensorflow as tf
        keras.utils.set_random_seed(0)

        class Trainer(keras.Model):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.body = keras.layers.Dense(64, activation="relu")
                self.head = keras.layers.Dense(10, activation="softmax")
                self.tracker = keras.metrics.Mean(name="loss")

            def call(self, x):
                return self.head(self.body(x))

            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = keras.losses.sparse_categorical_crossentropy(y, self(x, training=True))
                    loss = tf.reduce_mean(loss)
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                self.tracker.update_state(loss)
                return {"loss": self.tracker.result()}

            @property
            def metrics(self):
                return [self.tracker]

        model = Trainer()
        model.compile(optimizer=keras.optimizers.Adam(0.002))
        model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
    """,
        score="float((model.predict(x_test, verbose=0).argmax(1) == y_test).mean())",
    ),
    case(
        "custom-layer-loss-and-metric-defined-in-cell",
        """
        import keras
        keras.utils.set_random_seed(0)

        class Scaled(keras.layers.Layer):
            def __init__(self, units, **kwargs):
                super().__init__(**kwargs)
                self.units = units

            def build(self, shape):
                self.kernel = self.add_weight(shape=(shape[-1], self.units), initializer="glorot_uniform")
                self.scale = self.add_weight(shape=(), initializer="ones")

            def call(self, x):
                return keras.ops.relu(x @ self.kernel) * self.scale

            def get_config(self):
                return {**super().get_config(), "units": self.units}

        def smooth_xent(y_true, y_pred):
            return keras.losses.sparse_categorical_crossentropy(y_true, y_pred * 0.98 + 0.002)

        class Hits(keras.metrics.Mean):
            def update_state(self, y_true, y_pred, sample_weight=None):
                hit = keras.ops.cast(keras.ops.equal(keras.ops.argmax(y_pred, -1),
                                                     keras.ops.cast(keras.ops.reshape(y_true, (-1,)), "int64")),
                                     "float32")
                return super().update_state(hit)

        model = keras.Sequential([keras.Input((64,)), Scaled(64), keras.layers.Dense(10, activation="softmax")])
        model.compile("adam", loss=smooth_xent, metrics=[Hits(name="hits")])
        model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
    """,
        score="float(model.evaluate(x_test, y_test, verbose=0, return_dict=True)['hits'])",
    ),
    case(
        "custom-loop-eager-apply-gradients",
        """
        import keras
        import tensorflow as tf
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.Adam(0.002)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        data = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(64)
        for epoch in range(3):
            for xb, yb in data:
                with tf.GradientTape() as tape:
                    loss = loss_fn(yb, model(xb, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """,
        score="float((model.predict(x_test, verbose=0).argmax(1) == y_test).mean())",
    ),
    case(
        "custom-loop-tf-function-optimizer-from-earlier-cell",
        setup="""
        import keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    """,
        cell="""
        import tensorflow as tf
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def train_step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            return loss

        for epoch in range(3):
            for start in range(0, len(x_train), 64):
                train_step(x_train[start:start + 64], y_train[start:start + 64])
    """,
        score="float((model.predict(x_test, verbose=0).argmax(1) == y_test).mean())",
    ),
    case(
        "transfer-learning-frozen-base",
        setup="""
        import keras
        keras.utils.set_random_seed(0)
        base = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu", name="features")])
        base.trainable = False
    """,
        cell="""
        model = keras.Sequential([base, keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(10, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x_train, y_train, epochs=10, batch_size=32, verbose=0)
    """,
    ),
    case(
        "multi-output-losses-dict",
        """
        import keras
        keras.utils.set_random_seed(0)
        inputs = keras.Input((64,))
        hidden = keras.layers.Dense(64, activation="relu")(inputs)
        digit = keras.layers.Dense(10, activation="softmax", name="digit")(hidden)
        ink = keras.layers.Dense(1, name="ink")(hidden)
        model = keras.Model(inputs, {"digit": digit, "ink": ink})
        model.compile("adam", loss={"digit": "sparse_categorical_crossentropy", "ink": "mse"},
                      loss_weights={"digit": 1.0, "ink": 0.5}, metrics={"digit": ["accuracy"]})
        model.fit(x_train, {"digit": y_train, "ink": y_sum}, epochs=4, batch_size=32, verbose=0)
    """,
        score="float((model.predict(x_test, verbose=0)['digit'].argmax(1) == y_test).mean())",
    ),
    case(
        "multi-input-dict-of-arrays",
        """
        import keras
        keras.utils.set_random_seed(0)
        top, bottom = keras.Input((32,), name="top"), keras.Input((32,), name="bottom")
        merged = keras.layers.Concatenate()([keras.layers.Dense(32, activation="relu")(top),
                                            keras.layers.Dense(32, activation="relu")(bottom)])
        model = keras.Model({"top": top, "bottom": bottom}, keras.layers.Dense(10, activation="softmax")(merged))
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit({"top": x_train[:, :32], "bottom": x_train[:, 32:]}, y_train, epochs=4, batch_size=32, verbose=0)
    """,
        score="float(model.evaluate({'top': x_test[:, :32], 'bottom': x_test[:, 32:]}, y_test, verbose=0)[1])",
    ),
    case(
        "pandas-frame-and-series",
        setup="""
        import pandas as pd
        frame = pd.DataFrame(x_train, columns=[f"px{i}" for i in range(64)])
        labels = pd.Series(y_train, name="digit")
    """,
        cell=BUILD
        + """
        history = model.fit(frame, labels, epochs=4, batch_size=32, verbose=0, validation_split=0.1)
    """,
        score="float(model.evaluate(pd.DataFrame(x_test, columns=frame.columns), pd.Series(y_test), verbose=0)[1])",
    ),
    case(
        "tf-data-dataset-batched-and-shuffled",
        BUILD
        + """
        import tensorflow as tf
        train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1400, seed=1).batch(32)
        model.fit(train, epochs=4, verbose=0)
    """,
    ),
    case(
        "tf-data-repeat-with-steps-per-epoch",
        BUILD
        + """
        import tensorflow as tf
        train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1400, seed=1).repeat().batch(32)
        model.fit(train, epochs=4, steps_per_epoch=44, verbose=0)
    """,
    ),
    case(
        "keras-py-dataset",
        BUILD
        + """
        class Batches(keras.utils.PyDataset):
            def __init__(self, x, y, batch, **kwargs):
                super().__init__(**kwargs)
                self.x, self.y, self.batch = x, y, batch

            def __len__(self):
                return len(self.x) // self.batch

            def __getitem__(self, i):
                s = slice(i * self.batch, (i + 1) * self.batch)
                return self.x[s], self.y[s]

        model.fit(Batches(x_train, y_train, 32), epochs=4, verbose=0)
    """,
    ),
    case(
        "python-generator-with-steps-per-epoch",
        BUILD
        + """
        def batches(batch=32):
            while True:
                for start in range(0, len(x_train) - batch + 1, batch):
                    yield x_train[start:start + batch], y_train[start:start + batch]

        model.fit(batches(), steps_per_epoch=43, epochs=4, verbose=0)
    """,
    ),
    case(
        "finite-generator-with-an-odd-number-of-batches",
        BUILD
        + """
        def batches(batch=32):  # 43 batches: one rank would get one more and wait forever in its last allreduce
            for start in range(0, len(x_train) - batch + 1, batch):
                yield x_train[start:start + batch], y_train[start:start + batch]

        for epoch in range(4):
            model.fit(batches(), epochs=1, verbose=0)
    """,
    ),
    case(
        "validation-data-tuple-and-dataset",
        BUILD
        + """
        import tensorflow as tf
        model.fit(x_train, y_train, epochs=2, batch_size=32, verbose=0, validation_data=(x_test, y_test))
        val = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(32)
        history = model.fit(x_train, y_train, epochs=2, batch_size=32, verbose=0, validation_data=val)
        val_accuracy = history.history["val_accuracy"][-1]
    """,
    ),
    case(
        "sample-weight-and-class-weight",
        BUILD
        + """
        weights = np.where(y_train == 3, 2.0, 1.0).astype("float32")
        model.fit(x_train, y_train, sample_weight=weights, epochs=2, batch_size=32, verbose=0)
        model.fit(x_train, y_train, class_weight={k: 1.0 + (k == 8) for k in range(10)}, epochs=2, batch_size=32,
                  verbose=0)
    """,
    ),
    case(
        "early-stopping-and-reduce-lr-on-plateau",
        BUILD
        + """
        history = model.fit(x_train, y_train, epochs=8, batch_size=32, verbose=0, validation_split=0.2,
                            callbacks=[keras.callbacks.EarlyStopping(patience=1, restore_best_weights=True),
                                       keras.callbacks.ReduceLROnPlateau(factor=0.5, patience=0, min_lr=1e-4)])
        epochs_run = len(history.history["loss"])
    """,
        check="epochs_run == len(history.history['val_loss']) and "
        "float(model.optimizer.learning_rate) <= float(np.float32(0.002))",
    ),
    case(
        "learning-rate-scheduler-callback",
        BUILD
        + """
        history = model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0,
                            callbacks=[keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.002 * 0.8 ** epoch)])
    """,
    ),
    case(
        "learning-rate-schedule-object",
        """
        import keras
        keras.utils.set_random_seed(0)
        schedule = keras.optimizers.schedules.ExponentialDecay(0.004, decay_steps=40, decay_rate=0.8)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10, activation="softmax")])
        model.compile(keras.optimizers.Adam(schedule), "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
    """,
    ),
    case(
        "model-checkpoint-and-initial-epoch",
        BUILD
        + """
        import os, tempfile
        folder = tempfile.mkdtemp(prefix="jdl-ckpt-")
        model.fit(x_train, y_train, epochs=2, batch_size=32, verbose=0,
                  callbacks=[keras.callbacks.ModelCheckpoint(os.path.join(folder, "best.keras"))])
        history = model.fit(x_train, y_train, epochs=4, initial_epoch=2, batch_size=32, verbose=0)
        saved = sorted(os.listdir(folder))
    """,
        check="saved == ['best.keras'] and len(history.history['loss']) == 2",
    ),
    case(
        "tf-keras-spelling-and-model-save",
        """
        import os, tempfile
        import tensorflow as tf
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.models.Sequential([tf.keras.layers.Input(shape=(64,)),
                                            tf.keras.layers.Dense(64, activation="relu"),
                                            tf.keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.002),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
        model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
        path = os.path.join(tempfile.mkdtemp(prefix="jdl-save-"), "digits.keras")
        model.save(path)
        reloaded = tf.keras.models.load_model(path)
        same_after_reload = bool(np.allclose(reloaded.predict(x_test, verbose=0), model.predict(x_test, verbose=0)))
    """,
        check="same_after_reload and os.path.exists(path)",
    ),
    case(
        "cnn-on-images",
        """
        import keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
                                  keras.layers.BatchNormalization(), keras.layers.MaxPooling2D(),
                                  keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x_img, y_train, epochs=4, batch_size=32, verbose=0)
    """,
        score="float(model.evaluate(x_img_test, y_test, verbose=0)[1])",
    ),
    case(
        "lstm-on-sequences",
        """
        import keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8, 8)), keras.layers.LSTM(32),
                                  keras.layers.Dense(10, activation="softmax")])
        model.compile(keras.optimizers.Adam(0.005), "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x_seq, y_train, epochs=4, batch_size=32, verbose=0)
    """,
        score="float(model.evaluate(x_seq_test, y_test, verbose=0)[1])",
    ),
    case(
        "embedding-on-token-ids",
        """
        import keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,), dtype="int32"), keras.layers.Embedding(17, 8),
                                  keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(tokens, y_train, epochs=4, batch_size=32, verbose=0)
    """,
        score="float(model.evaluate(tokens_test, y_test, verbose=0)[1])",
    ),
    case(
        "regression-mse",
        """
        import keras
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.001), "mse")
        model.fit(x_train, y_sum, epochs=10, batch_size=32, verbose=0)
    """,
        score="float(model.evaluate(x_test, y_sum_test, verbose=0))",
        kind="loss",
    ),
    case(
        "mixed-precision-policy",
        """
        import keras
        keras.utils.set_random_seed(0)
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10), keras.layers.Activation("softmax", dtype="float32")])
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
        keras.mixed_precision.set_global_policy("float32")
    """,
        local_teardown="import keras; keras.mixed_precision.set_global_policy('float32')",
    ),
    case(
        "evaluate-and-predict-inside-the-cell",
        BUILD
        + """
        model.fit(x_train, y_train, epochs=3, batch_size=32, verbose=0)
        evaluated_in_cell = model.evaluate(x_test, y_test, verbose=0)
        predicted_in_cell = model.predict(x_test, verbose=0)
    """,
        check="np.allclose(evaluated_in_cell, model.evaluate(x_test, y_test, verbose=0), rtol=1e-5) and "
        "np.allclose(predicted_in_cell, model.predict(x_test, verbose=0), rtol=1e-5, atol=1e-6)",
    ),
    case(
        "two-models-two-optimizers-one-traced-step",
        """
        import keras
        import tensorflow as tf
        keras.utils.set_random_seed(0)
        encoder = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu")])
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(10)])
        enc_opt, head_opt = keras.optimizers.Adam(0.002), keras.optimizers.SGD(0.05)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape(persistent=True) as tape:
                loss = loss_fn(yb, model(encoder(xb, training=True), training=True))
            enc_opt.apply_gradients(zip(tape.gradient(loss, encoder.trainable_variables),
                                        encoder.trainable_variables))
            head_opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        for epoch in range(3):
            for start in range(0, len(x_train), 64):
                step(x_train[start:start + 64], y_train[start:start + 64])
    """,
        score="float((model.predict(encoder.predict(x_test, verbose=0), verbose=0).argmax(1) == y_test).mean())",
        models=("model", "encoder"),
    ),
]


def _weights_gathered_on_the_ranks(models):
    """Appended to the cell: every rank's weights, gathered by the ranks themselves (this is the test's own check,
    independent of the divergence guard)."""
    lines = ["from jupyter_dl import collectives as collectives_check"]
    for name in models:
        lines.append(
            f"rank_weights_of_{name} = collectives_check.allgather([v.numpy() for v in {name}.trainable_variables])"
        )
    return "\n".join(lines) + "\n"


def _magnitude(model):
    return float(sum(np.abs(v.numpy()).sum() for v in model.trainable_variables))


def _run(shell, code):
    result = shell.run_cell(code, store_history=False)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result


def _setup(shell, digits, setup, backend="auto"):
    shell.user_ns.update(digits)
    _run(shell, DATA)
    if "%%distribute" in setup:
        local, distributed = setup.split("%%distribute -n 2\n")
        _run(shell, local)
        _run(shell, f"%%distribute -n 2 --backend {backend}\n" + textwrap.dedent(distributed))
    elif setup.strip():
        _run(shell, setup)


# Backend outermost: all Horovod cases, then all tf cases (alternating would make the engines build a new TensorFlow
# collective context for every tf case, and each leaves threads and memory behind in the engine).
@pytest.mark.parametrize("spec", CASES)
@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_everyday_cell_trains_correctly_on_two_ranks(shell, digits, capsys, spec, backend):
    local_score, local_magnitude = _one_process(shell, digits, spec)
    capsys.readouterr()

    # The same cell on two ranks.
    _setup(shell, digits, spec["setup"], backend)
    _run(
        shell,
        f"%%distribute -n 2 --backend {backend}\n" + spec["cell"] + _weights_gathered_on_the_ranks(spec["models"]),
    )
    err = capsys.readouterr().err
    assert "trained apart" not in err, err
    # Everything the cell bound came back, except tf.data pipelines, which are named with the reason.
    missing = [line for line in err.splitlines() if "did not come back" in line]
    assert all("tf.data.Dataset built on the ranks stays there" in line for line in missing), missing
    for name in spec["models"]:
        rank0, rank1 = shell.user_ns[f"rank_weights_of_{name}"]
        assert len(rank0) > 0
        for w0, w1 in zip(rank0, rank1):
            np.testing.assert_array_equal(w0, w1)
        # The notebook holds rank 0's trained model, and it works.
        returned = shell.user_ns[name]
        for w_back, w0 in zip([v.numpy() for v in returned.trainable_variables], rank0):
            np.testing.assert_array_equal(w_back, w0)
    if spec["check"]:
        assert eval(spec["check"], shell.user_ns), spec["check"]
    distributed_score = float(eval(spec["score"], shell.user_ns))
    print(
        f"{spec['kind']}: one process {local_score:.4f}, two ranks {distributed_score:.4f}; sum |w| one process "
        f"{local_magnitude:.3f}, two ranks {_magnitude(shell.user_ns[spec['models'][0]]):.3f}"
    )
    if spec["kind"] == "accuracy":
        assert local_score > 0.5
        assert abs(distributed_score - local_score) <= ACCURACY_TOLERANCE
    else:
        assert abs(distributed_score - local_score) <= LOSS_TOLERANCE * local_score


_ONE_PROCESS: dict = {}  # (setup, cell) -> (score, sum |w|): each backend's case compares with the same run


def _one_process(shell, digits, spec):
    """The reference: the cell in one process, no jupyter-dl. It does not depend on the backend, so it runs once per
    case, not once per backend (that was about a minute and a half of every test run)."""
    key = (spec["setup"], spec["cell"])
    if key not in _ONE_PROCESS:
        _setup(shell, digits, spec["setup"])
        _run(shell, spec["cell"])
        score = float(eval(spec["score"], shell.user_ns))
        _ONE_PROCESS[key] = (score, _magnitude(shell.user_ns[spec["models"][0]]))
        if spec["local_teardown"]:
            _run(shell, spec["local_teardown"])
        forget_cell_names(shell)
    return _ONE_PROCESS[key]


def _regression(x_train, y_train, x_test, y_test, optimizer="sgd", learning_rate=0.05, batch_size=32):
    """An ordinary cell: nothing in it knows about ranks."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile({"sgd": keras.optimizers.SGD, "rmsprop": keras.optimizers.RMSprop}[optimizer](learning_rate), "mse")
    model.fit(x_train, x_train.sum(1, keepdims=True) / 64, epochs=5, batch_size=batch_size, verbose=0, shuffle=False)
    return [w for w in model.get_weights()]


@pytest.mark.parametrize("optimizer, learning_rate", [("sgd", 0.05), ("rmsprop", 0.001)])
def test_two_ranks_are_one_process_with_the_global_batch(dl_session, digits, optimizer, learning_rate):
    """The exact statement of data parallelism: 2 ranks of batch 32 on strided shards, gradients averaged, make the
    same updates as one process with batch 64 (learning rate unscaled, no shuffling), to float rounding."""
    import jupyter_dl

    kwargs = {**digits, "optimizer": optimizer, "learning_rate": learning_rate}
    distributed = jupyter_dl.distribute(_regression, n=2, kwargs=kwargs, lr_scale="none")
    one_process = _regression(**kwargs, batch_size=64)
    for w_distributed, w_single in zip(distributed, one_process):
        np.testing.assert_allclose(w_distributed, w_single, rtol=1e-4, atol=1e-6)
