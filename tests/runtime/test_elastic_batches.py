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

    start = order.position_after(0, 5)

    begun: list = []

    class Count(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            order.set_epoch_length(start if epoch == 1 else 0)  # what the elastic commit callback does
            steps.append(0)

        def on_train_batch_begin(self, batch, logs=None):
            begun.append(batch)

        def on_train_batch_end(self, batch, logs=None):
            steps[-1] = batch + 1

    build = model._maybe_symbolic_build

    def build_and_show(iterator=None, data_batch=None):  # what keras_hooks does around fit
        build(iterator=iterator, data_batch=data_batch)
        order.seen_by_fit(iterator)

    model._maybe_symbolic_build = build_and_show
    with resumed_epochs_quiet():
        model.fit(order.dataset(1, start), epochs=4, initial_epoch=1, steps_per_epoch=order.steps(0),
                  callbacks=[Count()], verbose=0, shuffle=False)  # fmt: skip
    assert steps == [order.steps(start), order.steps(0), order.steps(0)] and steps[0] < steps[1]
    # Keras stops at the resumed epoch's last step: no step begins that would find no batch (its train step could
    # have drawn a collective's key on one rank only).
    assert len(begun) == sum(steps)


def _fit_resumed(model, x, y=None, sample_weight=None, **fit_kwargs):
    """fit as an elastic rank resumes one: rank 0 of 2, epoch 1 from its 3rd step; returns each epoch's steps."""
    import keras

    order = EpochOrder(x, y, sample_weight, 8, 0, 2, True, 5)
    steps: list = []

    start = order.position_after(0, 2)

    class Count(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            order.set_epoch_length(start if epoch == 1 else 0)
            steps.append(0)

        def on_train_batch_end(self, batch, logs=None):
            steps[-1] = batch + 1

    build = model._maybe_symbolic_build

    def build_and_show(iterator=None, data_batch=None):
        build(iterator=iterator, data_batch=data_batch)
        order.seen_by_fit(iterator)

    model._maybe_symbolic_build = build_and_show
    with resumed_epochs_quiet():
        history = model.fit(order.dataset(1, start), epochs=3, initial_epoch=1, steps_per_epoch=order.steps(0),
                            callbacks=[Count()], verbose=0, shuffle=False, **fit_kwargs)  # fmt: skip
    return steps, order, start, history


def _check_steps(steps, order, start, per_execution=1):
    import math

    # Keras numbers a last, partial execution of several steps as a whole one.
    whole = [math.ceil(n / per_execution) * per_execution for n in (order.steps(start), order.steps(0))]
    assert steps == whole


def test_dicts_of_inputs_and_outputs_with_sample_weights():
    import keras

    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    joined = keras.layers.Concatenate()([a, b])
    model = keras.Model({"a": a, "b": b}, {"out": keras.layers.Dense(1, name="out")(joined)})
    model.compile("sgd", {"out": "mse"})
    x = {"a": X / X.max(), "b": X[:, :2] / X.max()}
    steps, order, start, history = _fit_resumed(
        model, x, {"out": Y / Y.max()}, sample_weight=np.ones(len(Y), "float32")
    )
    _check_steps(steps, order, start)
    assert np.isfinite(history.history["loss"]).all()


def test_a_list_of_inputs_and_a_model_without_targets():
    import keras

    a, b = keras.Input((3,)), keras.Input((3,))
    model = keras.Model([a, b], keras.layers.Dense(1)(keras.layers.Add()([a, b])))
    model.compile("sgd", "mse")
    _check_steps(*_fit_resumed(model, [X, X], Y)[:3])

    class OwnLoss(keras.Model):  # trains on x alone (an autoencoder's add_loss, a VAE's train_step)
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            self.add_loss(keras.ops.mean((self.dense(x) - x) ** 2))
            return x

    own = OwnLoss()
    own.compile("sgd")
    _check_steps(*_fit_resumed(own, X)[:3])


def test_strings_into_a_text_vectorization_model():
    import keras

    text = np.array([f"word{i % 7} other{i % 3}" for i in range(len(X))])
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=2)
    vectorize.adapt(text)
    inputs = keras.Input((), dtype="string")
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Embedding(20, 4)(vectorize(inputs))[:, 0]))
    model.compile("sgd", "mse")
    _check_steps(*_fit_resumed(model, text, Y)[:3])


def test_several_steps_per_execution():
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=3)
    steps, order, start, _ = _fit_resumed(model, X, Y)
    _check_steps(steps, order, start, per_execution=3)


def test_commit_points_come_by_rank_0s_measured_pace_or_every_fixed_count(monkeypatch):
    from jupyter_dl.runtime import elastic

    clock = [100.0]
    monkeypatch.setattr(elastic.time, "monotonic", lambda: clock[0])
    leader, other = elastic.CommitPace(0, 2.0, rank=0), elastic.CommitPace(0, 2.0, rank=1)
    for pace in (leader, other):
        pace.epoch_began()
    assert not leader.due(9) and leader.due(10)  # before any pace is known: after 10 steps
    clock[0] += 0.5  # 10 steps took 0.5 s: 2 s is 40 steps
    decided = leader.proposal(10)
    assert decided == 40 and other.proposal(10) is None
    for pace in (leader, other):  # every rank takes rank 0's count from the commit point's collective
        pace.agreed(10, decided)
    assert not other.due(49) and other.due(50)
    fixed = elastic.CommitPace(4, 2.0, rank=0)
    fixed.epoch_began()
    assert fixed.due(4) and fixed.proposal(4) is None


def test_only_arrays_take_a_global_order_and_nothing_is_read_to_find_out():
    from jupyter_dl.runtime.elastic_batches import plain_arrays

    class Batches:  # a PyDataset-like sequence: NumPy would read every item to make an array of it
        reads = 0

        def __len__(self):
            return 4

        def __getitem__(self, index):
            Batches.reads += 1
            return X[:8], Y[:8]

    assert not plain_arrays(Batches(), None) and Batches.reads == 0
    assert not plain_arrays(np.array([{"a": 1}] * 3, dtype=object), Y[:3])
    assert plain_arrays({"a": X, "b": [X, X]}, Y, np.ones(len(Y)))


def test_floats_come_in_keras_float_type_as_from_keras_own_array_input():
    order = EpochOrder(X.astype("float64"), Y.astype("float64"), None, 8, 0, 2, True, 5)
    x, y = next(iter(order.dataset(0, 0)))
    assert x.dtype.name == y.dtype.name == "float32"


def test_no_commit_so_near_an_epoch_end_that_the_largest_group_would_have_no_step():
    order = EpochOrder(X, Y, None, 8, 0, 2, True, 5, max_size=4)
    assert order.resumable_at(len(X) - 32) and not order.resumable_at(len(X) - 31)
    for size in (1, 2, 3, 4):
        assert EpochOrder(X, Y, None, 8, 0, size, True, 5).steps(len(X) - 32) >= 1


def test_a_costly_commit_stretches_the_interval_to_a_small_share_of_training(monkeypatch):
    from jupyter_dl.runtime import elastic

    clock = [0.0]
    monkeypatch.setattr(elastic.time, "monotonic", lambda: clock[0])
    pace = elastic.CommitPace(0, 2.0, rank=0)
    pace.epoch_began()
    clock[0] += 1.0  # 10 steps: 0.1 s a step
    pace.agreed(10, pace.proposal(10), cost=1.0)  # a commit of a large model took 1 s
    assert pace.interval == 20
    clock[0] += 2.0
    assert pace.proposal(30) == round(1.0 / elastic.CommitPace.MAX_SHARE / 0.1)  # 20 s of training per commit
