"""Training results put into the notebook's own Keras objects, when the cell trained them without rebinding them.

A cell that only calls `model.fit(...)` leaves `model` bound to the same object in one process, and so do other
references to it and to its optimizer (`opt` after `model.compile(optimizer=opt)`, a list of models). The model that
comes back from rank 0 is a rebuilt copy; copying its state into the notebook's objects keeps those references
right. Where the objects do not fit (another architecture, a recompiled model), the copy replaces them instead.
"""

import contextlib
import sys
from dataclasses import dataclass, field

from jupyter_dl.wire import construction, keras_objects


@dataclass(frozen=True)
class Namespaces:
    """Where a custom loop's optimizer finds the variables it trains, by path: in the Keras objects of `arrived`
    first, then in those of `receiver`."""

    arrived: dict  # the values that came back with it (already rebuilt)
    receiver: dict  # the receiving namespace (the notebook's)
    # {id(receiver's model): the receiver's optimizer the cell compiled it with} (`vae.compile(optimizer, ...)`)
    own_optimizers: dict = field(default_factory=dict)


def update(existing, arrived, payload, namespaces: Namespaces) -> bool:
    """Copy `arrived`'s state into `existing`; False (nothing changed) when they do not fit, or when copying failed
    (then the caller binds `arrived` instead, as before in-place updates)."""
    try:
        with _strategy_scope_of(existing):
            return _update(existing, arrived, payload, namespaces)
    except Exception:  # a Keras object this module did not foresee: the rebuilt copy is still right
        return False


def _strategy_scope_of(existing):
    """The scope of the tf.distribute strategy the notebook made `existing` under (tensorflow.org's "Distributed
    training with Keras" builds and compiles its model in `with strategy.scope():` in a plain cell): building its
    optimizer for the state that came back, or compiling it again, must run in it, as its fit does in one process
    (outside it TensorFlow raises 'Need to be inside "with strategy.scope()"'). A null context otherwise."""
    strategy = getattr(existing, "_distribute_strategy", None) or getattr(existing, "_distribution_strategy", None)
    if strategy is None:
        optimizer = getattr(existing, "optimizer", None)
        strategy = getattr(optimizer, "_distribution_strategy", None)
    tf = sys.modules.get("tensorflow")
    if strategy is None or tf is None or not hasattr(strategy, "scope") or tf.distribute.has_strategy():
        return contextlib.nullcontext()
    if strategy is tf.distribute.get_strategy():  # the default strategy: no scope to enter
        return contextlib.nullcontext()
    return strategy.scope()


def _update(existing, arrived, payload, namespaces: Namespaces) -> bool:
    if keras_objects.is_optimizer(existing):
        return _update_optimizer(existing, arrived, payload, namespaces)
    if type(existing) is not type(arrived):
        return False
    _build_as(existing, arrived)
    if not keras_objects.same_shapes(existing.variables, arrived.variables):
        return False
    flags = keras_objects.trainable_flags(existing)
    keras_objects.set_trainable_flags(existing, keras_objects.trainable_flags(arrived))  # as the cell left them
    if _same_compile(existing, arrived) and _took_optimizer_states(existing, payload):
        updated = True
    else:  # compiled in the cell, or compiled alike over other variables (a base model unfrozen above the compile)
        updated = _compiled_again(existing, arrived, namespaces.own_optimizers.get(id(existing)))
    if not updated:
        keras_objects.set_trainable_flags(existing, flags)  # as they were: the arrived copy is bound instead
        return False
    for mine, theirs in zip(existing.variables, arrived.variables):
        mine.assign(theirs)
    return True


def _took_optimizer_states(existing, payload) -> bool:
    """Put the optimizer states that came back into the model's own optimizers; False, changing nothing, when one
    does not fit."""
    optimizers = {"optimizer": getattr(existing, "optimizer", None), **keras_objects.other_optimizers(existing)}
    before = {attribute: keras_objects.optimizer_state(o) for attribute, o in optimizers.items() if o is not None}
    if keras_objects.restore_optimizers(existing, payload):
        return True
    for attribute, state in before.items():
        if state is not None:
            keras_objects.restore_optimizer(optimizers[attribute], state, None)
    return False


def _compiled_again(existing, arrived, own_optimizer=None) -> bool:
    """The cell compiled the model (`model.compile(...)` above its `fit`, keras.io's transfer learning and most
    notebooks). In one process that compiles the notebook's own model, whose layers other names still reach (the
    `base_model` a later cell unfreezes for fine-tuning, the `encoder` of an autoencoder), so the notebook's model is
    compiled as the copy was, with the copy's optimizer (and its state), moved over to the notebook's variables (it
    was built for the copy's, which pair up with them in order); the caller copies the trained values. When the cell
    compiled it with a notebook optimizer (`vae.compile(optimizer, ...)`), that optimizer takes the copy's state and
    is the one compiled in, so `vae.optimizer is optimizer` holds as in one process. A model with a compile of its
    own (a GAN's, holding its optimizers as attributes) cannot be compiled again here: the copy is bound instead, as
    for a model the cell rebuilt."""
    import keras

    config = getattr(getattr(arrived, "_compile_config", None), "config", None)
    optimizer = getattr(arrived, "optimizer", None)
    if type(existing).compile is not keras.Model.compile or not isinstance(config, dict) or optimizer is None:
        return False
    positions = keras_objects.optimizer_positions(optimizer, arrived)
    if optimizer.built and positions is None:
        return False
    if not keras_objects.same_shapes(existing.trainable_variables, arrived.trainable_variables):
        return False
    trained = [existing.trainable_variables[i] for i in positions] if optimizer.built else None
    if _took_state(own_optimizer, optimizer, trained):
        optimizer = own_optimizer
    existing.compile(**{**config, "optimizer": optimizer})
    if optimizer.built:
        _train_instead(optimizer, trained)
    return True


def _took_state(own, arrived, variables) -> bool:
    """Whether the receiver's optimizer `own` (of the arrived one's class) now holds the arrived one's state, built
    over `variables`; False, leaving it as it was, when it cannot (another class, state of other shapes)."""
    if own is None or type(own) is not type(arrived):
        return False
    if not arrived.built:
        return not own.built  # neither has stepped: the receiver's own is as good
    if own.built and not keras_objects.same_shapes(own.variables, arrived.variables):
        return False
    return keras_objects.restore_optimizer(own, keras_objects.optimizer_state(arrived), variables)


def _train_instead(optimizer, variables):
    """Point a built optimizer (and the one a LossScaleOptimizer wraps) at `variables`, which pair up one to one
    with those it was built for: its slots are kept by position, and found by each variable's key."""
    for each in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        if each is not None and each.built:
            each._trainable_variables = list(variables)
            each._trainable_variables_indices = {each._var_key(v): i for i, v in enumerate(variables)}


def update_each(existing, arrived) -> bool:
    """A list, tuple or dict of models the cell trained without rebinding it: each of the notebook's models takes
    its arrived copy's variables and optimizer state, so the notebook's container and models stay its own. False,
    changing nothing, unless every model fits its copy (then the arrived container is bound instead)."""
    try:
        models = existing.values() if isinstance(existing, dict) else existing
        with _strategy_scope_of(next(iter(models), None)):
            return _update_each(existing, arrived)
    except Exception:  # a container this module did not foresee: the arrived one is bound instead
        return False


def _update_each(existing, arrived) -> bool:
    if (
        type(existing) not in (list, tuple, dict)
        or type(existing) is not type(arrived)
        or len(existing) != len(arrived)
    ):
        return False
    if isinstance(existing, dict) and existing.keys() != arrived.keys():
        return False
    pairs = (
        [(existing[k], arrived[k]) for k in existing] if isinstance(existing, dict) else list(zip(existing, arrived))
    )
    models = [(mine, theirs) for mine, theirs in pairs if hasattr(mine, "get_compile_config")]
    if not all(_fits(mine, theirs) for mine, theirs in models):
        return False
    for mine, theirs in models:
        for variable, value in zip(mine.variables, theirs.variables):
            variable.assign(value)
        keras_objects.restore_optimizer(
            getattr(mine, "optimizer", None),
            keras_objects.optimizer_state(getattr(theirs, "optimizer", None)),
            mine.trainable_variables,
        )
    return True


def _fits(existing, arrived) -> bool:
    """Whether `arrived`'s variables and optimizer state can be copied into `existing` (same model, same compile)."""
    mine, theirs = getattr(existing, "optimizer", None), getattr(arrived, "optimizer", None)
    if type(existing) is not type(arrived) or (mine is None) != (theirs is None):
        return False
    _build_as(existing, arrived)
    if not keras_objects.same_shapes(existing.variables, arrived.variables) or not _same_compile(existing, arrived):
        return False
    if mine is None or theirs is None or not theirs.built:
        return True
    if not mine.built:
        mine.build(existing.trainable_variables)
    return keras_objects.same_shapes(mine.variables, theirs.variables)


def _build_as(existing, arrived):
    """A model the notebook compiled but never called (a subclass, or a Sequential without an Input) makes its
    variables on its first batch, which ran on the ranks. Built here for the input the arrived copy was built for,
    it can take the training, so the notebook's own object and optimizer hold it, as in one process."""
    if not getattr(existing, "built", True) and not getattr(arrived, "built", False):
        # Never called itself, as a model trained only through its own train_step (keras.io's MAE): its parts were.
        for mine, theirs in zip(_parts(existing), _parts(arrived)):
            if type(mine) is type(theirs):
                _build_as(mine, theirs)
        return
    if getattr(existing, "built", True) or not getattr(arrived, "built", False):
        return
    config = arrived.get_build_config()
    if config:
        existing.build_from_config(config)
        construction.build_parts_by_a_call(existing, config)  # a build() that makes sub-layers (MAE's PatchEncoder)
    # Keras' default build() ran the call but left `built` unset (a model with add_weight in __init__): saving it
    # would warn that it was never built, where one process's fit had built it. A build() of the model's own that
    # cannot run from shapes is left as it was.
    if config and not existing.built:
        shapes = config.get("shapes_dict") or {"input_shape": config.get("input_shape")}
        with contextlib.suppress(Exception):
            existing.build(**shapes)


def _parts(layer) -> list:
    """A layer's or model's own sub-layers, in the order it made them."""
    flatten = getattr(layer, "_flatten_layers", None)
    return list(flatten(include_self=False, recursive=False)) if callable(flatten) else []


def _same_compile(existing, arrived) -> bool:
    config = getattr(existing, "get_compile_config", None)
    if config is None:
        return True  # a layer, not a model
    # As on the wire: a notebook object without get_config (the Transformer tutorial's `CustomSchedule` in its Adam)
    # is configured by its construction record, where Keras' own get_config would raise.
    with construction.serialising():
        return _without_learning_rate(config()) == _without_learning_rate(arrived.get_compile_config())


def _without_learning_rate(config):
    """A compile config minus the optimizer's current learning rate, which a schedule callback changes during
    training (the optimizer state that is copied carries the rate), and minus its name: a compile replayed on the
    other side (a GAN's `super().compile()`) makes its default optimizer again, under the next automatic name."""
    if not isinstance(config, dict):
        return config
    optimizer = config.get("optimizer")
    if isinstance(optimizer, dict) and isinstance(optimizer.get("config"), dict):
        inner = {k: v for k, v in optimizer["config"].items() if k not in ("learning_rate", "name")}
        if isinstance(inner.get("inner_optimizer"), dict):  # LossScaleOptimizer
            inner["inner_optimizer"] = _without_learning_rate({"optimizer": inner["inner_optimizer"]})["optimizer"]
        config = {**config, "optimizer": {**optimizer, "config": inner}}
    return config


def _update_optimizer(existing, arrived, payload, namespaces: Namespaces) -> bool:
    """A custom loop's optimizer: its state, over the receiver's copies of the variables it trains, found by path
    in the models of `namespaces` (what came back first, then the receiving namespace)."""
    if type(existing) is not type(arrived) or payload.optimizer_state is None:
        return False
    variables = None
    if not existing.built:
        variables = _by_place(payload.optimizer_variable_places, namespaces)
        if variables is None:
            tiers = [_variables_in(names) for names in (namespaces.arrived, namespaces.receiver)]
            variables = [_first_match(tiers, path) for path in payload.optimizer_variable_paths or []]
        if not variables or any(v is None for v in variables):
            return False
    return keras_objects.restore_optimizer(existing, payload.optimizer_state, variables)


def _by_place(places, namespaces: Namespaces) -> list | None:
    """The variables at (name, index) places: of what came back under that name, else the receiver's own."""
    if not places:
        return None
    try:
        return [_variable_at(_holder(namespaces, name), index) for name, index in places]
    except (AttributeError, IndexError, KeyError):
        return None


def _variable_at(holder, index):
    """A place's variable (keras_objects._places): the holder itself, its trainable variable `index`, or, for
    `index` (key, i), variable i of the model under `key` in the holder's list or dict."""
    if index is None:
        return holder
    if isinstance(index, (tuple, list)):
        key, index = index
        holder = holder[key]
    return holder.trainable_variables[index]


def _holder(namespaces: Namespaces, name):
    return namespaces.arrived[name] if name in namespaces.arrived else namespaces.receiver[name]


def _variables_in(names: dict) -> list:
    """The trainable variables of the Keras objects in `names`, each once however many names refer to it."""
    by_id = {}
    for value in names.values():
        if keras_objects.is_keras_saveable(value) and hasattr(value, "trainable_variables"):
            by_id.update({id(v): v for v in value.trainable_variables})
    return list(by_id.values())


def _first_match(tiers, path):
    for candidates in tiers:
        found = _one_by_path(candidates, path)
        if found is not None:
            return found
    return None


def _one_by_path(candidates, path):
    """The variable at `path`. A model rebuilt on the other side may name its variables without the model's own
    prefix ('dense/kernel' for 'net/dense/kernel'), so a path matches one that ends with it, if only one does."""
    found = [v for v in candidates if v.path == path]
    if not found:
        found = [v for v in candidates if v.path.endswith("/" + path) or path.endswith("/" + v.path)]
    return found[0] if len(found) == 1 else None
