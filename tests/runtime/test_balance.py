"""--balance: per-rank batch sizes by measured speed, with gradients weighted so the update is unchanged."""

import re

import numpy as np
import pytest
from device_time import DEVICE_TIME_LAYER

import jupyter_dl
from jupyter_dl.runtime.balance import split_batch, take_columns


def test_split_batch_is_proportional_sums_to_the_global_batch_and_leaves_no_rank_empty():
    assert split_batch(128, [1000, 500]) == [85, 43]
    assert split_batch(64, [1, 1, 1, 1]) == [16, 16, 16, 16]
    assert sum(split_batch(100, [7.3, 1.1, 0.2])) == 100
    assert split_batch(3, [1e6, 1, 1]) == [1, 1, 1]
    with pytest.raises(ValueError):
        split_batch(2, [1, 1, 1])


def test_take_columns_gives_every_rank_the_same_number_of_steps():
    x = np.arange(100)
    batches = [5, 3]
    (mine,) = take_columns((x,), 0, batches)
    (theirs,) = take_columns((x,), 1, batches)
    assert len(mine) // 5 == len(theirs) // 3 == 12  # 12 global batches of 8
    assert list(mine[:5]) == [0, 1, 2, 3, 4] and list(theirs[:3]) == [5, 6, 7]
    assert not set(mine) & set(theirs)


def _weighted_step(batches):
    """On each rank: the mean-loss gradient over its slice of one global batch, weighted and averaged."""
    import keras
    import tensorflow as tf

    from jupyter_dl.runtime.job_backend import backend as job_backend

    backend = job_backend()  # the job's: Horovod or TensorFlow's collectives
    rank, size = backend.rank_and_size()
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = np.random.default_rng(1).normal(size=(sum(batches), 4)).astype("float32")
    y = np.random.default_rng(2).normal(size=(sum(batches), 3)).astype("float32")
    start = sum(batches[:rank])
    xb, yb = x[start : start + batches[rank]], y[start : start + batches[rank]]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb) - yb))
    grads = tape.gradient(loss, model.trainable_variables)
    nominal = sum(batches) / size
    weight = tf.Variable(batches[rank] / nominal)
    return [g.numpy() for g in backend.average_gradients(grads, weight)]


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_weighted_average_of_uneven_batches_equals_the_full_batch_gradient(dl_session, backend):
    import keras
    import tensorflow as tf

    batches = [11, 5]
    averaged = jupyter_dl.distribute(_weighted_step, n=2, args=(batches,), all_ranks=True, backend=backend)
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    x = np.random.default_rng(1).normal(size=(16, 4)).astype("float32")
    y = np.random.default_rng(2).normal(size=(16, 3)).astype("float32")
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    full = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    for rank_grads in averaged:
        for got, want in zip(rank_grads, full):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


SLOWED_FIT = (
    DEVICE_TIME_LAYER
    + """
from jupyter_dl import collectives

keras.utils.set_random_seed(0)
# Rank 1 is three times slower per sample.
model = keras.Sequential([keras.Input((64,)), DeviceTime(0.003 if collectives.rank() == 1 else 0.001),
                          keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.Adam(0.002), "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)
checksum = collectives.allgather(float(sum(np.abs(v.numpy()).sum() for v in model.trainable_variables)))
"""
)


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_balance_on_gives_the_slow_rank_a_smaller_batch_and_keeps_ranks_in_step(dl_session, digits, capsys, backend):
    namespace = dict(digits)
    jupyter_dl.distribute(SLOWED_FIT, n=2, namespace=namespace, balance="on", backend=backend)
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if "per-rank batch sizes" in l)
    sizes = [int(v) for v in re.search(r"batch sizes \[([\d, ]+)\]", line).group(1).split(",")]
    assert sum(sizes) == 64 and sizes[0] > 1.8 * sizes[1], line  # ~3:1 by measured speed
    assert namespace["checksum"][0] == namespace["checksum"][1]  # both ranks hold the same weights
    assert namespace["history"].history["accuracy"][-1] > 0.7
