"""TensorFlow checkpoints on the wire: `tf.train.Checkpoint` and `tf.train.CheckpointManager`.

TensorFlow's DCGAN tutorial and its "Training checkpoints" guide make `checkpoint = tf.train.Checkpoint(
generator=generator, generator_optimizer=..., ...)` in a plain cell, and a training function of an earlier cell saves
it. A Checkpoint cannot be pickled (it holds weak references), and a copy would not help: it must track the
receiver's own objects, the ones the receiver trains. So a checkpoint travels as what it was built from: each of its
objects as the receiver's object of the same name (or the optimizer of a model that travels), a variable of its own
(`step=tf.Variable(1)`) by value, and its save count; a manager as its checkpoint's name and its settings, so that
it finds the checkpoints already on disk as a new manager over that folder does.
"""

from dataclasses import dataclass

import cloudpickle

from jupyter_dl.wire import dataset_iterators


@dataclass
class NameRef:
    name: str  # the receiver's object of this name


@dataclass
class OptimizerOfRef:
    model_name: str  # the optimizer of the receiver's model of this name


@dataclass
class CheckpointPayload:
    children: dict  # attribute -> NameRef | OptimizerOfRef | IteratorPayload | bytes (a value of its own, pickled)
    save_count: int | None  # None: never saved (TensorFlow makes the counter on first use)


@dataclass
class ManagerPayload:
    checkpoint_name: str | None  # the name its checkpoint travels under, where it travels beside it
    checkpoint: CheckpointPayload  # else its own copy of it
    settings: dict  # CheckpointManager's keyword arguments
    # What it knows of its saves: a new manager reads them from its folder, but a relative folder is read before
    # the rank moves to the notebook's working directory.
    state: dict


def is_checkpoint(value) -> bool:
    return _is(value, "Checkpoint")


def is_manager(value) -> bool:
    return _is(value, "CheckpointManager")


def _is(value, kind) -> bool:
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, getattr(tf.train, kind))


def dumps(value, namespace: dict, known: dict):
    """The payload of a Checkpoint or CheckpointManager. `known`: {id: name} of the objects the receiver has by name
    (what travels beside it). Raises TypeError, saying what to do, for what cannot be rebuilt there."""
    if is_manager(value):
        settings = {
            "directory": value.directory,
            "max_to_keep": value._max_to_keep,
            "keep_checkpoint_every_n_hours": value._keep_checkpoint_every_n_hours,
            "checkpoint_name": value._checkpoint_prefix.rsplit("/", 1)[-1],
            "checkpoint_interval": value._checkpoint_interval,
            "init_fn": value._init_fn,
        }
        checkpoint = value._checkpoint
        checkpoint_payload = dumps(checkpoint, namespace, known)
        return ManagerPayload(known.get(id(checkpoint)), checkpoint_payload, settings, manager_state(value))
    children = {attribute: _child(attribute, child, namespace, known) for attribute, child in value._kwargs.items()}
    counter = value._save_counter
    return CheckpointPayload(children, None if counter is None else int(counter.numpy()))


def _child(attribute, child, namespace, known):
    if id(child) in known:
        return NameRef(known[id(child)])
    for model_name in known.values():
        owner = namespace.get(model_name)
        if _is_keras_model(owner) and getattr(owner, "optimizer", None) is child:
            return OptimizerOfRef(model_name)
    if dataset_iterators.is_iterator(child):  # `iterator=iter(dataset)` made in the call
        return dataset_iterators.dumps(child)
    try:
        return cloudpickle.dumps(child)
    except Exception as exc:
        raise TypeError(
            f"its {attribute}= ({type(child).__name__}) cannot travel ({type(exc).__name__}); checkpoint what the "
            f"cell trains (models, optimizers, variables)"
        ) from None


def _is_keras_model(value) -> bool:
    import sys

    keras = sys.modules.get("keras")
    return keras is not None and isinstance(value, keras.Model)


def loads(payload, resolve):
    """The receiver's Checkpoint over its own objects (or a manager over its own checkpoint)."""
    import tensorflow as tf

    if isinstance(payload, ManagerPayload):
        try:
            checkpoint = resolve(payload.checkpoint_name) if payload.checkpoint_name else None
        except KeyError:
            checkpoint = None
        if not is_checkpoint(checkpoint):
            checkpoint = loads(payload.checkpoint, resolve)
        manager = tf.train.CheckpointManager(checkpoint, **payload.settings)
        set_manager_state(manager, payload.state)
        return manager
    children = {}
    for attribute, child in payload.children.items():
        if isinstance(child, NameRef):
            children[attribute] = resolve(child.name)
        elif isinstance(child, OptimizerOfRef):
            children[attribute] = resolve(child.model_name).optimizer
        elif isinstance(child, dataset_iterators.IteratorPayload):
            children[attribute] = dataset_iterators.loads(child, resolve)
        else:
            children[attribute] = cloudpickle.loads(child)
    checkpoint = tf.train.Checkpoint(**children)
    if payload.save_count is not None:
        checkpoint.save_counter.assign(payload.save_count)
    return checkpoint


def manager_state(manager) -> dict:
    """What a manager knows of its saves (`manager.checkpoints`, `latest_checkpoint`), as plain data."""
    return {
        "kept": list(manager._maybe_delete.items()),
        "latest": manager._latest_checkpoint,
        "preserved": manager._last_preserved_timestamp,
    }


def set_manager_state(manager, state: dict) -> None:
    import collections

    manager._maybe_delete = collections.OrderedDict(state["kept"])
    manager._latest_checkpoint = state["latest"]
    manager._last_preserved_timestamp = state["preserved"]


def variables(checkpoint) -> list:
    """What a cell changes in a checkpoint itself: its save count and the variables it holds of its own
    (`step=tf.Variable(1)`, moved by `ckpt.step.assign_add(1)`); its models and optimizers come back on their own."""
    import tensorflow as tf

    return [checkpoint.save_counter, *(v for v in checkpoint._kwargs.values() if isinstance(v, tf.Variable))]
