"""Objects of the notebook that a cell changes by using them, without rebinding them.

In one process, `model.fit(..., callbacks=[early_stopping, loss_history])` leaves `early_stopping.stopped_epoch` and
`loss_history.losses` set, a `keras.metrics.Mean` updated in a custom loop holds its result, `step.assign_add(1)`
moves a variable and `train_losses.append(...)` grows a list. On N ranks the cell changes rank copies, so rank 0
sends back what changed and the notebook's own objects take it (every reference to them sees it, as in one
process). What travels is plain data only: a metric's or variable's values, the attributes of a callback or of
an object of a notebook class (DDPG's replay buffer) that are numbers, strings, arrays and containers of those
(not functions; a callback's model by the name the notebook has it by,
so `early_stopping.model is model` after the fit, as in one process), a small list, dict or set of such
values (tensors in it arrive as NumPy arrays), and the Keras Histories in one (TensorFlow's overfitting tutorial
fills a notebook dict, `size_histories["Tiny"] = compile_and_fit(...)`): their logs, as a History again.
"""

import collections
import numbers
from typing import NamedTuple

import numpy as np

from jupyter_dl.wire import dataset_iterators, keras_objects, tf_checkpoints
from jupyter_dl.wire.payload import is_history

_LEAVE = frozenset({"model", "_model"})  # fit sets these; the model comes back on its own


MAX_ITEMS = 10_000  # a list of results, not a dataset: larger containers are not watched


def tracked(value) -> bool:
    """A Keras metric, callback (not a History, which comes back as its own kind) or variable, or a tf.Module (the
    "basic training loops" tutorial's `MyModel` with its `tf.Variable`s, trained by `assign_sub`)."""
    import keras

    if (
        isinstance(value, (keras.metrics.Metric, keras.Variable))
        or _is_tf(value, "Variable")
        or _is_tf(value, "Module")
        or tf_checkpoints.is_checkpoint(value)  # its save count: the notebook's next save must not overwrite
        or dataset_iterators.is_iterator(value)  # where `next(iterator)` left it
        or tf_checkpoints.is_manager(value)  # the saves it keeps
    ):
        return True
    if isinstance(value, keras.callbacks.Callback):
        return not isinstance(value, keras.callbacks.History)
    return of_a_notebook_class(value)


def of_a_notebook_class(value) -> bool:
    """A plain object of a class the notebook defines (DDPG's replay `Buffer` and its `buffer_counter`, an
    `OUActionNoise`'s `x_prev`): the cell's loop changes it, as in one process. Keras layers, models and
    optimizers come back on their own path."""
    import keras

    if type(value).__module__ != "__main__" or not hasattr(value, "__dict__") or isinstance(value, type):
        return False
    return not isinstance(value, (keras.layers.Layer, keras.optimizers.Optimizer))


def tracked_in(value) -> list:
    """[(index, object)] of what a name holds that is watched: itself (index None), or the Keras items of its list
    or tuple (`callbacks = [loss_history, early_stopping]` passed to fit)."""
    if tracked(value):
        return [(None, value)]
    if type(value) in (list, tuple) and len(value) <= 64:  # a list of callbacks, not a list of samples
        items = [(i, item) for i, item in enumerate(value) if tracked(item)]
        if items:
            return items
    if type(value) in (list, dict, set) and len(value) <= MAX_ITEMS and _plain_copy(value) is not _UNPLAIN:
        return [(None, value)]
    return []


def at(namespace, name, index):
    """The object under `name` (index None) or its item `index`."""
    value = namespace[name]
    return value if index is None else value[index]


def state_of(value, model_names=None):
    """What a cell may change in a tracked object, as plain data. model_names: {id: name} of the models the
    receiver has by name, which a callback's model is told by."""
    import keras

    # A tf.Module's variables come in its own order (by attribute name), the same on both sides.
    if isinstance(value, keras.metrics.Metric) or _is_tf(value, "Module"):
        return {"variables": [np.array(v.numpy()) for v in value.variables]}
    if isinstance(value, keras.Variable) or _is_tf(value, "Variable") or tf_checkpoints.is_checkpoint(value):
        return {"variables": [np.array(v.numpy()) for v in _variables(value)]}
    if type(value) in (list, dict, set):
        return {"plain": _plain_copy(value)}
    if dataset_iterators.is_iterator(value):
        return {"position": dataset_iterators.position(value)}
    if tf_checkpoints.is_manager(value):
        return {"manager": tf_checkpoints.manager_state(value)}
    # Copies: a loop writes into its arrays and lists in place (`self.state_buffer[index] = obs`, `.append`).
    attributes = {k: _plain_copy(v) for k, v in vars(value).items() if k not in _LEAVE and _watched(v)}
    return {"attributes": attributes} | _model_it_holds(value, model_names or {})


class ModelNamed(NamedTuple):
    """The model a callback holds, as the name the receiver has it by (and which object it was, on this side: a
    cell that binds a new `model` and fits with the callback gives it another model of the same name)."""

    name: str
    object_id: int


def _model_it_holds(callback, model_names: dict) -> dict:
    # In one process fit leaves the callback holding the notebook's model (`early_stopping.model is model`); the
    # model itself comes back on its own, so only its name travels.
    model = getattr(callback, "_model", None)
    return {"model": ModelNamed(model_names[id(model)], id(model))} if id(model) in model_names else {}


def _variables(value) -> list:
    if tf_checkpoints.is_checkpoint(value):
        return tf_checkpoints.variables(value)
    return value.variables if hasattr(value, "variables") else [value]


def changed(before, after) -> dict:
    """The part of `after` that differs from `before` (both from state_of); {} when nothing changed."""
    if "variables" in after:
        same = len(before["variables"]) == len(after["variables"]) and all(
            np.array_equal(a, b) for a, b in zip(before["variables"], after["variables"])
        )
        return {} if same else after
    if "position" in after or "manager" in after:
        return {} if before == after else after
    if "plain" in after:  # unplain now (it holds an object that cannot travel as data): left on the ranks
        return after if after["plain"] is not _UNPLAIN and not _equal(before["plain"], after["plain"]) else {}
    moved = {k: v for k, v in after["attributes"].items() if not _equal(before["attributes"].get(k, _MISSING), v)}
    model = {"model": after["model"]} if after.get("model") not in (None, before.get("model")) else {}
    return {"attributes": moved, **model} if moved or model else {}


def restore(existing, state, resolve=None) -> None:
    """Put what changed on rank 0 into the notebook's own object. resolve(name): the notebook's object of that name
    (after the cell's values came back), for a callback's model."""
    if "variables" in state:
        for variable, value in zip(_variables(existing), state["variables"]):
            variable.assign(value)
        return
    if "position" in state:
        dataset_iterators.move_to(existing, state["position"])
        return
    if "manager" in state:
        tf_checkpoints.set_manager_state(existing, state["manager"])
        return
    if "plain" in state:
        plain = _histories_again(state["plain"], existing)
        if isinstance(existing, list):
            existing[:] = plain
        else:  # a dict or a set
            existing.clear()
            existing.update(plain)
        return
    for name, value in state["attributes"].items():
        setattr(existing, name, _histories_again(value, getattr(existing, name, None)))
    if "model" in state and resolve is not None:
        try:  # not set_model: TensorBoard's writes the graph again, a second event file beside rank 0's
            existing._model = resolve(state["model"].name)
        except KeyError:  # the notebook no longer has it under that name
            pass


_MISSING = object()
_UNPLAIN = object()


class HistoryRecord(NamedTuple):
    """A keras History as plain data: what `history.history`, `.params` and `.epoch` say (not its model)."""

    history: dict
    params: dict
    epoch: list


def _histories_again(value, own=None):
    """`value` with each HistoryRecord in it made a keras History again; where `own` (what it replaces, item by
    item) holds a History the record describes, that History itself: a dict entry the cell left alone
    (`regularizer_histories["Tiny"] = size_histories["Tiny"]` in an earlier cell) stays the same object."""
    if isinstance(value, HistoryRecord):
        if is_history(own) and _equal(_plain_copy(own), value):
            return own
        return keras_objects.history_of(value.history, value.params, value.epoch)
    if type(value) in (list, tuple):
        owns = list(own) if type(own) is type(value) and len(own) == len(value) else [None] * len(value)
        return type(value)(_histories_again(v, o) for v, o in zip(value, owns))
    if type(value) is set:
        return {_histories_again(v) for v in value}
    if type(value) is dict:
        owns = own if type(own) is dict else {}
        return {k: _histories_again(v, owns.get(k)) for k, v in value.items()}
    return value


def _is_tf(value, kind: str) -> bool:
    """Whether `value` is a tf.<kind> (tf.Variable, tf.Module), without importing TensorFlow where nothing has."""
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, getattr(tf, kind))


def _plain_copy(value, depth=0):
    """A copy of `value` made of plain data (tensors as NumPy arrays), or _UNPLAIN."""
    if depth > 4:
        return _UNPLAIN
    if hasattr(value, "numpy") and type(value).__module__.startswith("tensorflow") and not _is_tf(value, "Variable"):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        return value.copy() if value.dtype != object else _UNPLAIN
    if value is None or isinstance(value, (bool, numbers.Number, str, bytes, np.generic)):
        return value
    if type(value) in (list, tuple, set):
        items = [_plain_copy(v, depth + 1) for v in value]
        return _UNPLAIN if any(i is _UNPLAIN for i in items) else type(value)(items)
    if type(value) is collections.deque:  # a DQN agent's replay memory, `deque(maxlen=2000)`
        items = [_plain_copy(v, depth + 1) for v in value]
        return _UNPLAIN if any(i is _UNPLAIN for i in items) else collections.deque(items, maxlen=value.maxlen)
    if type(value) is dict:
        items = {k: _plain_copy(v, depth + 1) for k, v in value.items()}
        return _UNPLAIN if any(v is _UNPLAIN for v in items.values()) else items
    if is_history(value):
        logs, params = _plain_copy(value.history, depth + 1), _plain_copy(value.params or {}, depth + 1)
        unplain = logs is _UNPLAIN or params is _UNPLAIN
        return _UNPLAIN if unplain else HistoryRecord(logs, params, list(value.epoch))
    return _UNPLAIN


MAX_ATTRIBUTE_BYTES = 64 << 20  # an attribute holding the training data (copied twice a cell): not watched


def _watched(value) -> bool:
    """An attribute whose changes come back: plain, and small enough to copy before and after each cell."""
    return _plain(value) and _nbytes(value) <= MAX_ATTRIBUTE_BYTES


def _nbytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (list, tuple, collections.deque)):
        return len(value) * 8 + sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return len(value) * 16 + sum(_nbytes(v) for v in value.values())
    if is_history(value):
        return _nbytes(value.history)
    return len(value) if isinstance(value, (str, bytes)) else 8


def _plain(value, depth=0) -> bool:
    if depth > 4:
        return False
    if value is None or isinstance(value, (bool, numbers.Number, str, bytes, np.generic)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype != object
    if isinstance(value, (list, tuple, collections.deque)):
        return type(value) in (list, tuple, collections.deque) and all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return type(value) is dict and all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    if is_history(value):  # `self.history = self.model.fit(...)` in a trainer class: its logs, as a History again
        return _plain(value.history, depth + 1) and _plain(value.params or {}, depth + 1)
    return False


def _equal(a, b) -> bool:
    if a is _MISSING:
        return False
    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return np.array_equal(a, b)
        return bool(a == b) if not isinstance(a, (list, tuple, dict, collections.deque)) else _deep_equal(a, b)
    except Exception:  # values that do not compare (arrays in lists): count as changed
        return False


def _deep_equal(a, b) -> bool:
    if type(a) is not type(b) or len(a) != len(b):
        return False
    if isinstance(a, set):
        return a == b
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return all(_equal(x, y) for x, y in zip(a, b))
