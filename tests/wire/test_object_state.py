"""object_state without engines: what rank 0 reads before and after a cell from the notebook's plain objects, and
what the notebook's own object takes from it."""

import numpy as np
import pytest

from jupyter_dl.wire import object_state


def _notebook_class(cls):
    cls.__module__ = "__main__"  # as a class defined in a notebook cell is
    return cls


@_notebook_class
class Buffer:
    def __init__(self, capacity):
        self.buffer_counter = 0
        self.state_buffer = np.zeros((capacity, 3))
        self.episodes = []
        self.describe = lambda: "not plain: stays as it is"

    def record(self, state):
        self.state_buffer[self.buffer_counter] = state  # in place, as DDPG's Buffer.record writes
        self.episodes.append(float(state[0]))  # in place too
        self.buffer_counter += 1


@pytest.mark.fast
def test_a_notebook_class_s_object_changed_in_place_comes_back_into_the_notebook_s_object():
    on_rank, notebook = Buffer(8), Buffer(8)
    assert object_state.tracked_in(on_rank) == [(None, on_rank)]
    before = object_state.state_of(on_rank)
    on_rank.record(np.array([1.0, 2.0, 3.0]))
    moved = object_state.changed(before, object_state.state_of(on_rank))
    assert sorted(moved["attributes"]) == ["buffer_counter", "episodes", "state_buffer"]

    describe = notebook.describe
    object_state.restore(notebook, moved)
    assert notebook.buffer_counter == 1 and notebook.episodes == [1.0]
    np.testing.assert_array_equal(notebook.state_buffer[0], [1.0, 2.0, 3.0])
    assert notebook.describe is describe
    # Untouched since: nothing goes back.
    assert object_state.changed(object_state.state_of(on_rank), object_state.state_of(on_rank)) == {}


@pytest.mark.fast
def test_what_is_not_watched_on_a_notebook_object():
    import keras

    big = Buffer(1)
    big.state_buffer = np.zeros(object_state.MAX_ATTRIBUTE_BYTES // 8 + 1)  # the training data, say: not copied
    assert "state_buffer" not in object_state.state_of(big)["attributes"]

    # Layers and optimizers of notebook classes come back as Keras objects, classes are not objects it changed,
    # and objects of installed libraries are theirs.
    layer = _notebook_class(type("Scale", (keras.layers.Layer,), {}))()
    optimizer = _notebook_class(type("Mine", (keras.optimizers.SGD,), {}))()
    for value in (layer, optimizer, Buffer, np.random.default_rng(0)):
        assert not object_state.tracked(value), value


@pytest.mark.fast
def test_a_replay_memory_in_a_deque_comes_back_with_its_maxlen():
    import collections

    @_notebook_class
    class DQNAgent:
        def __init__(self):
            self.memory = collections.deque(maxlen=3)
            self.epsilon = 1.0

    on_rank, notebook = DQNAgent(), DQNAgent()
    before = object_state.state_of(on_rank)
    for step in range(4):
        on_rank.memory.append((np.full((1, 4), step), step % 2, 1.0, False))
    on_rank.epsilon *= 0.995
    moved = object_state.changed(before, object_state.state_of(on_rank))
    object_state.restore(notebook, moved)
    assert notebook.memory.maxlen == 3 and [item[1] for item in notebook.memory] == [1, 0, 1]
    assert notebook.epsilon == 0.995
    assert object_state.changed(object_state.state_of(on_rank), object_state.state_of(on_rank)) == {}
