"""The wire format for values crossing between kernel and engines, shared by both sides.

Values are cloudpickled one name at a time so one bad value names itself instead of failing the whole transfer.
Keras models and layers travel through Keras 3's own pickling (a .keras archive in memory) with the cell's classes
and functions they need (keras_objects). A History is sent without its model (which would be pickled twice) and
re-attached on arrival.
"""
import hashlib
from dataclasses import dataclass, field

import cloudpickle

from . import keras_objects


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


def _is_history(value) -> bool:
    cls = type(value)
    return cls.__name__ == "History" and cls.__module__.startswith("keras")


def dumps(name, value, namespace=None) -> bytes:
    """Serialise one value; raises with the reason when it cannot be sent."""
    if _is_history(value):
        model_name = None
        model = getattr(value, "model", None)
        if model is not None and namespace:
            model_name = next((k for k, v in namespace.items() if v is model), None)
        value = HistoryPayload(dict(value.history), dict(value.params or {}), list(value.epoch), model_name)
    elif keras_objects.is_keras_saveable(value):
        value = keras_objects.dumps(value, namespace)
    return cloudpickle.dumps(value)


def loads(blob: bytes, receivers_own: dict | None = None):
    """The inverse of dumps. `receivers_own`: the receiving namespace's classes and functions, preferred to the
    copies that travelled with a Keras object when they are not being replaced."""
    value = cloudpickle.loads(blob)
    if isinstance(value, keras_objects.KerasPayload):
        value = keras_objects.loads(value, receivers_own)
    return value


def pack(names, namespace) -> dict:
    """{name: bytes | Unsendable} for the names present in namespace."""
    out = {}
    for name in names:
        if name not in namespace:
            continue
        try:
            out[name] = dumps(name, namespace[name], namespace)
        except Exception as exc:  # any pickling failure: report it, keep the others
            out[name] = Unsendable(name, f"{type(exc).__name__}: {exc}")
    return out


def unpack(packed: dict, namespace: dict | None = None) -> tuple[dict, dict]:
    """Return (values, problems). Keras objects are rebuilt last, with the classes that came back in scope ahead of
    the namespace's own; Histories get their model back when it travelled too."""
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
        else:
            values[name] = value
    receivers_own = {k: v for k, v in (namespace or {}).items() if k not in packed}
    receivers_own.update(values)
    for name, keras_payload in blobs.items():
        try:
            values[name] = keras_objects.loads(keras_payload, receivers_own)
        except Exception as exc:
            problems[name] = f"{type(exc).__name__}: {_first_line(exc)}"
    for name, value in list(values.items()):
        if isinstance(value, HistoryPayload):
            values[name] = _rebuild_history(value, values.get(value.model_name))
    return values, problems


def _first_line(exc) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


def _rebuild_history(payload: HistoryPayload, model):
    import keras

    history = keras.callbacks.History()
    history.history = payload.history
    history.params = payload.params
    history.epoch = payload.epoch
    if model is not None:
        history.set_model(model)
    return history
