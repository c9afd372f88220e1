"""Keras objects travel by what built them, not by `get_config`.

In one process a wrapper model (`VAE(encoder, decoder)`, `Distiller(student=..., teacher=...)`, a GAN with its own
`compile`) or a layer whose constructor takes no `**kwargs` never needs `get_config`. Keras' pickling (a .keras
archive) does: it rebuilds each object with `cls(**get_config())`. So while a Keras object of a class defined
outside Keras is made, the arguments its constructor was given are noted on it, and so are those of its outermost
`compile` call (the user's override, not the `super().compile()` inside it). While jupyter-dl serialises (and only
then: a user's own `model.save` behaves as Keras made it), such an object's default `get_config` returns that
record instead, and `from_config` replays it: the constructor, then `compile`, then attributes the user set on the
object. Keras then loads the trained values into the rebuilt object as usual, walking its attributes.

In the record, an argument that is a value the receiving side has under a name (the notebook's `encoder`, or one
shipped in the same batch) travels as a `NameRef` and is replaced by the receiver's own object, so
`vae.encoder is encoder` holds there as in one process. Other Keras objects travel as their Keras config; the rest
by cloudpickle.

Kernel and engines both import this module (through keras_objects): it is the wire format for Keras objects.
"""

import base64
import contextlib
import contextvars
import copy
import functools
import inspect
import sys
from dataclasses import dataclass, field

import cloudpickle

RECORD_KEY = "__jupyter_dl_built_with__"
# In a Keras config (a layer inside a Sequential or functional model): "this is the receiver's object of this name".
NAME_KEY = "__jupyter_dl_receivers_own__"
_KERAS_PACKAGES = ("keras", "tensorflow", "tf_keras")
_SIMPLE = (str, int, float, bool, complex, bytes, type(None))

# While serialising: {id(object): name the receiver knows it by}; None outside our serialisation.
_names_by_id: contextvars.ContextVar = contextvars.ContextVar("jupyter_dl_names_by_id", default=None)
# While deserialising: a function name -> the receiver's own object (KeyError when it has none).
_resolver: contextvars.ContextVar = contextvars.ContextVar("jupyter_dl_resolver", default=None)
# Names the records written so far referred to (the receiver must have them before this object is rebuilt).
_referenced: contextvars.ContextVar = contextvars.ContextVar("jupyter_dl_referenced", default=None)
# While deserialising: the receiver's layers lent to rebuilt graphs (_LentLayers).
_lent: contextvars.ContextVar = contextvars.ContextVar("jupyter_dl_lent", default=None)


class _Call:
    """The arguments of one call. Deliberately not a tuple or list: Keras' saving walks an object's attributes and
    saves the layers it finds in containers, which would save an argument's weights a second time."""

    __slots__ = ("args", "kwargs")

    def __init__(self, args, kwargs):
        self.args, self.kwargs = tuple(args), dict(kwargs)


@dataclass
class NameRef:
    """An argument that is the receiver's object of this name."""

    name: str


@dataclass
class KerasConfig:
    """A Keras object (layer, model, optimizer, loss, metric) that travels as its Keras config; its trained values,
    where it has any, are loaded by Keras' walk over the object that holds it."""

    config: dict


@dataclass
class Record:
    args: tuple
    kwargs: dict
    compile: tuple | None = None  # (args, kwargs) of the outermost compile call
    attributes: dict = field(default_factory=dict)  # plain values the user set on the object
    # Build configs of sub-layers held as attributes that the constructor leaves unbuilt (keras.io's contrastive
    # model's encoder, a Sequential without an Input, builds on its first call in train_step): built again on
    # arrival, so their trained weights have somewhere to load.
    built_parts: dict = field(default_factory=dict)


def is_foreign(cls) -> bool:
    """A class written outside Keras and TensorFlow: the user's, or a library's built on Keras."""
    return (getattr(cls, "__module__", "") or "").split(".")[0] not in _KERAS_PACKAGES


# --------------------------------------------------------------------------------------------- transport


@contextlib.contextmanager
def serialising(names_by_id: dict | None = None):
    """While active, foreign Keras objects without their own get_config serialise as their construction record;
    arguments whose id is in `names_by_id` travel as references to those names. Yields the set of names used."""
    referenced: set = set()
    tokens = (_names_by_id.set(dict(names_by_id or {})), _referenced.set(referenced))
    try:
        yield referenced
    finally:
        _referenced.reset(tokens[1])
        _names_by_id.reset(tokens[0])


@contextlib.contextmanager
def deserialising(resolve):
    """While active, records rebuild their objects; `resolve(name)` gives the receiver's object for a NameRef.
    Yields the receiver's layers lent to the graphs rebuilt meanwhile; set its `value` to what was rebuilt."""
    lent = _LentLayers()
    tokens = (_resolver.set(resolve), _lent.set(lent))
    try:
        yield lent
    finally:
        _lent.reset(tokens[1])
        _resolver.reset(tokens[0])
        lent.give_back()


class _LentLayers:
    """The receiver's own layers a functional graph is rebuilt over (`combined = Model(z, discriminator(generator(z)))`
    after the notebook's `generator`). Keras' config numbers a layer's calls within that graph only, and its
    rebuild looks them up in the layer's list of calls: a notebook layer already called in other graphs (the
    original `combined`) has more, and the rebuild would take one of the old graph's tensors ("the name
    input_layer_2 is used 2 times"). While rebuilding, each such layer shows no calls, as a fresh copy has none;
    afterwards its old calls come first again, and the graphs built meanwhile are renumbered to match. A functional
    model has no call of its own in Keras 3 either (keras.io's SupCon classifier over the notebook's `encoder`): the
    "pre-existing node" its config counts is an offset that from_config takes off again."""

    def __init__(self):
        self.layers: dict = {}  # id -> (layer, its calls before)
        self.value = None  # what was rebuilt: the graphs in it are renumbered

    def lend(self, layer):
        calls = getattr(layer, "_inbound_nodes", None)
        if isinstance(calls, list) and id(layer) not in self.layers:
            self.layers[id(layer)] = (layer, calls)
            layer._inbound_nodes = []
        return layer

    def give_back(self):
        from keras.src.ops.function import make_node_key
        from keras.src.ops.node import KerasHistory

        renumbered, old_graphs = {}, set()
        for layer, before in self.layers.values():
            new = layer._inbound_nodes
            layer._inbound_nodes = before + new
            old_graphs.update(id(inner) for inner in layer._flatten_layers(include_self=True))
            for k, node in enumerate(new):
                renumbered[make_node_key(layer, k)] = make_node_key(layer, len(before) + k)
                for tensor in node.output_tensors:
                    history = getattr(tensor, "_keras_history", None)
                    if history is not None and history[0] is layer:
                        tensor._keras_history = KerasHistory(layer, len(before) + k, history[2])
        built = getattr(self.value, "_flatten_layers", None)
        if not renumbered or built is None:
            return
        for graph in built(include_self=True):
            if id(graph) not in old_graphs and isinstance(getattr(graph, "_nodes", None), set):
                graph._nodes = {renumbered.get(key, key) for key in graph._nodes}


def no_names(name):
    """The resolver where the sender referred to no names (what it wrote for itself, e.g. a job's results)."""
    raise KeyError(f"'{name}' is not here")


def _encode(value, where):
    """`value` with notebook objects replaced by NameRefs and Keras objects by their configs, recursively."""
    if isinstance(value, _SIMPLE):
        return value
    names = _names_by_id.get() or {}
    if id(value) in names:
        _referenced.get().add(names[id(value)])
        return NameRef(names[id(value)])
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_encode(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, dict) and type(value) is dict:
        return {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}
    if is_keras_saveable(value):
        from keras.src.saving import serialization_lib

        try:
            return KerasConfig(serialization_lib.serialize_keras_object(value))
        except Exception as exc:
            raise TypeError(f"{where} ({type(value).__name__}) could not travel: {first_line(exc)}") from None
    try:
        cloudpickle.dumps(value)
    except Exception as exc:
        raise TypeError(f"{where} ({type(value).__name__}) could not travel: {first_line(exc)}") from None
    return value


def _decode(value):
    if isinstance(value, NameRef):
        return _resolver.get()(value.name)
    if isinstance(value, KerasConfig):
        from keras.src.saving import serialization_lib

        return serialization_lib.deserialize_keras_object(value.config)
    if type(value) in (list, tuple):
        return type(value)(_decode(v) for v in value)
    if type(value) is dict:
        return {k: _decode(v) for k, v in value.items()}
    return value


def _record_of(obj) -> Record:
    cls = type(obj).__name__
    made = obj.__dict__.get("_jdl_made_with")
    compiled = obj.__dict__.get("_jdl_compiled_with")
    args = tuple(_encode(a, f"argument {i} of {cls}()") for i, a in enumerate(made.args))
    kwargs = {k: _encode(v, f"argument '{k}' of {cls}()") for k, v in made.kwargs.items()}
    compile_call = None
    if compiled is not None:
        compile_call = (
            tuple(_encode(a, f"argument {i} of {cls}.compile()") for i, a in enumerate(compiled.args)),
            {k: _encode(v, f"argument '{k}' of {cls}.compile()") for k, v in compiled.kwargs.items()},
        )
    return Record(args, kwargs, compile_call, _user_attributes(obj), _built_parts(obj))


def _built_parts(obj) -> dict:
    parts = {}
    for name, value in obj.__dict__.items():
        if not name.startswith("_") and getattr(value, "built", False) and hasattr(value, "get_build_config"):
            with contextlib.suppress(Exception):
                if config := value.get_build_config():
                    parts[name] = _plain(config)
    return parts


def _plain(value):
    """Keras' tracked dicts and lists (a build config is one) as plain ones: they do not unpickle elsewhere."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value) if type(value) in (list, tuple) else list(map(_plain, value))
    return value


def _user_attributes(obj) -> dict:
    """Plain values set on the object that a plain Keras model does not have (`self.latent_dim`, `self.alpha`)."""
    keras_own = _keras_attribute_names()
    out = {}
    for name, value in obj.__dict__.items():
        if name.startswith("_") or name in keras_own:
            continue
        if isinstance(value, _SIMPLE) or (type(value) in (list, tuple) and all(isinstance(v, _SIMPLE) for v in value)):
            out[name] = value
    return out


@functools.lru_cache(maxsize=1)
def _keras_attribute_names() -> frozenset:
    import keras

    # Named, so that making them takes no automatic name ("model_3") from the user's objects.
    model, layer = keras.Model(name="_jdl_model"), keras.layers.Layer(name="_jdl_layer")
    return frozenset(vars(model)) | frozenset(vars(layer))


def _rebuild(cls, config):
    record = cloudpickle.loads(base64.b64decode(config[RECORD_KEY]))
    obj = cls(*_decode(record.args), **_decode(record.kwargs))
    name = config.get("name")
    if name and getattr(obj, "name", name) != name:
        with contextlib.suppress(Exception):
            obj.name = name
    # Only when it differs: setting a model's `trainable` sets every sub-layer's, and would unfreeze a frozen part
    # (a distiller's teacher) that the constructor was given.
    if "trainable" in config and obj.trainable != config["trainable"]:
        obj.trainable = config["trainable"]
    for attribute, build_config in record.built_parts.items():
        part = getattr(obj, attribute, None)
        if part is not None and not getattr(part, "built", True):
            with contextlib.suppress(Exception):  # as Keras' loader would leave it
                part.build_from_config(build_config)
    if record.compile is not None:
        cargs, ckwargs = record.compile
        obj.compile(*_decode(cargs), **_decode(ckwargs))
        # Keras' loader would compile again from the base compile config (or warn that compile is custom).
        object.__setattr__(obj, "_jdl_compile_replayed", True)
    for attribute, value in record.attributes.items():
        if getattr(obj, attribute, _MISSING) != value:
            with contextlib.suppress(Exception):
                setattr(obj, attribute, value)
    return obj


_MISSING = object()


# --------------------------------------------------------------------------------------------- recording


def _note_call(obj, attribute, args, kwargs):
    object.__setattr__(
        obj, attribute, _Call(tuple(_snapshot(a) for a in args), {k: _snapshot(v) for k, v in kwargs.items()})
    )


def _snapshot(value):
    """An argument as given: a container of plain values is copied (a list of sizes that the constructor or the
    user changes later must not change the record); anything else is kept by reference, so that an argument the
    receiver has by name (an ensemble's list of models, an encoder) can be referred to by it."""
    if type(value) in (list, tuple, dict) and all(isinstance(v, _SIMPLE) for v in _flatten([value])):
        return copy.deepcopy(value)
    return value


def _recording_compile(compile_fn):
    """Wrap a compile method so the outermost call on an object (the user's override) is noted on it."""

    @functools.wraps(compile_fn)
    def compile(self, *args, **kwargs):
        if self.__dict__.get("_jdl_compiling"):
            return compile_fn(self, *args, **kwargs)
        object.__setattr__(self, "_jdl_compiling", True)
        try:
            result = compile_fn(self, *args, **kwargs)
        finally:
            object.__setattr__(self, "_jdl_compiling", False)
        _note_call(self, "_jdl_compiled_with", args, kwargs)
        return result

    compile._jdl_records = True
    return compile


def _wrap_compiles(cls):
    """The user's own `compile` overrides in cls' hierarchy record their calls (once per class)."""
    for klass in cls.__mro__:
        function = klass.__dict__.get("compile")
        if function is not None and is_foreign(klass) and not getattr(function, "_jdl_records", False):
            if inspect.isfunction(function):
                klass.compile = _recording_compile(function)


def install():
    """Patch Keras once (idempotent): note constructor and compile arguments of foreign objects, and serialise
    them by record while `serialising()` is active."""
    operation_module = sys.modules.get("keras.src.ops.operation")
    if operation_module is None:
        return
    operation = operation_module.Operation
    if getattr(operation, "_jdl_patched", False):
        return
    from keras.src.layers.layer import Layer
    from keras.src.models.model import Model
    from keras.src.trainers.trainer import Trainer
    from keras.src.utils import python_utils

    original_new = operation.__new__

    def __new__(cls, *args, **kwargs):
        instance = original_new(cls, *args, **kwargs)
        if isinstance(instance, cls) and is_foreign(cls):
            _note_call(instance, "_jdl_made_with", args, kwargs)
            _wrap_compiles(cls)
        return instance

    operation.__new__ = __new__

    original_model_new = Model.__new__

    def model_new(cls, *args, **kwargs):
        # Keras' Model.__new__ calls Operation.__new__ without the arguments: note them here, where they are.
        instance = original_model_new(cls, *args, **kwargs)
        if isinstance(instance, cls) and is_foreign(cls):
            _note_call(instance, "_jdl_made_with", args, kwargs)
        return instance

    model_new._jdl_records_arguments = getattr(original_model_new, "_jdl_records_arguments", False)
    Model.__new__ = model_new

    Trainer.compile = _recording_compile(Trainer.compile)

    original_get_config = operation.get_config

    @python_utils.default
    def get_config(self):
        if (
            _names_by_id.get() is not None
            and "_jdl_made_with" in self.__dict__
            and (
                not _keras_rebuilds_it(self) or _built_without_shapes(self)
                if python_utils.is_default(self.get_config)
                else not _own_config_replays(self)
            )
        ):
            blob = cloudpickle.dumps(_record_of(self))
            return {"name": self.name, RECORD_KEY: base64.b64encode(blob).decode("ascii")}
        return original_get_config(self)

    operation.get_config = get_config

    for klass in (operation, Model):
        original_from_config = klass.__dict__["from_config"].__func__
        klass.from_config = classmethod(_from_config_replaying(original_from_config))

    _patch_serialization()
    _patch_losses_and_metrics()
    _patch_build_from_config(Model, built_without_shapes=True)
    _patch_build_from_config(Layer)  # Model has its own build_from_config
    original_compile_from_config = Trainer.compile_from_config

    def compile_from_config(self, config):
        if self.__dict__.get("_jdl_compile_replayed"):
            return None  # compiled already, with the arguments the user gave (see _rebuild)
        return original_compile_from_config(self, config)

    Trainer.compile_from_config = compile_from_config
    operation._jdl_patched = True


def _patch_serialization():
    """A layer or model the receiver has under a name (the notebook's adapted `vectorize`, its `encoder`), met
    while Keras serialises a Sequential or functional model, is marked with that name; on the receiving side the
    marked config deserialises to the receiver's own object, so `model.layers[0] is vectorize` as in one process."""
    from keras.src.ops.operation import Operation
    from keras.src.saving import serialization_lib

    original_serialize = serialization_lib.serialize_keras_object
    original_deserialize = serialization_lib.deserialize_keras_object

    def serialize_keras_object(obj):
        config = original_serialize(obj)
        names = _names_by_id.get()
        if names and id(obj) in names and isinstance(obj, Operation) and isinstance(config, dict):
            inner = config.get("config")
            if isinstance(inner, dict):
                _referenced.get().add(names[id(obj)])
                config = {**config, "config": {**inner, NAME_KEY: names[id(obj)]}}
        return config

    def deserialize_keras_object(config, custom_objects=None, safe_mode=True, **kwargs):
        resolve = _resolver.get()
        inner = config.get("config") if isinstance(config, dict) else None
        if resolve is not None and isinstance(inner, dict) and NAME_KEY in inner:
            own = resolve(inner[NAME_KEY])
            lent = _lent.get()
            return lent.lend(own) if lent is not None and isinstance(own, Operation) else own
        return original_deserialize(config, custom_objects=custom_objects, safe_mode=safe_mode, **kwargs)

    serialization_lib.serialize_keras_object = serialize_keras_object
    serialization_lib.deserialize_keras_object = deserialize_keras_object


def _patch_build_from_config(cls, built_without_shapes=False):
    """A model whose own build() only makes its sub-layers (the "making new layers" guide's `MLPBlock`), or a layer
    whose build() makes sub-layers without building them (keras.io's MAE `PatchEncoder`), is left by Keras' loader
    with sub-layers that have no weights yet, so the trained values have nowhere to go. While we deserialise, such a
    model or layer is also called once, symbolically, as fit would. `built_without_shapes`: a model built with
    `{'input_shape': None}` is not built from it here (see _built_without_shapes)."""
    original = cls.build_from_config

    def build_from_config(self, config):
        if built_without_shapes and _resolver.get() is not None and config == {"input_shape": None}:
            return  # built without shapes where it was sent: its record built its parts (_built_without_shapes)
        original(self, config)
        if _resolver.get() is not None:
            build_parts_by_a_call(self, config)

    cls.build_from_config = build_from_config


def build_parts_by_a_call(obj, config):
    """Call a foreign model or layer once, symbolically, on its build shape when its build left sub-layers
    unbuilt, so that they make their variables as the first call in fit did."""
    if (
        is_foreign(type(obj))
        and (config or {}).get("input_shape") is not None
        and not all(layer.built for layer in obj._flatten_layers(include_self=False))
    ):
        with contextlib.suppress(Exception):  # a call() that cannot run symbolically: as Keras left it
            obj._build_by_run_for_single_pos_arg(config["input_shape"])


def _patch_losses_and_metrics():
    """Losses and metrics are no Operations, and Keras rebuilds them with `cls(**get_config())`, which only has
    `name` and `reduction`/`dtype`: a notebook's `ScaledLoss(scale)` or `Threshold(0.5)` without its own get_config
    could not be rebuilt. They travel by their construction record too, and so do regularizers, constraints and
    initializers, whose base get_config raises or returns {} (PointNet's `OrthogonalRegularizer(num_features)`), and
    learning-rate schedules (the Transformer tutorial's `CustomSchedule(d_model)` in a notebook's optimizer)."""
    from keras.src.constraints.constraints import Constraint
    from keras.src.initializers.initializer import Initializer
    from keras.src.losses.loss import Loss
    from keras.src.metrics.metric import Metric
    from keras.src.optimizers.schedules.learning_rate_schedule import LearningRateSchedule
    from keras.src.regularizers.regularizers import Regularizer

    for base in (Loss, Metric, Regularizer, Constraint, Initializer, LearningRateSchedule):
        original_new = base.__new__

        def __new__(cls, *args, _original_new=original_new, **kwargs):
            instance = object.__new__(cls) if _original_new is object.__new__ else _original_new(cls, *args, **kwargs)
            if is_foreign(cls):
                _note_call(instance, "_jdl_made_with", args, kwargs)
            return instance

        base.__new__ = __new__
        base.get_config = _get_config_by_record(base.get_config)
        base.from_config = classmethod(_from_config_replaying(base.__dict__["from_config"].__func__))


def _get_config_by_record(original):
    @functools.wraps(original)
    def get_config(self):
        written_by_user = any(is_foreign(k) and "get_config" in k.__dict__ for k in type(self).__mro__)
        if _names_by_id.get() is not None and "_jdl_made_with" in self.__dict__ and not written_by_user:
            blob = cloudpickle.dumps(_record_of(self))
            named = {"name": self.name} if hasattr(self, "name") else {}  # regularizers have no name
            return {**named, RECORD_KEY: base64.b64encode(blob).decode("ascii")}
        return original(self)

    return get_config


def _keras_rebuilds_it(obj) -> bool:
    """Whether Keras' own automatic config rebuilds the object: plain constructor arguments, and a constructor
    that accepts the `name`/`trainable`/`dtype` Keras passes back (**kwargs), and Keras' own from_config. Then the
    file stays loadable by plain keras.saving.load_model, and a class's own from_config gets what it expects."""
    cls = type(obj)
    if getattr(obj, "_auto_config", None) is None:
        return False
    if any(is_foreign(k) and "from_config" in k.__dict__ for k in cls.__mro__):
        return True  # its own from_config reads Keras' automatic config
    spec = inspect.getfullargspec(cls.__init__)
    return spec.varkw is not None


def _built_without_shapes(obj) -> bool:
    """A model Keras built without noting its input shape: the `call` it read when the object was made was Model's
    own `call(*args, **kwargs)` (the time-series tutorial sets `FeedBack.call` on the class after making
    `feedback_model`). Keras' loader cannot build it again ("Undefined shapes are not supported"); its record can,
    part by part, as the parts were built here (Record.built_parts)."""
    try:
        return bool(getattr(obj, "built", False)) and obj.get_build_config() == {"input_shape": None}
    except Exception:  # a get_build_config of the user's own that fails: as Keras would save it
        return False


def _own_config_replays(obj) -> bool:
    """Whether a class's own get_config, built on Keras' (it called super().get_config(): we are in it), can be
    replayed by Keras' from_config: `cls(**config)` passes `name`, `trainable` and `dtype` back, which keras.io's
    ViT `Patches.__init__(self, patch_size)` does not take. Else the config carries the construction record too."""
    cls = type(obj)
    if any(is_foreign(k) and "from_config" in k.__dict__ for k in cls.__mro__):
        return True
    return inspect.getfullargspec(cls.__init__).varkw is not None


def _from_config_replaying(original):
    def from_config(cls, config, *args, **kwargs):
        # Only inside our own deserialisation: a record is a pickle, and a .keras file from elsewhere loaded with
        # Keras' load_model must not get to run one.
        if isinstance(config, dict) and RECORD_KEY in config and _resolver.get() is not None:
            return _rebuild(cls, config)
        return original(cls, config, *args, **kwargs)

    return from_config


# --------------------------------------------------------------------------------------------- helpers


def is_keras_saveable(value) -> bool:
    return any(c.__name__ == "KerasSaveable" and c.__module__.startswith("keras") for c in type(value).__mro__)


def first_line(exc, limit=200) -> str:
    """An exception's first line, cut to `limit` characters: for one-line messages (shared by the wire modules)."""
    return (str(exc).strip().splitlines() or [""])[0][:limit]


def recorded_parts(obj):
    """Every argument value in the object's construction and compile records (for finding the classes and
    functions that must travel with it)."""
    for attribute in ("_jdl_made_with", "_jdl_compiled_with"):
        call = getattr(obj, "__dict__", {}).get(attribute)
        if call is not None:
            yield from _flatten(list(call.args) + list(call.kwargs.values()))


def _flatten(values):
    for value in values:
        if type(value) in (list, tuple):
            yield from _flatten(value)
        elif type(value) is dict:
            yield from _flatten(list(value.values()))
        else:
            yield value
