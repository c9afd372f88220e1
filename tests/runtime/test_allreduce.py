"""Real Horovod collectives over gloo on 2 real ipyparallel engines."""

import jupyter_dl


def _ranks_allreduce():
    import horovod.tensorflow as hvd

    from jupyter_dl.backends import horovod as backend

    r = hvd.rank()
    return {
        "rank": r,
        "size": hvd.size(),
        "sum": backend.allreduce([r + 1.0, 10.0 * r], op="sum").tolist(),
        "avg": backend.allreduce([float(r)], op="average").tolist(),
        "max": backend.allreduce([float(r)], op="max").tolist(),
    }


def test_allreduce_on_two_ranks(dl_session):
    results = jupyter_dl.distribute(_ranks_allreduce, n=2, all_ranks=True)
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["size"] == 2
        assert r["sum"] == [3.0, 10.0]
        assert r["avg"] == [0.5]
        assert r["max"] == [1.0]


def test_default_returns_rank0_only(dl_session):
    assert jupyter_dl.distribute(_ranks_allreduce, n=2)["rank"] == 0


def test_single_rank_job(dl_session):
    result = jupyter_dl.distribute(_ranks_allreduce, n=1)
    assert result["size"] == 1 and result["sum"] == [1.0, 0.0]


def _broadcast_mixed_variables(pack_bytes):
    import horovod.tensorflow as hvd
    import keras
    import numpy as np

    from jupyter_dl.backends import horovod as backend

    backend.PACK_BYTES = pack_bytes
    r = hvd.rank()
    shapes = [(3, 4), (4,), (), (2, 2, 2), (5,)]
    variables = [keras.Variable(np.full(shape, 10.0 * r + i, "float32")) for i, shape in enumerate(shapes)]
    variables.insert(2, keras.Variable(np.int64(7 + r), dtype="int64"))  # an optimizer's step count
    backend.broadcast_from_root(variables)
    return [np.asarray(v.numpy()).tolist() for v in variables]


def test_a_broadcast_of_variables_of_mixed_dtypes_and_shapes_gives_every_rank_rank_0_s_values(dl_session):
    # Small packs (40 bytes: several packs per dtype) and the default (one pack per dtype) must agree.
    for pack_bytes in (40, 64 << 20):
        ranks = jupyter_dl.distribute(_broadcast_mixed_variables, n=2, args=(pack_bytes,), all_ranks=True)
        assert ranks[0] == ranks[1], pack_bytes
        assert ranks[0][0] == [[0.0] * 4] * 3 and ranks[0][2] == 7 and ranks[0][3] == 2.0, ranks[0]
        assert ranks[0][-1] == [4.0] * 5
