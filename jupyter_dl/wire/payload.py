"""The wire format for values crossing between kernel and engines, shared by both sides.

Values are cloudpickled one name at a time so one bad value names itself instead of failing the whole transfer.
Keras models and layers travel through Keras 3's own pickling (a .keras archive in memory) with the cell's classes
and functions they need (keras_objects). A History is sent without its model (which would be pickled twice) and
re-attached on arrival.
"""

import builtins
import contextlib
import copy
import dis
import hashlib
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import cloudpickle

from jupyter_dl.wire import (
    construction,
    dataset_iterators,
    datasets,
    in_place_update,
    keras_objects,
    summary_writers,
    tf_checkpoints,
)


@dataclass
class Unsendable:
    """Stands in for a value that could not be serialised on the sending side."""

    name: str
    reason: str


@dataclass
class HistoryPayload:
    history: dict
    params: dict = field(default_factory=dict)
    epoch: list = field(default_factory=list)
    model_name: str | None = None  # the namespace name of the model it belongs to, if any


def fingerprint(value):
    """Content hash of a plain array, so it is re-sent only when it changes; None means 'always send'."""
    import numpy as np

    if isinstance(value, np.ndarray) and value.dtype != object:
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{value.shape}{value.dtype.str}".encode())
        h.update(np.ascontiguousarray(value).data)
        return h.hexdigest()
    return None


def is_keras_model(value) -> bool:
    cls = type(value)
    return any(c.__module__.startswith("keras") and c.__name__ == "Model" for c in cls.__mro__)


def is_keras_layer(value) -> bool:
    return any(c.__module__.startswith("keras") and c.__name__ == "Layer" for c in type(value).__mro__)


def trained_in_place(value) -> bool:
    """A model or optimizer whose state a cell changes by using it (fit, apply_gradients), without rebinding it; or
    a list, tuple or dict of models (`models[name].fit(...)` over models made in a loop). A layer too: calling one
    changes its own variables (the subclassing guide's `ComputeSum` adds to its non-trainable total)."""
    return (
        is_keras_layer(value)
        or is_keras_model(value)
        or keras_objects.is_optimizer(value)
        or _holds(value, is_keras_model)
    )


def _history_payload(history, namespace) -> "HistoryPayload":
    model_name = None
    model = getattr(history, "model", None)
    if model is not None and namespace:
        model_name = next((k for k, v in namespace.items() if v is model), None)
    return HistoryPayload(dict(history.history), dict(history.params or {}), list(history.epoch), model_name)


def _holds(value, test) -> bool:
    """Whether a plain dict, list or tuple holds an item that passes `test` (one level down)."""
    items = value.values() if type(value) is dict else value if type(value) in (list, tuple) else ()
    return any(test(item) for item in items)


def _each(value, change):
    """The plain dict, list or tuple with `change` applied to each item."""
    if type(value) is dict:
        return {k: change(v) for k, v in value.items()}
    return type(value)(change(v) for v in value)


def holds_datasets(value) -> bool:
    """A plain dict, list or tuple of tf.data datasets (`datasets = {"train": ..., "val": ...}`)."""
    return _holds(value, datasets.is_dataset)


def each_dataset(value, change):
    """The plain dict, list or tuple with `change` applied to each dataset in it (other items as they are)."""
    return _each(value, lambda item: change(item) if datasets.is_dataset(item) else item)


is_history = keras_objects.is_history


@dataclass
class FunctionPayload:
    """A function defined in the cell, without the globals it read on the engine: it is rebuilt over the receiving
    namespace, so in the notebook it reads the notebook's `model`, not a copy taken when it was sent."""

    blob: bytes
    tf_function: dict | None = None  # tf.function options, when it was one


def _is_tf_function(value) -> bool:
    return type(value).__module__.startswith("tensorflow") and callable(getattr(value, "python_function", None))


def _function_payload(value) -> FunctionPayload | None:
    fn = value.python_function if _is_tf_function(value) else value
    if not isinstance(fn, types.FunctionType) or fn.__module__ != "__main__":
        return None
    bare = _with_globals(fn, {"__builtins__": builtins})
    bare.__module__ = "__main__"
    options = None
    if fn is not value:  # the tf.function's own options: a notebook's input_signature holds on the ranks too
        options = {
            "jit_compile": getattr(value, "_jit_compile", None),
            "input_signature": getattr(value, "input_signature", None),
            "reduce_retracing": bool(getattr(value, "_reduce_retracing", False)),
        }
    return FunctionPayload(cloudpickle.dumps(bare), options)


def _with_globals(fn, globals_: dict):
    """The same function (code, defaults, closure, attributes) reading its globals from `globals_`."""
    copy = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__, copy.__doc__ = fn.__kwdefaults__, fn.__qualname__, fn.__doc__
    # Still the notebook's (__main__): found again by name where a Keras config names it (a Lambda over it).
    copy.__module__ = fn.__module__
    copy.__dict__.update(fn.__dict__)
    return copy


def _rebuild_function(payload: FunctionPayload, namespace: dict):
    fn = cloudpickle.loads(payload.blob)
    rebuilt = _with_globals(fn, namespace)
    if payload.tf_function is not None:
        import tensorflow as tf

        return tf.function(rebuilt, **payload.tf_function)
    return rebuilt


def bind_functions(namespace: dict) -> None:
    """Functions that arrived without a namespace to read (an engine keeps them across jobs, FunctionPayload) are
    made over `namespace`, a job's: its `train_step` reads the job's `model` and `optimizer`, as in the notebook.
    The methods of the notebook's classes arrived with copies of the globals they read (a `train_step` updating
    the notebook's `loss_tracker`): those now name the job's objects."""
    for name, value in list(namespace.items()):
        if isinstance(value, FunctionPayload):
            namespace[name] = _rebuild_function(value, namespace)
    for value in list(namespace.values()):
        for fn in notebook_functions(value):
            if fn.__globals__ is not namespace:
                fn.__globals__.update({n: namespace[n] for n in _global_names(fn) if n in namespace})


_GLOBAL_ACCESS = {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"}


def notebook_globals(value) -> set:
    """The global names that the notebook's code run by `value` uses: a function's (a tf.function's), or the
    methods' of its classes defined in the notebook (a model's, its layers')."""
    return set().union(*(_global_names(fn) for fn in notebook_functions(value)))


def notebook_functions(value) -> list:
    fn = getattr(value, "python_function", value) if _is_tf_function(value) else value
    if isinstance(fn, types.FunctionType):
        return [fn] if fn.__module__ == "__main__" else []
    if type(value) in (list, tuple) and len(value) <= 64:  # `callbacks = [...]`: each one's
        return [f for item in value if type(item) not in (list, tuple) for f in notebook_functions(item)]
    if isinstance(value, type):
        classes = set(value.__mro__)
    else:
        classes = set(type(value).__mro__)
        layers = getattr(value, "_flatten_layers", None) if keras_objects.is_keras_saveable(value) else None
        if callable(layers):
            classes.update(k for layer in layers(include_self=False) for k in type(layer).__mro__)
    found: list = []
    for klass in classes:
        if getattr(klass, "__module__", None) != "__main__":
            continue
        for member in vars(klass).values():
            member = getattr(member, "__func__", member)  # staticmethod, classmethod
            # A `@tf.function` method (DDPG's `Buffer.update` applying the notebook's optimizers): its Python code.
            member = member.python_function if _is_tf_function(member) else member
            parts = (member.fget, member.fset) if isinstance(member, property) else (member,)
            found.extend(p for p in parts if isinstance(p, types.FunctionType))
    # Functions it holds: a LambdaCallback's `on_epoch_end=lambda epoch, logs: losses.append(logs["loss"])` fills
    # the notebook's `losses`, a LearningRateScheduler's schedule reads the notebook's settings.
    held = vars(value).values() if not isinstance(value, type) and hasattr(value, "__dict__") else ()
    found.extend(f for f in held if isinstance(f, types.FunctionType) and f.__module__ == "__main__")
    return found


def _global_names(fn) -> set:
    found: set = set()
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        found.update(i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_ACCESS)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


def why_unsendable(value, exc, advice=True) -> str:
    """Why `value` cannot travel, in a user's words; `advice` adds what to do (the way back to the notebook: the
    way there, ShipError says it)."""
    if isinstance(exc, datasets.PipelineError):
        return str(exc)
    if datasets.is_dataset(value):
        # The way there sends a notebook's pipeline as its graph; one built on the ranks stays there.
        why = "a tf.data.Dataset built on the ranks stays there"
        return why + ("; build it in the notebook (it is sent to the ranks) or in each %%distribute cell" * advice)
    if _holds(value, datasets.is_dataset):  # TensorFlow's own error says it cannot make an array of a variant tensor
        why = "it holds tf.data datasets, and one built on the ranks stays there"
        return why + ("; build them in the notebook (they are sent to the ranks) or in each %%distribute cell" * advice)
    return f"{type(exc).__name__}: {exc}"


def names_by_id(names, namespace, owners=None) -> dict:
    """{id(value): name} for the Keras objects, datasets and containers of Keras objects (an ensemble's list of
    models) under `names` that the receiver will have under that name; the first name wins for an object under
    several. Not plain values (a dict of settings the cell changed would resolve to the receiver's unchanged one),
    nor optimizers that travel as their model's (OptimizerOf, `owners`)."""
    known: dict = {}
    for n in names:
        value = namespace.get(n)
        if n in namespace and _referable(value) and id(value) not in (owners or {}):
            known.setdefault(id(value), n)
    return known


def _referable(value) -> bool:
    if keras_objects.is_keras_saveable(value) or datasets.is_dataset(value):
        return True
    if tf_checkpoints.is_checkpoint(value) or dataset_iterators.is_iterator(value):  # a checkpoint refers to them
        return True
    if type(value) in (list, tuple):
        return any(keras_objects.is_keras_saveable(v) for v in value)
    if type(value) is dict:
        return any(keras_objects.is_keras_saveable(v) for v in value.values())
    return False


def dumps(name, value, namespace=None, functions_by_reference=False, known=None) -> bytes:
    """Serialise one value; raises with the reason when it cannot be sent. functions_by_reference: send functions
    defined in the cell without the globals they read (the way back to the notebook). known: {id: name} of the
    objects the receiver has by name, which a Keras object built from them refers to instead of copying."""
    if functions_by_reference:
        function = _function_payload(value)
        if function is not None:
            return cloudpickle.dumps(function)
    if is_history(value):
        value = _history_payload(value, namespace)
    elif _holds(value, is_history):  # `histories[name] = model.fit(...)`: each without its model, as one alone
        value = _each(value, lambda v: _history_payload(v, namespace) if is_history(v) else v)
    elif keras_objects.is_keras_saveable(value):
        value = keras_objects.dumps(value, namespace, known)
    elif dataset_iterators.is_iterator(value):
        value = dataset_iterators.dumps(value)
    elif summary_writers.is_writer(value):
        value = summary_writers.dumps(value)
    elif tf_checkpoints.is_checkpoint(value) or tf_checkpoints.is_manager(value):
        value = tf_checkpoints.dumps(value, namespace or {}, known or {})
    elif isinstance(value, type) and value.__module__ == "__main__":  # its methods may name the receiver's objects
        return keras_objects.dumps_code(value, known or {})
    elif _is_callback(value) or _holds(value, _is_callback):  # `callbacks = [EarlyStopping(...), monitor]` too
        # Its class's methods may name the notebook's objects (a GAN monitor's `test_horses` dataset), and fit gave
        # it its model: what the receiver has by name goes as a reference to it (dumps_code).
        travelling = _each_callback(value, lambda v: _without_a_model_not_named(v, known or {}))
        return keras_objects.dumps_code(travelling, {i: n for i, n in (known or {}).items() if i != id(value)})
    return cloudpickle.dumps(value)


def _each_callback(value, change):
    if _is_callback(value):
        return change(value)
    return _each(value, lambda v: change(v) if _is_callback(v) else v)


def _is_callback(value) -> bool:
    return any(c.__name__ == "Callback" and c.__module__.startswith("keras") for c in type(value).__mro__)


def _without_a_model_not_named(callback, known: dict):
    """The callback, without the model fit gave it unless the receiver has that model by name (then it travels as a
    reference): pickled inside the callback it would be a second copy, and perhaps one Keras cannot save unbuilt
    (keras.io CycleGAN's CycleGan is never called itself). Fit sets it again."""
    model = getattr(callback, "_model", None)
    if model is None or id(model) in known:
        return callback
    travelling = copy.copy(callback)
    travelling._model = None
    return travelling


def _with_callbacks_bound(value, resolve):
    """`value` with the references its callbacks travelled with made the receiver's objects again: each callback's
    model (see _without_a_model_not_named), and in a list of callbacks, the items the receiver has by name
    (`callbacks = [early_stopping, monitor]` over the notebook's `early_stopping`)."""

    def own(item):
        if isinstance(item, keras_objects.ReceiversOwn):
            try:
                return resolve(item.name)
            except KeyError:
                return None
        return item

    if not (_is_callback(value) or _holds(value, _is_callback)):
        return value
    value = own(value) if _is_callback(value) else _each(value, own)
    for callback in [value] if _is_callback(value) else value.values() if type(value) is dict else value:
        if _is_callback(callback) and isinstance(getattr(callback, "_model", None), keras_objects.ReceiversOwn):
            callback._model = own(callback._model)
    return value


@dataclass
class TensorOf:
    """A symbolic Keras tensor the cell bound (`x = layers.Dense(8)(inputs)` while building a functional model):
    it travels as its place in a model that travels too (layer, call, output), and comes back as that place's
    tensor in the receiver's model."""

    model_name: str
    layer_index: int  # in the model's _flatten_layers(), the model itself first
    node_index: int
    output_index: int


def is_keras_tensor(value) -> bool:
    return type(value).__name__ == "KerasTensor" and type(value).__module__.startswith("keras")


def _locate_tensor(tensor, names, namespace) -> TensorOf | None:
    for name in names:
        model = namespace.get(name)
        if not is_keras_model(model):
            continue
        for i, layer in enumerate(model._flatten_layers(include_self=True)):
            for k, node in enumerate(getattr(layer, "_inbound_nodes", [])):
                for j, output in enumerate(node.output_tensors):
                    if output is tensor:
                        return TensorOf(name, i, k, j)
    return None


def _tensor_at(place: TensorOf, values, namespace):
    model = values.get(place.model_name, (namespace or {}).get(place.model_name))
    layers = list(model._flatten_layers(include_self=True))
    return layers[place.layer_index]._inbound_nodes[place.node_index].output_tensors[place.output_index]


@dataclass
class OptimizerOf:
    """An optimizer that is a model's (`model.compile(optimizer=opt)`), sent as a reference: the receiving side
    binds it to that model's optimizer, so `model.optimizer is opt` holds there too (two copies would train apart)."""

    model_name: str
    inner: bool = False  # the optimizer a mixed-precision LossScaleOptimizer wraps, not the wrapper


def optimizer_owners(names, namespace) -> dict:
    """{id(optimizer): name of a model among `names` that holds it as its optimizer}."""
    owners: dict = {}
    for name in names:
        optimizer = getattr(namespace.get(name), "optimizer", None) if is_keras_model(namespace.get(name)) else None
        if optimizer is not None:
            owners.setdefault(id(optimizer), name)
            inner = getattr(optimizer, "inner_optimizer", None)  # mixed precision: compile wrapped the user's
            if inner is not None:
                owners.setdefault(id(inner), name)
    return owners


def dumps_sharing(name, value, namespace, owners, **kwargs) -> bytes:
    """dumps, except that a model's optimizer travels as a reference to its model (OptimizerOf)."""
    if keras_objects.is_optimizer(value) and id(value) in owners and owners[id(value)] != name:
        owner = owners[id(value)]
        return cloudpickle.dumps(OptimizerOf(owner, inner=namespace[owner].optimizer is not value))
    return dumps(name, value, namespace, **kwargs)


def pack(names, namespace, also_known=()) -> dict:
    """{name: bytes | Unsendable} for the names present in namespace: what rank 0 sends back to the notebook.
    also_known: names the notebook has already (what it shipped), which Keras objects may refer to."""
    out: dict = {}
    owners = optimizer_owners(names, namespace)
    known = names_by_id([*also_known, *names], namespace, owners)
    for name in names:
        if name not in namespace:
            continue
        if is_keras_tensor(namespace[name]):
            place = _locate_tensor(namespace[name], [*names, *also_known], namespace)
            if place is not None:
                out[name] = cloudpickle.dumps(place)
                continue
        try:
            out[name] = dumps_sharing(
                name, namespace[name], namespace, owners, functions_by_reference=True, known=known
            )
        except Exception as exc:  # any pickling failure: report it, keep the others
            out[name] = Unsendable(name, why_unsendable(namespace[name], exc))
    return out


def unpack(packed: dict, namespace: dict | None = None, in_place=(), known: dict | None = None) -> tuple[dict, dict]:
    """Return (values, problems). Keras objects are rebuilt last, with the classes that came back in scope ahead of
    the namespace's own; Histories get their model back when it travelled too. Names in `in_place` (models and
    optimizers the cell trained without rebinding them) update the namespace's own objects where they fit, so that
    other references to them (`opt` after `model.compile(optimizer=opt)`) see the training too. `known`: more
    objects by name that Keras objects built from them may refer to (an engine's values from earlier shipments)."""
    if namespace is None:  # an engine: the notebook's classes as they arrive, methods included, are the right ones
        return _unpack(packed, namespace, in_place, known)
    with _own_methods_kept():
        return _unpack(packed, namespace, in_place, known)


def _own_methods_kept():
    """cloudpickle hands a class that comes back the receiver's own class object (so isinstance holds), but sets
    on it the methods it travelled with, whose globals are copies taken on the ranks: the notebook's model class
    would read a copy of the notebook's `loss_tracker` ever after. The receiver's classes keep their methods."""
    tracked = list(getattr(cloudpickle.cloudpickle, "_DYNAMIC_CLASS_TRACKER_BY_CLASS", {}))
    kept = {cls: {k: v for k, v in vars(cls).items() if _is_code(v)} for cls in tracked}

    @contextlib.contextmanager
    def kept_methods():
        try:
            yield
        finally:
            for cls, methods in kept.items():
                for attribute, method in methods.items():
                    if vars(cls).get(attribute) is not method:
                        with contextlib.suppress(Exception):
                            setattr(cls, attribute, method)

    return kept_methods()


def _is_code(value) -> bool:
    return isinstance(value, (types.FunctionType, property, staticmethod, classmethod))


def _unpack(packed: dict, namespace, in_place, known) -> tuple[dict, dict]:
    values, problems, blobs = {}, {}, {}
    for name, blob in packed.items():
        if isinstance(blob, Unsendable):
            problems[name] = blob.reason
            continue
        try:
            value = cloudpickle.loads(blob)
        except Exception as exc:
            problems[name] = f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(value, keras_objects.KerasPayload):
            blobs[name] = value
        elif isinstance(value, FunctionPayload) and namespace is not None:
            values[name] = _rebuild_function(value, namespace)
        else:
            values[name] = value
    receivers_own = {k: v for k, v in (namespace or {}).items() if k not in packed}
    # A function not yet made over a namespace (an engine's, FunctionPayload) is nothing a Keras config can name.
    receivers_own.update((k, v) for k, v in values.items() if not isinstance(v, FunctionPayload))

    def resolve(name):
        """The receiver's object for a name a Keras object was built from: what came back, else its own."""
        if name in values:
            return values[name]
        for names in (namespace, known):
            if names is not None and name in names:
                return names[name]
        raise KeyError(f"'{name}', which it was built from, is not here")

    for name, value in list(values.items()):
        if name in in_place and in_place_update.update_each((namespace or {}).get(name), value):
            values[name] = namespace[name]  # the notebook's list of models, each holding its training
        if isinstance(value, datasets.DatasetPayload) or _holds(value, _is_dataset_payload):
            try:  # after the arrays that travelled beside it
                values[name] = _each_pipeline(value, lambda graph: datasets.loads(graph, resolve))
            except Exception as exc:
                del values[name]
                problems[name] = f"{type(exc).__name__}: {construction.first_line(exc, 300)}"
    own_optimizers = _own_optimizers_by_model(values, namespace or {}, in_place)
    for name in _rebuild_order(blobs):
        keras_payload = blobs[name]
        missing = [r for r in keras_payload.refs if r in problems]
        if missing:
            problems[name] = f"it was built from '{missing[0]}', which did not come back"
            continue
        try:
            value = keras_objects.loads(keras_payload, receivers_own, resolve)
        except Exception as exc:
            problems[name] = f"{type(exc).__name__}: {construction.first_line(exc, 300)}"
            continue
        existing = (namespace or {}).get(name) if name in in_place else None
        # Where an optimizer's variables are looked for: what came back first, then the receiving namespace.
        around = in_place_update.Namespaces(arrived=values, receiver=namespace or {}, own_optimizers=own_optimizers)
        updated = existing is not None and in_place_update.update(existing, value, keras_payload, around)
        if not updated and keras_objects.is_optimizer(value):
            # An optimizer travelling on its own arrives unbuilt: build it over the models that came with it.
            in_place_update.update(value, value, keras_payload, around)
        if updated:
            keras_objects.restore_model_state(existing, keras_payload)
        values[name] = existing if updated else value
    for name, value in list(values.items()):
        if isinstance(value, HistoryPayload):
            values[name] = _rebuild_history(value, values.get(value.model_name))
        elif _holds(value, lambda v: isinstance(v, HistoryPayload)):
            values[name] = _each(
                value, lambda v: _rebuild_history(v, values.get(v.model_name)) if isinstance(v, HistoryPayload) else v
            )
        elif isinstance(value, OptimizerOf):
            _bind_model_optimizer(name, value, values, problems)
        elif isinstance(value, TensorOf):
            try:
                if value.model_name in problems:
                    raise LookupError(value.model_name)
                values[name] = _tensor_at(value, values, namespace)
            except Exception:
                del values[name]
                problems[name] = f"it is a symbolic tensor of '{value.model_name}', which did not come back as it was"
    # Iterators and summary writers, checkpoints over them and the objects rebuilt above, then the managers of those
    # checkpoints.
    loaders: dict[type, Callable] = {
        dataset_iterators.IteratorPayload: dataset_iterators.loads,
        summary_writers.WriterPayload: summary_writers.loads,
        tf_checkpoints.CheckpointPayload: tf_checkpoints.loads,
        tf_checkpoints.ManagerPayload: tf_checkpoints.loads,
    }
    for kind, load in loaders.items():
        for name, value in list(values.items()):
            if isinstance(value, kind):
                try:
                    values[name] = load(value, resolve)
                except Exception as exc:
                    del values[name]
                    problems[name] = f"{type(exc).__name__}: {construction.first_line(exc, 300)}"
    # Objects the notebook's methods name, sent as references (keras_objects.dumps_code): the receiver's own.
    for name, value in list(values.items()):
        keras_objects.bind_globals(notebook_functions(value), resolve)
        values[name] = _with_callbacks_bound(value, resolve)
    return values, problems


def _is_dataset_payload(value) -> bool:
    return isinstance(value, datasets.DatasetPayload)


def _each_pipeline(value, load):
    """The dataset a pipeline's graph makes, or the dict, list or tuple of them (other items as they are)."""
    if _is_dataset_payload(value):
        return load(value)
    return _each(value, lambda item: load(item) if _is_dataset_payload(item) else item)


def _rebuild_order(blobs: dict) -> list:
    """Keras payloads in the order they can be rebuilt: an object after those it was built from (construction
    refs), models before optimizers (an optimizer trained in place is rebuilt over its models' variables)."""
    order: list = []
    pending = sorted(blobs, key=lambda n: blobs[n].optimizer_variable_paths is not None)
    while pending:
        ready = [n for n in pending if not (blobs[n].refs & set(pending) - {n})] or pending[:1]
        order.extend(ready)
        pending = [n for n in pending if n not in ready]
    return order


def _own_optimizers_by_model(values, namespace, in_place) -> dict:
    """{id(receiver's model): the receiver's optimizer} for each optimizer the cell read and compiled a model with
    (it came back as that model's, OptimizerOf): the model updated in place is compiled with the receiver's own."""
    found = {}
    for name, reference in values.items():
        if isinstance(reference, OptimizerOf) and not reference.inner and name in in_place:
            model, optimizer = namespace.get(reference.model_name), namespace.get(name)
            if model is not None and keras_objects.is_optimizer(optimizer):
                found[id(model)] = optimizer
    return found


def _bind_model_optimizer(name, reference: OptimizerOf, values, problems):
    optimizer = getattr(values.get(reference.model_name), "optimizer", None)
    if reference.inner:
        optimizer = getattr(optimizer, "inner_optimizer", None)
    if optimizer is None:
        del values[name]
        problems[name] = f"it is the optimizer of '{reference.model_name}', which did not come back"
    else:
        values[name] = optimizer


def _rebuild_history(payload: HistoryPayload, model):
    history = keras_objects.history_of(payload.history, payload.params, payload.epoch, model)
    if model is not None:
        # `history = model.fit(...)` is `model.history` in one process: the same object here too, when it is.
        held = getattr(model, "__dict__", {}).get("history")
        if held is not None and is_history(held) and (held.history, held.epoch) == (history.history, history.epoch):
            model.history = history
    return history
