"""A notebook's dataset iterator on the wire: `iterator = iter(dataset)` in a plain cell, read with `next(iterator)`
by a training loop (TensorFlow's "Training checkpoints" guide, which also checkpoints it).

An iterator cannot be pickled. It travels as its pipeline (datasets.py: the graph, and the arrays it was built from)
and its position, which TensorFlow serialises itself (the state a checkpoint of the iterator holds, buffers of a
shuffle included); the receiver makes a new iterator over the rebuilt pipeline and moves it there. So the ranks go
on where the notebook's iterator stood, and the notebook's iterator then stands where rank 0's did, as after one
process. A loop outside `fit` reads every batch on every rank (the cell is told so), so rank 0's position is the one
process's.
"""

from dataclasses import dataclass, field

from jupyter_dl.wire import datasets


@dataclass
class IteratorPayload:
    pipeline: datasets.DatasetPayload
    position: bytes  # the iterator's serialised state
    arrays: dict = field(default_factory=dict)  # the arrays the pipeline was built from


def is_iterator(value) -> bool:
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, tf.data.Iterator) and hasattr(value, "_dataset")


def dumps(iterator) -> IteratorPayload:
    pipeline, arrays = datasets.dumps(iterator._dataset)
    return IteratorPayload(pipeline, position(iterator), arrays)


def loads(payload: IteratorPayload, resolve):
    arrays = payload.arrays
    dataset = datasets.loads(payload.pipeline, lambda name: arrays[name] if name in arrays else resolve(name))
    iterator = iter(dataset)
    move_to(iterator, payload.position)
    return iterator


def position(iterator) -> bytes:
    import tensorflow as tf

    return tf.io.serialize_tensor(iterator._save()).numpy()


def move_to(iterator, state: bytes) -> None:
    import tensorflow as tf

    iterator._restore(tf.io.parse_tensor(state, tf.string))
