"""The global sample order of an elastic fit over arrays (runtime/elastic_batches.py), in one process: the ranks'
shares of an epoch hold every sample once, a group of another size resumed in the middle of an epoch trains exactly
the rest, and Keras trains a shorter resumed epoch, then whole ones."""

import numpy as np
import pytest

from jupyter_dl.runtime.elastic_batches import EpochOrder, resumed_epochs_quiet
from jupyter_dl.runtime.sharding import shard_arrays

pytestmark = pytest.mark.fast

X = np.arange(203 * 3, dtype="float32").reshape(203, 3)  # 203 samples: no size below divides them evenly
Y = np.arange(203, dtype="float32")


def _orders(size, shuffle=True, batch=8, seed=5):
    return [EpochOrder(X, Y, None, batch, rank, size, shuffle, seed) for rank in range(size)]


def _trained(orders, epoch, start=0, steps=None) -> np.ndarray:
    """The sample indices the ranks train on in `epoch` from `start`, over `steps` steps (all by default)."""
    taken = [list(order.rank_indices(epoch, start))[:steps] for order in orders]
    assert len({len(t) for t in taken}) == 1, "every rank must take as many steps"
    return np.concatenate([i for t in taken for i in t]) if taken[0] else np.array([], int)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_an_epoch_trains_every_sample_once_but_at_most_size_minus_one(size):
    orders = _orders(size)
    trained = _trained(orders, epoch=2)
    assert len(set(trained.tolist())) == len(trained) >= len(X) - (size - 1)
    assert len(list(orders[0].rank_indices(2))) == orders[0].steps(0)
    assert not np.array_equal(_trained(orders, 2), _trained(orders, 3))  # each epoch its own permutation


@pytest.mark.parametrize("before, after", [(2, 4), (4, 2), (2, 1), (3, 2)])
def test_a_group_resumed_in_the_middle_of_an_epoch_trains_exactly_the_rest(before, after):
    old, new = _orders(before), _orders(after)
    steps = 3
    position = old[0].position_after(0, steps)
    assert position == steps * before * 8
    first, rest = _trained(old, 1, steps=steps), _trained(new, 1, start=position)
    both = np.concatenate([first, rest]).tolist()
    assert len(both) == len(set(both)) >= len(X) - (after - 1)
    assert new[0].steps(position) == len(list(new[0].rank_indices(1, position)))


def test_in_order_each_rank_takes_the_fixed_paths_strided_batches():
    for rank, order in enumerate(_orders(2, shuffle=False)):
        fixed_x, _, _ = shard_arrays((X, Y, None), rank, 2)
        ours = np.concatenate(list(order.rank_indices(0)))
        np.testing.assert_array_equal(X[ours], fixed_x)


def test_keras_trains_the_resumed_epoch_short_and_the_next_ones_whole():
    import keras

    order = EpochOrder(X, Y, None, 8, 0, 2, True, 5)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    steps: list = []

    class Count(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            order.fix_epoch_length()  # what the elastic commit callback does

        def on_epoch_begin(self, epoch, logs=None):
            steps.append(0)

        def on_train_batch_end(self, batch, logs=None):
            steps[-1] = batch + 1

    build = model._maybe_symbolic_build

    def build_and_show(iterator=None, data_batch=None):  # what keras_hooks does around fit
        build(iterator=iterator, data_batch=data_batch)
        order.seen_by_fit(iterator)

    model._maybe_symbolic_build = build_and_show
    start = order.position_after(0, 5)
    with resumed_epochs_quiet():
        model.fit(order.dataset(1, start), epochs=4, initial_epoch=1, steps_per_epoch=order.steps(0),
                  callbacks=[Count()], verbose=0, shuffle=False)  # fmt: skip
    assert steps == [order.steps(start), order.steps(0), order.steps(0)] and steps[0] < steps[1]
