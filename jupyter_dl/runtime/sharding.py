"""Split a rank's share of `fit` inputs. Every rank must get the same number of training batches: a rank with one more
batch would wait forever in that batch's allreduce, so training shards are cut to equal length (at most size-1
samples dropped). Validation has no collective per batch, so validation arrays and datasets are split whole, and
each rank's share weighs its validation metrics when the epoch's metrics are averaged across ranks."""


def _is_dataset(obj):
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover - engines always have TF in this mode
        return False
    return isinstance(obj, tf.data.Dataset)


def _length(obj):
    if isinstance(obj, dict):
        return _length(next(iter(obj.values())))
    if isinstance(obj, (list, tuple)):
        return _length(obj[0])
    return len(obj) if hasattr(obj, "__len__") else int(obj.shape[0])


def _sliced(obj, part: slice):
    """`obj[part]` for an array, or for each array of a dict/list/tuple structure (None stays None)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return {k: _sliced(v, part) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_sliced(v, part) for v in obj)
    return obj[part]


def _take(obj, rank, size, per_rank):
    """Strided shard, so each rank sees every class of an ordered dataset."""
    return _sliced(obj, slice(rank, rank + per_rank * size, size))


def shard_arrays(arrays, rank, size, even=True):
    """Shard a tuple of aligned array structures (x, y, sample_weight) by rank: to equal lengths, or with
    even=False to shares that together hold every sample (the first len % size ranks get one more)."""
    present = [a for a in arrays if a is not None]
    if not present:
        return arrays
    total = _length(present[0])
    per_rank = total // size
    if per_rank == 0:
        raise ValueError(f"{total} samples cannot be split across {size} ranks; use fewer ranks (-n) or more data")
    if not even:
        per_rank = len(range(rank, total, size))
    return tuple(_take(a, rank, size, per_rank) for a in arrays)


def _share(rank, size, total):
    """This rank's share of `total` strided items, as a weight for averaging over ranks (the weights sum to size)."""
    return size * len(range(rank, total, size)) / total


def shard_dataset(ds, rank, size, steps_given=False):
    import tensorflow as tf

    cardinality = int(ds.cardinality())
    shard = ds.shard(size, rank)
    if cardinality >= 0:
        return shard.take(cardinality // size)
    if cardinality == tf.data.INFINITE_CARDINALITY or steps_given:
        return shard  # fit reads steps_per_epoch batches then, which is per rank and equal
    # Unknown length (lines of a text file, TFRecords, a filter): count it once, so that every rank takes the same
    # number of batches; one process would just read to the end, but a rank that ends early leaves the others
    # waiting in their next allreduce. The smallest count over the ranks, should a random filter make them differ.
    cardinality = _agreed_count(count_elements(ds))
    if rank == 0:
        print(
            f"[jupyter-dl] counted the dataset's {cardinality} elements once to split it equally; "
            f"add .apply(tf.data.experimental.assert_cardinality({cardinality})) to skip the count",
            flush=True,
        )
    return shard.take(cardinality // size)


def _caches(ds) -> bool:
    """Whether the pipeline holds a `.cache()` step."""
    from jupyter_dl.wire.datasets import pipeline_graph

    return any(node.op.startswith("CacheDataset") for node in pipeline_graph(ds).node)


def _cached_share(ds, rank, size):
    """(this rank's share of a cached pipeline, its global steps per epoch): the same strided share as
    shard_dataset's, but each epoch reads the input to its end, because `.cache()` keeps only what an iterator read
    to its end. A rank that stopped short (take) would re-read its input every epoch and, with a reshuffling source
    before the cache, see a new order while another rank replays the cached one: their shares would overlap. The
    share repeats and fit takes steps_per_epoch of it, so an epoch's end is where the next epoch's reading finishes
    the previous pass."""
    per_rank = int(ds.cardinality()) // size
    kept = per_rank * size
    share = ds.enumerate().filter(lambda i, _: (i % size == rank) & (i < kept)).map(lambda _, element: element)
    return share.repeat(), kept


def _agreed_count(count: int) -> int:
    from jupyter_dl.runtime.job_backend import backend

    return int(backend().allreduce([count], op="min", name="jdl.dataset_count")[0])


def count_elements(ds) -> int:
    """The number of elements of a finite dataset, by reading it once (in TensorFlow's graph, not in Python)."""
    import numpy as np

    return int(ds.reduce(np.int64(0), lambda count, _: count + 1))


def _is_array_like(obj):
    if isinstance(obj, dict):
        return bool(obj) and all(_is_array_like(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return bool(obj) and all(_is_array_like(v) for v in obj)
    return hasattr(obj, "shape") and hasattr(obj, "__getitem__")


def _is_py_dataset(obj):
    try:
        import keras
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, keras.utils.PyDataset)


def _is_generator(obj):
    import inspect

    return inspect.isgenerator(obj) or (
        hasattr(obj, "__next__") and hasattr(obj, "__iter__") and not _is_dataset(obj) and not _is_array_like(obj)
    )


def shard_py_dataset(data, rank, size):
    """Every size-th batch of a keras.utils.PyDataset, starting at this rank's, to equal numbers of batches."""
    import keras

    batches = data.num_batches if getattr(data, "num_batches", None) is not None else len(data)
    if batches is None:  # an infinite PyDataset: every rank reads its own stride for as long as fit asks
        batches = 0
    elif batches // size == 0:
        raise ValueError(
            f"a PyDataset of {batches} batches cannot be split across {size} ranks; "
            f"use fewer ranks (-n) or smaller batches"
        )

    class RankShard(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(
                workers=data.workers, use_multiprocessing=data.use_multiprocessing, max_queue_size=data.max_queue_size
            )

        @property
        def num_batches(self):
            return batches // size if batches else None

        def __getitem__(self, index):
            return data[index * size + rank]

        def on_epoch_begin(self):
            data.on_epoch_begin()

        def on_epoch_end(self):
            data.on_epoch_end()

    return RankShard()


def shard_generator(gen, rank, size):
    """Every size-th item of a generator, starting at this rank's. Each rank runs the cell's generator itself, so
    it must yield the same sequence on every rank (seeded shuffles)."""

    def rank_share():  # Keras accepts generators, not other iterators
        group = []
        for item in gen:
            group.append(item)
            if len(group) == size:  # a short last group is dropped: every rank gets as many batches
                yield group[rank]
                group = []

    return rank_share()


def per_rank_steps(steps, size):
    """The cell's steps per epoch count global batches; each rank takes its share of them (at least one)."""
    return None if steps is None else max(1, int(steps) // size)


def array_samples(x) -> int | None:
    """How many samples arrays (or a dict, list or tuple of them) hold; None for any other input."""
    return _length(x) if _is_array_like(x) else None


def shard_fit_inputs(x, y, kwargs, rank, size, shares=None):
    """Shard what `fit` would read: arrays, frames and dicts of them, tf.data datasets, PyDatasets, generators.
    `shares`, when given, gets "validation": this rank's weight in the average of the validation metrics."""
    kwargs = dict(kwargs)  # the caller's stay whole: an elastic fit orders all samples (sample weights too) from them
    x, y, kwargs = split_off_validation(x, y, kwargs)
    if _is_dataset(x) and kwargs.get("steps_per_epoch") is None and x.cardinality() >= size and _caches(x):
        x, kwargs["steps_per_epoch"] = _cached_share(x, rank, size)  # global steps: made per rank below
    elif _is_dataset(x):
        x = shard_dataset(x, rank, size, steps_given=kwargs.get("steps_per_epoch") is not None)
    elif _is_py_dataset(x):
        x = shard_py_dataset(x, rank, size)
    elif _is_array_like(x):
        x, y, sample_weight = shard_arrays((x, y, kwargs.get("sample_weight")), rank, size)
        if sample_weight is not None:
            kwargs["sample_weight"] = sample_weight
    elif _is_generator(x):
        x = shard_generator(x, rank, size)
    if kwargs.get("steps_per_epoch"):  # for arrays too: Keras would otherwise grow each rank's batch to fit
        kwargs["steps_per_epoch"] = per_rank_steps(kwargs["steps_per_epoch"], size)
    val = kwargs.get("validation_data")
    share = 1.0
    if _is_dataset(val):
        kwargs["validation_data"], share = _shard_validation_dataset(
            val, rank, size, steps_given=kwargs.get("validation_steps") is not None
        )
    elif _is_py_dataset(val):
        kwargs["validation_data"] = shard_py_dataset(val, rank, size)
    elif isinstance(val, (tuple, list)) and val and _is_array_like(val[0]):
        kwargs["validation_data"] = shard_arrays(tuple(val), rank, size, even=False)
        share = _share(rank, size, _length(val[0]))
    elif val is not None and _is_generator(val):
        kwargs["validation_data"] = shard_generator(val, rank, size)
    if shares is not None:
        shares["validation"] = share
    if val is not None and kwargs.get("validation_steps"):
        kwargs["validation_steps"] = per_rank_steps(kwargs["validation_steps"], size)
    return x, y, kwargs


def split_off_validation(x, y, kwargs):
    """validation_split on arrays, done before sharding as Keras does it (the last fraction of the samples), so
    the ranks validate on the samples one process would."""
    split = kwargs.get("validation_split") or 0.0
    if not split or kwargs.get("validation_data") is not None or not _is_array_like(x):
        return x, y, kwargs
    import math

    at = int(math.floor(_length(x) * (1.0 - split)))
    weights = kwargs.get("sample_weight")
    head = [_sliced(a, slice(0, at)) for a in (x, y, weights)]
    tail = [_sliced(a, slice(at, None)) for a in (x, y, weights)]
    kwargs = {k: v for k, v in kwargs.items() if k != "validation_split"}
    kwargs["validation_data"] = tuple(a for a in tail if a is not None) if weights is None else tuple(tail)
    if weights is not None:
        kwargs["sample_weight"] = head[2]
    return head[0], head[1], kwargs


def _shard_validation_dataset(ds, rank, size, steps_given=False):
    """This rank's part of a validation dataset and its share. Fewer elements than ranks: every rank validates on all
    of it (a rank with none would have no val_* metrics to average). Otherwise every size-th element to the end,
    weighed by the samples it holds (a batch's first dimension, as Keras weighs its loss): evaluating needs no equal
    step counts, so the metrics cover every sample once, as one process's do (equal numbers of batches left out a
    20-image set's last batch of 4 on 2 ranks). With validation_steps or an endless dataset: equal shares, weight 1."""
    import tensorflow as tf

    cardinality = int(ds.cardinality())
    if 0 <= cardinality < size:
        return ds, 1.0
    if steps_given or cardinality == tf.data.INFINITE_CARDINALITY:
        return shard_dataset(ds, rank, size, steps_given), 1.0
    first = tf.nest.flatten(ds.element_spec)[0]
    batched = getattr(first, "shape", None) is not None and first.shape.rank and first.shape[0] is None
    if cardinality >= 0 and not batched:
        return ds.shard(size, rank), _share(rank, size, cardinality)
    shard = ds.shard(size, rank)
    mine = count_samples(shard) if batched else count_elements(shard)
    from jupyter_dl.runtime.job_backend import backend

    total, empty = backend().allreduce([mine, int(mine == 0)], op="sum", name="jdl.validation_count")
    if empty:  # fewer batches than ranks
        return ds, 1.0
    return shard, size * mine / int(total)


def count_samples(ds) -> int:
    """The samples in a finite batched dataset: its batches' first dimensions, summed in TensorFlow's graph."""
    import numpy as np
    import tensorflow as tf

    return int(
        ds.reduce(np.int64(0), lambda count, element: count + tf.shape(tf.nest.flatten(element)[0], tf.int64)[0])
    )
