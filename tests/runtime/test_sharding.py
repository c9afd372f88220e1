"""Every rank must get the same number of batches, or the last allreduce waits forever."""

import numpy as np
import pytest

from jupyter_dl.runtime.sharding import shard_arrays, shard_dataset, shard_fit_inputs

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


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


def test_validation_arrays_are_split_whole_and_weighed_by_share():
    """Validation has no per-batch collective: every sample is validated once, and the shares weigh the average."""
    x, y = np.arange(20).reshape(10, 2), np.arange(10)
    val = (np.arange(7), np.arange(7) * 2)
    got, shares = [], []
    for rank in range(3):
        share = {}
        _, _, kwargs = shard_fit_inputs(x, y, {"validation_data": val}, rank, 3, share)
        got.extend(kwargs["validation_data"][0].tolist())
        shares.append(share["validation"])
    assert sorted(got) == list(range(7))
    assert shares == pytest.approx([3 * 3 / 7, 3 * 2 / 7, 3 * 2 / 7]) and sum(shares) == pytest.approx(3)


def test_validation_split_takes_the_samples_one_process_would():
    """Keras validates on the last fraction of the arrays; split before sharding, so the ranks validate on those."""
    x, y = np.arange(40).reshape(20, 2), np.arange(20)
    seen_train, seen_val = [], []
    for rank in range(2):
        xs, ys, kwargs = shard_fit_inputs(x, y, {"validation_split": 0.25}, rank, 2, {})
        assert "validation_split" not in kwargs
        seen_train.extend(ys.tolist())
        seen_val.extend(kwargs["validation_data"][1].tolist())
    assert sorted(seen_val) == list(range(15, 20))
    assert sorted(seen_train) == list(range(14))  # 15 training samples: equal shards of 7, one dropped
