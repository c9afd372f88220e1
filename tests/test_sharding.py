"""Every rank must get the same number of batches, or the last allreduce waits forever."""

import numpy as np
import pytest

from jupyter_dl.runtime.sharding import shard_arrays, shard_dataset, shard_fit_inputs


def test_arrays_split_to_equal_lengths_and_cover_disjoint_samples():
    x = np.arange(11)
    shards = [shard_arrays((x, x * 10, None), r, 3) for r in range(3)]
    assert [len(s[0]) for s in shards] == [3, 3, 3]
    seen = np.concatenate([s[0] for s in shards])
    assert len(set(seen.tolist())) == 9
    for xs, ys, sw in shards:
        np.testing.assert_array_equal(ys, xs * 10)
        assert sw is None


def test_dicts_and_validation_data_are_sharded_alike():
    x = {"a": np.arange(8), "b": np.arange(8) + 100}
    y = np.arange(8)
    val = (np.arange(4), np.arange(4))
    x1, y1, kwargs = shard_fit_inputs(x, y, {"validation_data": val}, 1, 2)
    np.testing.assert_array_equal(x1["a"], [1, 3, 5, 7])
    np.testing.assert_array_equal(x1["b"], [101, 103, 105, 107])
    np.testing.assert_array_equal(y1, [1, 3, 5, 7])
    np.testing.assert_array_equal(kwargs["validation_data"][0], [1, 3])


def test_too_few_samples_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot be split across 4 ranks"):
        shard_arrays((np.arange(3), None, None), 0, 4)


def test_batched_dataset_shards_have_equal_batch_counts():
    import tensorflow as tf

    ds = tf.data.Dataset.range(50).batch(8)  # 7 batches: 4 + 3 by plain sharding would hang the last step
    counts = [sum(1 for _ in shard_dataset(ds, r, 2)) for r in range(2)]
    assert counts == [3, 3]
