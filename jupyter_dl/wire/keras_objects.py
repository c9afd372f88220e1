"""Keras models and layers on the wire, in both directions (kernel -> engines, rank 0 -> kernel).

Keras 3 pickles a model as a .keras archive: its config names classes, and the receiving side must find them.
Classes and functions defined in a notebook cell live in `__main__` on the sending side only, so they travel with
the model (by value, through cloudpickle) and are in scope while it is rebuilt; where the receiver already has an
object of that name that this transfer does not replace (a class from an earlier cell), the receiver's own is used,
so `isinstance(model, Net)` holds in the notebook.

Keras also rebuilds a subclassed model by calling its constructor with the arguments it recorded, and
`keras.Model.__new__` records the defaults instead of the arguments given (Keras 3.x): `Net(units=4)` comes back as
`Net(units=8)` and its weights no longer fit. `record_constructor_arguments()` makes it record what was given.
"""

import contextlib
import inspect
import io
import sys
import types
import warnings
from dataclasses import dataclass, field

import cloudpickle

from jupyter_dl.wire import construction, summary_writers
from jupyter_dl.wire.after_import import after_import

_SIMPLE = (str, int, float, bool, type(None))


@dataclass
class KerasPayload:
    blob: bytes  # the object, pickled by Keras (a .keras archive)
    custom: bytes  # {name: class or function} it needs, pickled by value
    type_name: str = ""
    # The optimizer's state (step count, moments): Keras' archive has it, but a model rebuilt from it compiles a
    # fresh optimizer that is not built yet and skips loading it ("Skipping variable loading for optimizer").
    optimizer_state: list | None = None
    # The model's dtype policy on the sending side (e.g. mixed_float16): Keras rebuilds a model under the receiver's
    # global policy, and compile only wraps the optimizer in a LossScaleOptimizer under a mixed one.
    dtype_policy: str | None = None
    # For an optimizer sent on its own (a custom loop's): the paths of the variables it was built for, so the
    # receiver can build it over its own copies of them (see restore_optimizer).
    optimizer_variable_paths: list | None = None
    # Which of the model's trainable variables its optimizer was built over (a Distiller's covers the student's
    # only), and the other optimizers it holds (a GAN's d_optimizer, g_optimizer): {attribute: (state, indices)}.
    optimizer_indices: list | None = None
    other_optimizers: dict = field(default_factory=dict)
    # The same variables as (name, index): the index-th trainable variable of the model the receiver has under that
    # name. Paths depend on the order layers were made in each process ('dense' here, 'dense_1' there).
    optimizer_variable_places: list | None = None
    # Names of the receiver's objects this one was built from (construction.NameRef): rebuilt after them.
    refs: set = field(default_factory=set)
    # A metric's running totals: Keras' archive rebuilds a metric empty (`epoch_loss_avg.result()` would say 0.0).
    metric_state: list | None = None
    # The History its last fit left on it (`model.history`: per-epoch logs, params, epochs), which Keras' archive
    # leaves out: a cell that only calls `model.fit(...)` reads `model.history.history` afterwards.
    history: tuple | None = None
    # Which of its layers train, outer ones first (layers._flatten_layers order): Keras' archive rebuilds a
    # Sequential that was frozen whole (`base_model.trainable = False`) as trainable around frozen layers, and then
    # `base_model.trainable = True`, the value the outer layer already has, did not reach its layers.
    trainable_flags: list | None = None
    # A compiled model's metrics' running totals (`model.metrics`: its loss tracker, compile metrics, the trackers
    # a custom train_step updates), metric by metric: Keras' archive rebuilds them empty, and they are not among
    # the model's variables.
    metrics_state: list | None = None


is_keras_saveable = construction.is_keras_saveable


def dumps(value, namespace=None, names_by_id=None) -> KerasPayload:
    """`names_by_id`: {id(object): name} of objects the receiver has under a name; arguments the object was built
    from that are among them travel as references (construction.NameRef)."""
    record_constructor_arguments()
    every_name = dict(names_by_id or {})  # its own too: a method of its class may name it (dumps_code)
    names_by_id = {k: v for k, v in every_name.items() if k != id(value)}
    with construction.serialising(names_by_id) as referenced:
        custom = custom_objects_of(value, namespace or {})
        try:
            blob = cloudpickle.dumps(value)
        except NotImplementedError as exc:  # Keras: a class of its own it cannot rebuild
            raise TypeError(
                f"{type(value).__name__} cannot be rebuilt on the other side ({exc}); give the class a "
                f"get_config() returning its constructor arguments"
            ) from None
    policy = getattr(getattr(value, "dtype_policy", None), "name", None)
    if is_optimizer(value):
        built_over = value._trainable_variables if value.built else None
        return KerasPayload(
            blob,
            dumps_code(custom, every_name),
            type(value).__name__,
            optimizer_state(value),
            None,
            None if built_over is None else [_path(v) for v in built_over],
            optimizer_variable_places=None if built_over is None else _places(built_over, namespace, names_by_id),
        )
    return KerasPayload(
        blob,
        dumps_code(custom, every_name),
        type(value).__name__,
        _optimizer_state(value),
        policy,
        optimizer_indices=optimizer_positions(getattr(value, "optimizer", None), value),
        other_optimizers={
            attribute: (optimizer_state(optimizer), optimizer_positions(optimizer, value))
            for attribute, optimizer in other_optimizers(value).items()
        },
        refs=set(referenced),
        metric_state=[v.numpy() for v in value.variables] if _is_metric(value) else None,
        history=_history_of(value),
        metrics_state=_metrics_state(value),
        trainable_flags=trainable_flags(value),
    )


def trainable_flags(value) -> list | None:
    """Each layer's `trainable`, the object itself first, then its layers outer to inner; None for what has none."""
    if not hasattr(value, "_flatten_layers"):
        return None
    return [layer.trainable for layer in value._flatten_layers(include_self=True, recursive=True)]


def set_trainable_flags(value, flags) -> bool:
    """Set what trainable_flags() read, in its order: a layer's flag sets its sublayers', which their own then
    override. False, changing nothing, when the layers do not pair up."""
    if flags is None or not hasattr(value, "_flatten_layers"):
        return False
    layers = value._flatten_layers(include_self=True, recursive=True)
    if len(layers) != len(flags):
        return False
    for layer, flag in zip(layers, flags):
        if layer.trainable != flag:
            layer.trainable = flag
    return True


@dataclass
class ReceiversOwn:
    """In the globals of a notebook function or method sent by value: the object the receiver has under `name`."""

    name: str


class _CodePickler(cloudpickle.Pickler):
    def __init__(self, file, names_by_id):
        super().__init__(file)
        self._names_by_id = names_by_id

    def reducer_override(self, obj):
        name = self._names_by_id.get(id(obj))
        if name is not None and not isinstance(obj, (type, types.FunctionType)):
            return ReceiversOwn, (name,)
        return super().reducer_override(obj)


def dumps_code(value, names_by_id: dict) -> bytes:
    """cloudpickle of notebook classes and functions (a model's custom objects, a class the cell reads), with the
    objects the receiver has by name (`names_by_id`: {id: name}) that their globals hold travelling as ReceiversOwn.
    By value, a class whose method names the notebook's `model` (the text-generation tutorial's
    `CustomTraining.train_step` applies gradients to `model.trainable_variables`) would carry that model, an
    instance of itself, which cannot be rebuilt before the class is. The receiver binds the names afterwards
    (bind_globals; on the ranks also payload.bind_functions, over the job's objects)."""
    if not names_by_id:
        return cloudpickle.dumps(value)
    buffer = io.BytesIO()
    _CodePickler(buffer, names_by_id).dump(value)
    return buffer.getvalue()


def bind_globals(functions, lookup) -> None:
    """Replace the ReceiversOwn in the functions' globals by `lookup(name)` where it has the name."""
    for fn in functions:
        for key, held in list(fn.__globals__.items()):
            if isinstance(held, ReceiversOwn):
                with contextlib.suppress(KeyError):
                    fn.__globals__[key] = lookup(held.name)


def is_history(value) -> bool:
    cls = type(value)
    return cls.__name__ == "History" and cls.__module__.startswith("keras")


def _history_of(value) -> tuple | None:
    """(logs, params, epochs) of the History a fit left on the model as `model.history`, or None."""
    history = getattr(value, "__dict__", {}).get("history")
    if history is None or not is_history(history):
        return None
    return dict(history.history), dict(history.params or {}), list(history.epoch)


def _model_metrics(value) -> list | None:
    """A compiled model's `metrics` (its own property may be the user's, reading trackers compile() made)."""
    if not hasattr(value, "get_compile_config") or not getattr(value, "compiled", False):
        return None
    try:
        return list(value.metrics)
    except Exception:
        return None


def _metrics_state(value) -> list | None:
    metrics = _model_metrics(value)
    if metrics is None:
        return None
    return [[variable.numpy() for variable in metric.variables] for metric in metrics]


def restore_model_state(value, payload: KerasPayload) -> None:
    """What Keras' archive leaves out of a model, put into `value` (the rebuilt copy, or the receiver's own model
    that took its training): the History its last fit left, its metrics' totals where they pair up."""
    states = payload.metrics_state
    metrics = _model_metrics(value) if states is not None else None
    if metrics is not None and states is not None and len(metrics) == len(states):
        for metric, state in zip(metrics, states):
            assign_if_same_shapes(metric.variables, state)
    _restore_history(value, payload)


def _restore_history(value, payload: KerasPayload) -> None:
    """`value.history` as the sender's model had it: a History of the same logs, set to `value`."""
    if payload.history is not None:
        logs, params, epochs = payload.history
        value.history = history_of(logs, params, epochs, value)


def history_of(logs, params, epochs, model=None):
    """A Keras History holding these logs, params and epochs, set to `model` where there is one."""
    import keras

    history = keras.callbacks.History()
    history.history, history.params, history.epoch = logs, params, epochs
    if model is not None:
        history.set_model(model)
    return history


def _path(variable) -> str:
    """A Keras variable's path; a plain tf.Variable (keras.io's style transfer optimizes one) has its name only."""
    return getattr(variable, "path", None) or variable.name


def _places(variables, namespace, names_by_id) -> list | None:
    """Each variable as (name, index) of a Keras object the receiver has by name, (name, (key, index)) of one in a
    list or dict it has by name, or (name, None) for a variable the receiver has by name itself (a notebook
    `tf.Variable` a custom loop optimizes); None unless all are found."""
    where: dict = {}
    for name in names_by_id.values():
        holder = (namespace or {}).get(name)
        if is_keras_saveable(holder) and not is_optimizer(holder):
            for index, variable in enumerate(getattr(holder, "trainable_variables", [])):
                where.setdefault(id(variable), (name, index))
        elif isinstance(holder, (list, tuple, dict)):  # `nets = {"actor": ..., "critic": ...}`, one optimizer
            for key, item in holder.items() if isinstance(holder, dict) else enumerate(holder):
                if is_keras_saveable(item) and not is_optimizer(item):
                    for index, variable in enumerate(getattr(item, "trainable_variables", [])):
                        where.setdefault(id(variable), (name, (key, index)))
    unplaced = {id(v) for v in variables} - set(where)
    for name, value in (namespace or {}).items() if unplaced else ():
        if id(value) in unplaced and not name.startswith("_"):
            where.setdefault(id(value), (name, None))
    found = [where.get(id(v)) for v in variables]
    return found if all(found) else None


def _is_metric(value) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(value, keras.metrics.Metric)


def other_optimizers(value) -> dict:
    """{attribute: optimizer} for the optimizers a model holds besides `model.optimizer` (a GAN's two)."""
    main = getattr(value, "optimizer", None)
    found = {}
    for attribute, part in getattr(value, "__dict__", {}).items():
        if not attribute.startswith("_") and is_optimizer(part) and part is not main:
            found[attribute] = part
    return found


def optimizer_positions(optimizer, model):
    """Positions in model.trainable_variables of the variables `optimizer` was built for; None when unknown."""
    if optimizer is None or not getattr(optimizer, "built", False):
        return None
    optimizer = getattr(optimizer, "inner_optimizer", None) or optimizer
    positions = {id(v): i for i, v in enumerate(model.trainable_variables)}
    indices = [positions.get(id(v)) for v in getattr(optimizer, "_trainable_variables", [])]
    return None if any(i is None for i in indices) else indices


def is_optimizer(value) -> bool:
    return any(c.__name__ == "Optimizer" and c.__module__.startswith("keras") for c in type(value).__mro__)


def optimizer_state(optimizer):
    """The optimizer's variables' values (step count, learning rate, moments), or None before it is built."""
    if optimizer is None or not getattr(optimizer, "built", False):
        return None
    return [variable.numpy() for variable in optimizer.variables]


def _optimizer_state(value):
    return optimizer_state(getattr(value, "optimizer", None))


def restore_optimizer(optimizer, state, variables) -> bool:
    """Put `state` into `optimizer`, building it over `variables` (what it trains) first if needed. False when
    the state does not fit (another optimizer, other variables): then nothing is changed."""
    if optimizer is None or state is None:
        return False
    if not optimizer.built:
        if variables is None:
            return False
        optimizer.build(variables)
    return assign_if_same_shapes(optimizer.variables, state)


def assign_if_same_shapes(variables, saved) -> bool:
    """Assign `saved` (arrays) to `variables` one to one; False, changing nothing, when they do not pair up."""
    if not same_shapes(variables, saved):
        return False
    for variable, value in zip(variables, saved):
        variable.assign(value)
    return True


def same_shapes(mine, theirs) -> bool:
    """Whether two lists of variables (or arrays) pair up one to one with the same shapes."""
    return len(mine) == len(theirs) and all(tuple(a.shape) == tuple(b.shape) for a, b in zip(mine, theirs))


def restore_optimizers(value, payload: KerasPayload) -> bool:
    """Put every optimizer state in the payload into `value`'s optimizers, each built over the variables it was
    built for on the sending side. False when one did not fit."""
    fitted = True
    plan = {"optimizer": (payload.optimizer_state, payload.optimizer_indices), **payload.other_optimizers}
    for attribute, (state, indices) in plan.items():
        optimizer = getattr(value, attribute, None)
        if optimizer is None or state is None:
            continue
        variables = list(value.trainable_variables)
        if indices is not None and all(i < len(variables) for i in indices):
            variables = [variables[i] for i in indices]
        fitted = restore_optimizer(optimizer, state, variables) and fitted
    return fitted


@contextlib.contextmanager
def quiet_rebuild():
    """Keras' warnings about a model rebuilt from its archive, which the rebuilding side caused and settles:
    an optimizer built on arrival has more variables than the unbuilt one that was saved (its state is put back
    afterwards, when there is one), a custom layer without build() builds on the call that reconnects the graph, as
    it did for the sender, and compile arguments come back through the construction record."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        warnings.filterwarnings("ignore", message=".*was called on layer .* does not have a `build\\(\\)` method")
        warnings.filterwarnings("ignore", message=".*compile\\(\\)` was not called as part of model loading")
        yield


def loads(payload: KerasPayload, receivers_own: dict | None = None, resolve=None):
    """Rebuild the object; `receivers_own` maps names to objects the receiver prefers to the travelling copies
    (classes), `resolve(name)` gives the receiver's object for an argument that travelled as a reference."""
    import keras
    from keras.src.saving.serialization_lib import SafeModeScope

    record_constructor_arguments()
    scope = cloudpickle.loads(payload.custom)
    scope.update({k: v for k, v in (receivers_own or {}).items() if k in scope})
    # Our own engines and kernel produced the archive: Lambda layers and other code in it are the user's own.
    previous_policy = keras.config.dtype_policy()
    if payload.dtype_policy:
        keras.config.set_dtype_policy(payload.dtype_policy)
    try:
        with (
            keras.saving.custom_object_scope(scope),
            SafeModeScope(False),
            construction.deserialising(resolve or construction.no_names) as lent,
            quiet_rebuild(),
        ):
            value = lent.value = cloudpickle.loads(payload.blob)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    set_trainable_flags(value, payload.trainable_flags)  # first: the optimizers' variables are counted by them
    restore_optimizers(value, payload)
    if payload.metric_state is not None:
        assign_if_same_shapes(value.variables, payload.metric_state)
    restore_model_state(value, payload)
    return value


def custom_objects_of(value, namespace) -> dict:
    """The user-defined classes and functions the object's config names, found in its classes and in namespace."""
    import keras

    found = {}
    for obj in _classes_in(value):
        if _user_defined(obj):
            found[obj.__name__] = obj
            # A class decorated with register_keras_serializable is looked up by its registered name
            # ("Custom>Net"), which the receiver's registry lacks: the decorator ran on the sending side only.
            found[keras.saving.get_registered_name(obj)] = obj
    for name in _names_in_config(value):
        candidate = namespace.get(name)
        if (
            candidate is not None
            and _user_defined(candidate)
            and (isinstance(candidate, type) or isinstance(candidate, types.FunctionType))
        ):
            found.setdefault(name, candidate)
    return found


def _classes_in(value):
    """The classes of the object, its layers, its loss and optimizers, and the arguments it was built and
    compiled with (functions among them count as classes here: they travel the same way)."""
    parts = [value]
    layers = getattr(value, "_flatten_layers", None)
    if callable(layers):
        parts.extend(layers(include_self=False))
    for part in list(parts):
        parts.extend(construction.recorded_parts(part))
        # Functions a layer holds (a Lambda over a notebook function): its config names them only by name. Not
        # methods (Keras keeps a wrapped `build` there).
        held = getattr(part, "__dict__", {}).values()
        parts.extend(f for f in held if isinstance(f, types.FunctionType) and "." not in f.__qualname__)
        # Notebook regularizers, constraints and initializers a Keras layer holds (PointNet's Dense with an
        # `OrthogonalRegularizer` activity regularizer): its config names their classes only by name.
        parts.extend(v for v in held if _user_defined(type(v)) and hasattr(type(v), "from_config"))
    for attribute in ("loss", "optimizer"):
        part = getattr(value, attribute, None)
        if part is not None and not isinstance(part, (str, list, dict)):
            parts.append(part)
    # A notebook learning-rate schedule in an optimizer (the Transformer tutorial's `CustomSchedule`): the
    # optimizer's config names its class only by name, which the sender's namespace may not hold (an engine's).
    parts.extend(_schedule_of(part) for part in list(parts) if is_optimizer(part))
    classes = set()
    for part in parts:
        if isinstance(part, (type, types.FunctionType)):
            classes.add(part)
        elif not isinstance(part, (str, int, float, bool, type(None))):
            classes.update(type(part).__mro__)
    return classes


def _schedule_of(optimizer):
    """The learning rate an optimizer was given (a schedule, a callable, a number), through a LossScaleOptimizer."""
    return getattr(getattr(optimizer, "inner_optimizer", optimizer), "_learning_rate", None)


def _names_in_config(value):
    """Every class or function name the object's Keras config mentions (custom losses, metrics, activations...)."""
    import keras

    try:
        config = keras.saving.serialize_keras_object(value)
    except Exception:  # the pickling below reports what is wrong, in Keras' own words
        return set()
    names = set()
    stack = [config]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in ("class_name", "registered_name"):
                if isinstance(item.get(key), str):
                    names.add(item[key].split(">")[-1])
            if item.get("class_name") == "function" and isinstance(item.get("config"), str):
                names.add(item["config"])
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    # Bare strings ("accuracy", "mse") name Keras' built-ins: a notebook function of that name must not shadow them.
    return names


def global_dtype_policy() -> str | None:
    """Keras' global dtype policy in this process, when Keras is loaded here (not imported for this)."""
    keras = sys.modules.get("keras")
    return keras.config.dtype_policy().name if keras is not None else None


def registrations(values: dict) -> dict:
    """{name: 'package>Name'} for the values (classes, or objects of classes) that `register_keras_serializable`
    registered under a name of their own. A class sent by value is a new class on the engine, which the decorator
    never saw: `model.save` there would write a name that `load_model` here cannot find."""
    keras = sys.modules.get("keras")
    if keras is None:
        return {}
    found = {}
    for name, value in values.items():
        cls = value if isinstance(value, type) else type(value)
        registered = keras.saving.get_registered_name(cls)
        if registered != cls.__name__ and ">" in registered:
            found[name] = registered
    return found


def register_again(registrations_by_name: dict, namespace: dict) -> None:
    """On the engine: register the classes that arrived under the names they had in the notebook."""
    if not registrations_by_name:
        return
    import keras

    for name, registered in registrations_by_name.items():
        value = namespace.get(name)
        cls = value if isinstance(value, type) else type(value)
        package, _, class_name = registered.rpartition(">")
        if keras.saving.get_registered_name(cls) != registered:
            keras.saving.register_keras_serializable(package=package, name=class_name)(cls)


def _user_defined(obj) -> bool:
    return getattr(obj, "__module__", None) == "__main__"


# ----------------------------------------------------------------------------------- constructor arguments


def record_constructor_arguments():
    """Make `keras.Model.__new__` record the constructor arguments a subclass was given, and Keras objects of
    classes outside Keras travel by what built them (construction.install); idempotent."""
    module = sys.modules.get("keras.src.models.model")
    if module is not None:
        _patch_model_class(module.Model)
        construction.install()


def _record(instance, cls, args, kwargs):
    """Keras' own rule for an automatic config (simple values only), applied to the arguments actually given."""
    from keras.src.saving.serialization_lib import SerializableDict

    try:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    except TypeError:
        return  # Keras will fail the call itself
    bound.apply_defaults()
    spec = inspect.getfullargspec(cls.__init__)
    arguments = dict(bound.arguments)
    arguments.pop(spec.args[0], None)
    if spec.varkw:
        arguments.update(arguments.pop(spec.varkw, {}))
    if spec.varargs and arguments.pop(spec.varargs, ()):
        return
    arguments.pop("name", None)
    import keras

    try:
        simple = all(isinstance(v, _SIMPLE) for v in keras.tree.flatten(arguments))
    except TypeError:
        simple = False
    # Layer.__setattr__ would try to track the dict; Keras sets it the same way, unlocked, in Operation.__new__.
    object.__setattr__(instance, "_auto_config", SerializableDict(**arguments) if simple else None)


def _patch_model_class(model_class):
    if getattr(model_class.__new__, "_jdl_records_arguments", False):
        return
    original = model_class.__new__

    def __new__(cls, *args, **kwargs):
        instance = original(cls, *args, **kwargs)
        if isinstance(instance, cls) and cls.__init__ is not model_class.__init__ and (args or kwargs):
            _record(instance, cls, args, kwargs)
        return instance

    __new__._jdl_records_arguments = True
    model_class.__new__ = __new__


def record_constructor_arguments_when_keras_loads():
    """Kernel side, at extension load: patch now if Keras is loaded, else as soon as it is (so models built in the
    notebook before the first distributed cell can travel too); TensorFlow's summary writers likewise."""
    after_import("keras.src.models.model", _record_in_model_module)
    summary_writers.record_settings_when_tensorflow_loads()


def _record_in_model_module(module):
    # keras.Model is the class defined there; keras' top level re-exports the same object.
    _patch_model_class(module.Model)
    construction.install()
