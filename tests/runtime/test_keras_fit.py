"""Zero-code-change mode: an unchanged Keras training function, data-parallel on 2 real Horovod ranks."""

import numpy as np
import pytest

import jupyter_dl

EPOCHS = 12
ACCURACY_TOLERANCE = 0.03  # distributed vs single-process test accuracy on digits, absolute


def _train(x_train, y_train, x_test, y_test, epochs=EPOCHS, seed=0):
    """An ordinary single-GPU Keras script: nothing in it knows about Horovod."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x_train, y_train, batch_size=32, epochs=epochs, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    return {"weights": model.get_weights(), "accuracy": float(accuracy), "history": history.history}


@pytest.fixture(scope="module")
def two_rank_run(dl_session, digits):
    return jupyter_dl.distribute(_train, n=2, kwargs=digits, all_ranks=True)


def test_fit_leaves_identical_weights_on_both_ranks(two_rank_run):
    rank0, rank1 = two_rank_run
    assert len(rank0["weights"]) == 4
    for w0, w1 in zip(rank0["weights"], rank1["weights"]):
        np.testing.assert_array_equal(w0, w1)


def test_fit_reaches_single_process_accuracy(two_rank_run, digits):
    single = _train(**digits)
    distributed = two_rank_run[0]["accuracy"]
    print(f"single-process accuracy {single['accuracy']:.4f}, 2-rank accuracy {distributed:.4f}")
    assert single["accuracy"] > 0.9
    assert abs(distributed - single["accuracy"]) <= ACCURACY_TOLERANCE


def test_epoch_metrics_are_averaged_across_ranks(two_rank_run):
    rank0, rank1 = two_rank_run
    # Each rank trained on its own shard; the callback averages epoch logs, so both Histories agree exactly.
    assert rank0["history"] == rank1["history"]
    assert len(rank0["history"]["loss"]) == EPOCHS


def _learning_rate_seen_by_fit():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.append(float(self.model.optimizer.learning_rate.numpy()))

    model.fit(np.zeros((8, 2)), np.zeros((8, 1)), epochs=1, verbose=0, callbacks=[Probe()])
    return seen[0]


@pytest.mark.parametrize("mode, factor", [("linear", 2.0), ("sqrt", 2**0.5), ("none", 1.0)])
def test_learning_rate_scaling(dl_session, mode, factor):
    assert jupyter_dl.distribute(_learning_rate_seen_by_fit, n=2, lr_scale=mode) == pytest.approx(0.1 * factor)


def _manual_cell():
    import horovod.tensorflow as hvd
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    total = hvd.allreduce(np.array([1.0]), op=hvd.Sum).numpy().tolist()
    return {
        "initialised": hvd.is_initialized(),
        "size": hvd.size(),
        "total": total,
        "optimizer_class": type(model.optimizer).__name__,
        "wrapped": getattr(model.optimizer, "_jdl_distributed", False),
    }


def test_manual_mode_leaves_keras_alone_but_initialises_horovod(dl_session):
    out = jupyter_dl.distribute(_manual_cell, n=2, manual=True)
    assert out["initialised"] and out["size"] == 2 and out["total"] == [2.0]
    assert out["optimizer_class"] == "SGD" and out["wrapped"] is False


def test_tf_data_dataset_is_sharded(dl_session, digits):
    def fit_dataset(x_train, y_train, **_):
        import keras
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32)  # 44 batches -> 22 per rank
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        steps = []

        class Count(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                steps.append(batch)

        model.fit(ds, epochs=1, verbose=0, callbacks=[Count()])
        return len(steps)

    assert jupyter_dl.distribute(fit_dataset, n=2, kwargs=digits, all_ranks=True) == [22, 22]


def _build_models_here(count):
    import keras

    for _ in range(count):
        keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])  # advances Keras' auto-naming counters
    return count


def test_engines_with_different_keras_histories_still_agree(dl_session, digits):
    """Horovod matches tensors by name; Keras names layers per process (dense, dense_1, ...). Ranks whose engines
    built different numbers of models before must still find each other's gradients."""
    assert jupyter_dl.distribute(_build_models_here, n=1, args=(3,)) == 3  # only engine 0 advances
    rank0, rank1 = jupyter_dl.distribute(_train, n=2, kwargs={**digits, "epochs": 1}, all_ranks=True, timeout=120)
    for w0, w1 in zip(rank0["weights"], rank1["weights"]):
        np.testing.assert_array_equal(w0, w1)


def _learning_rates_during_fit(kind):
    """The rate the optimizer applies in each epoch, for a schedule object or a LearningRateScheduler callback."""
    import keras

    if kind == "schedule":
        rate = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1000, decay_rate=0.5)
        callbacks = []
    else:
        rate = 0.1
        callbacks = [keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.1 * 0.5**epoch)]
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(rate), loss="mse")
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    model.fit(np.zeros((8, 2)), np.zeros((8, 1)), epochs=3, batch_size=4, verbose=0, callbacks=callbacks + [Probe()])
    return seen, float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))


def test_learning_rate_schedules_are_scaled_like_constants(dl_session):
    seen, _ = jupyter_dl.distribute(_learning_rates_during_fit, n=2, args=("schedule",))
    assert seen[0] == pytest.approx(0.2, rel=1e-3)  # 0.1 at step 0, times 2 ranks


def test_learning_rate_scheduler_callback_works_in_single_rank_units(dl_session):
    seen, after = jupyter_dl.distribute(_learning_rates_during_fit, n=2, args=("callback",))
    # The cell's schedule says 0.1, 0.05, 0.025 for one rank; two ranks apply twice that.
    assert seen == pytest.approx([0.2, 0.1, 0.05], rel=1e-5)
    # After fit the cell reads (and a custom loop after it would apply) single-rank rates again.
    assert after == pytest.approx(0.025, rel=1e-5)


def _two_optimizers_in_train_step():
    """The Keras GAN pattern: a custom compile taking two optimizers and a train_step using both."""
    import keras
    import tensorflow as tf

    class TwoParts(keras.Model):
        def __init__(self):
            super().__init__()
            self.first, self.second = keras.layers.Dense(4), keras.layers.Dense(1)

        def call(self, x):
            return self.second(self.first(x))

        def compile(self, first_optimizer, second_optimizer):
            super().compile()
            self.first_optimizer, self.second_optimizer = first_optimizer, second_optimizer

        def train_step(self, data):
            x, y = data
            with tf.GradientTape(persistent=True) as tape:
                loss = tf.reduce_mean(tf.square(self(x) - y))
            for optimizer, layer in ((self.first_optimizer, self.first), (self.second_optimizer, self.second)):
                optimizer.apply_gradients(
                    zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables)
                )
            return {"loss": loss}

    model = TwoParts()
    model.compile(keras.optimizers.SGD(0.1), keras.optimizers.Adam(0.01))
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(
                [
                    float(keras.ops.convert_to_numpy(o.learning_rate))
                    for o in (model.first_optimizer, model.second_optimizer)
                ]
            )

    model.fit(np.zeros((16, 2)), np.zeros((16, 1)), epochs=1, batch_size=4, verbose=0, callbacks=[Probe()])
    optimizers = (model.first_optimizer, model.second_optimizer)
    after = [float(keras.ops.convert_to_numpy(o.learning_rate)) for o in optimizers]
    return seen[-1], after


def test_every_optimizer_fit_drives_is_scaled_and_put_back_after_fit(dl_session):
    during, after = jupyter_dl.distribute(_two_optimizers_in_train_step, n=2)
    assert during == pytest.approx([0.2, 0.02])  # both of the train_step's optimizers, not only model.optimizer
    assert after == pytest.approx([0.1, 0.01])  # a custom loop after fit reads the same batches on every rank
