"""Split a rank's share of `fit` inputs. Every rank must get the same number of batches: a rank with one more batch
would wait forever in that batch's allreduce, so shards are cut to equal length (at most size-1 samples dropped)."""


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


def _take(obj, rank, size, per_rank):
    """Strided shard, so each rank sees every class of an ordered dataset."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return {k: _take(v, rank, size, per_rank) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_take(v, rank, size, per_rank) for v in obj)
    return obj[rank: rank + per_rank * size: size]


def shard_arrays(arrays, rank, size):
    """Shard a tuple of aligned array structures (x, y, sample_weight) by rank to equal lengths."""
    present = [a for a in arrays if a is not None]
    if not present:
        return arrays
    per_rank = _length(present[0]) // size
    if per_rank == 0:
        raise ValueError(f"{_length(present[0])} samples cannot be split across {size} ranks; "
                         f"use fewer ranks (-n) or more data")
    return tuple(_take(a, rank, size, per_rank) for a in arrays)


def shard_dataset(ds, rank, size):
    import tensorflow as tf

    cardinality = int(ds.cardinality())
    shard = ds.shard(size, rank)
    if cardinality >= 0:
        return shard.take(cardinality // size)
    if cardinality == tf.data.INFINITE_CARDINALITY:
        return shard  # fit needs steps_per_epoch then, which is per rank and equal
    raise ValueError("a tf.data dataset of unknown length cannot be split into equal shards; "
                     "add .repeat() and pass steps_per_epoch, or use .apply(tf.data.experimental.assert_cardinality(n))")


def _is_array_like(obj):
    if isinstance(obj, dict):
        return bool(obj) and all(_is_array_like(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return bool(obj) and all(_is_array_like(v) for v in obj)
    return hasattr(obj, "shape") and hasattr(obj, "__getitem__")


def shard_fit_inputs(x, y, kwargs, rank, size):
    """Shard what `fit` would read. Generators and PyDatasets are left alone: their code decides what a rank reads."""
    if _is_dataset(x):
        x = shard_dataset(x, rank, size)
    elif _is_array_like(x):
        x, y, sample_weight = shard_arrays((x, y, kwargs.get("sample_weight")), rank, size)
        if sample_weight is not None:
            kwargs["sample_weight"] = sample_weight
    val = kwargs.get("validation_data")
    if _is_dataset(val):
        kwargs["validation_data"] = shard_dataset(val, rank, size)
    elif isinstance(val, tuple) and val and _is_array_like(val[0]):
        kwargs["validation_data"] = shard_arrays(val, rank, size)
    return x, y, kwargs
