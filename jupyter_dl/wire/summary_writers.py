"""TensorFlow summary writers on the wire: `tf.summary.create_file_writer(log_dir)` made in a plain cell, written to
by a custom training loop (TensorFlow's TensorBoard tutorial, "Using TensorBoard with other methods").

A writer holds a TensorFlow resource and cannot be pickled; what it writes is decided by how it was made, which
TensorFlow does not keep on the object. So while jupyter-dl is loaded, each file writer notes its settings when made,
and travels as them: the receiver makes its own writer into the same folder. Only rank 0's summaries are written
(the ranks' models are equal; N event files of the same run would show N curves): runtime/keras_hooks.py records
none on the other ranks.
"""

import os
from dataclasses import dataclass

MODULE = "tensorflow.python.ops.summary_ops_v2"
_SETTINGS = "_jdl_settings"


@dataclass
class WriterPayload:
    settings: dict  # create_file_writer's arguments: logdir, max_queue, flush_millis, filename_suffix


def record_settings_when_tensorflow_loads() -> None:
    from jupyter_dl.wire.after_import import after_import

    after_import(MODULE, _record_settings)


def _record_settings(module) -> None:
    writer_class = module._ResourceSummaryWriter
    if getattr(writer_class.__init__, "_jdl_records", False):
        return
    original = writer_class.__init__

    def __init__(self, create_fn, init_op_fn, *args, **kwargs):
        original(self, create_fn, init_op_fn, *args, **kwargs)
        settings = getattr(init_op_fn, "keywords", None)  # functools.partial(create_summary_file_writer, logdir=...)
        if isinstance(settings, dict) and "logdir" in settings:
            settings = {k: _plain(v) for k, v in settings.items()}
            # The writer opened its file here; the receiver makes its writer before it moves to the notebook's
            # working directory, so a relative folder is made absolute (not a gs:// or other URL).
            if isinstance(settings["logdir"], str) and "://" not in settings["logdir"]:
                settings["logdir"] = os.path.abspath(settings["logdir"])
            object.__setattr__(self, _SETTINGS, settings)

    __init__._jdl_records = True  # type: ignore[attr-defined]
    writer_class.__init__ = __init__


def _plain(value):
    return (
        value.numpy().decode()
        if hasattr(value, "numpy") and isinstance(value.numpy(), bytes)
        else (value.numpy().item() if hasattr(value, "numpy") else value)
    )


def is_writer(value) -> bool:
    import sys

    module = sys.modules.get(MODULE)
    return module is not None and isinstance(value, module.SummaryWriter)


def dumps(writer) -> WriterPayload:
    settings = getattr(writer, _SETTINGS, None)
    if settings is None:
        raise TypeError(
            "a summary writer made before `%load_ext jupyter_dl` (or not a file writer) cannot be made again on the "
            "ranks; run the cell that makes it again"
        )
    return WriterPayload(dict(settings))


def loads(payload: WriterPayload, resolve=None):
    import tensorflow as tf

    return tf.summary.create_file_writer(**payload.settings)


def flush(values) -> None:
    """Flush the writers among `values`: the notebook may read the events as soon as the cell returns."""
    for value in values:
        if is_writer(value):
            value.flush()
