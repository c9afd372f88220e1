"""Training results put into the notebook's own Keras objects, when the cell trained them without rebinding them.

A cell that only calls `model.fit(...)` leaves `model` bound to the same object in one process, and so do other
references to it and to its optimizer (`opt` after `model.compile(optimizer=opt)`, a list of models). The model that
comes back from rank 0 is a rebuilt copy; copying its state into the notebook's objects keeps those references
right. Where the objects do not fit (another architecture, a recompiled model), the copy replaces them instead.
"""

from . import keras_objects


def update(existing, arrived, payload, namespace) -> bool:
    """Copy `arrived`'s state into `existing`; False (nothing changed) when they do not fit."""
    if keras_objects.is_optimizer(existing):
        return _update_optimizer(existing, arrived, payload, namespace)
    if type(existing) is not type(arrived) or not _same_variables(existing.variables, arrived.variables):
        return False
    if not _same_compile(existing, arrived):
        return False  # the cell compiled the model again: its optimizer and loss are the arrived ones
    optimizer = getattr(existing, "optimizer", None)
    if payload.optimizer_state is not None and optimizer is not None:
        before = keras_objects.optimizer_state(optimizer)
        if not keras_objects.restore_optimizer(optimizer, payload.optimizer_state, existing.trainable_variables):
            if before is not None:
                keras_objects.restore_optimizer(optimizer, before, None)
            return False
    for mine, theirs in zip(existing.variables, arrived.variables):
        mine.assign(theirs)
    return True


def _same_variables(mine, theirs) -> bool:
    return len(mine) == len(theirs) and all(tuple(a.shape) == tuple(b.shape) for a, b in zip(mine, theirs))


def _same_compile(existing, arrived) -> bool:
    config = getattr(existing, "get_compile_config", None)
    if config is None:
        return True  # a layer, not a model
    return config() == arrived.get_compile_config()


def _update_optimizer(existing, arrived, payload, namespace) -> bool:
    """A custom loop's optimizer: its state, over the notebook's copies of the variables it trains (found by path
    in the notebook's models, which came back first)."""
    if type(existing) is not type(arrived) or payload.optimizer_state is None:
        return False
    variables = None
    if not existing.built:
        candidates = [
            v
            for value in namespace.values()
            if keras_objects.is_keras_saveable(value) and hasattr(value, "trainable_variables")
            for v in value.trainable_variables
        ]
        variables = [_one_by_path(candidates, path) for path in payload.optimizer_variable_paths or []]
        if not variables or any(v is None for v in variables):
            return False
    return keras_objects.restore_optimizer(existing, payload.optimizer_state, variables)


def _one_by_path(candidates, path):
    """The variable at `path`. A model rebuilt on the other side may name its variables without the model's own
    prefix ('dense/kernel' for 'net/dense/kernel'), so a path matches one that ends with it, if only one does."""
    found = [v for v in candidates if v.path == path]
    if not found:
        found = [v for v in candidates if v.path.endswith("/" + path) or path.endswith("/" + v.path)]
    return found[0] if len(found) == 1 else None
