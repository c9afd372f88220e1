"""A cold start says how far the engines are: ensure(progress=...) hears "k/n engines registered" while a real
local cluster starts, counting up, first while the engines' fork server imports TensorFlow, and the job's view
gets the same lines through JobRun.tell."""

from jupyter_dl.cluster.engines import EngineCluster


def test_engine_count_is_reported_while_a_cluster_starts():
    heard = []
    cluster = EngineCluster()
    try:
        cluster.ensure(2, progress=heard.append)
        assert len(cluster.engine_ids()) >= 2
        told = len(heard)
        cluster.ensure(2)  # a later call without progress: the first call's listener hears nothing more
    finally:
        cluster.stop()
    counts = [int(text.split("/")[0].rsplit(" ", 1)[-1]) for text in heard]
    importing = " (importing TensorFlow for them)"
    assert heard[0] == "starting the cluster: 0/2 engines registered" + importing, heard  # a fresh server imports
    assert all(text.removesuffix(importing).endswith("/2 engines registered") for text in heard), heard
    assert counts == sorted(counts) and counts[0] < 2, heard  # counting up, from before all had registered
    assert len(heard) == told
