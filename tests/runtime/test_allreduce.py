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
