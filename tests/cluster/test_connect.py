"""Connecting to a cluster someone else started (as `ipcluster start` or a Slurm launcher would) and using it
unchanged; stopping only disconnects."""

import uuid

import ipyparallel as ipp
import pytest

from jupyter_dl.errors import UsageError
from jupyter_dl.kernel.api import Session
from jupyter_dl.kernel.job.work import FunctionWork
from jupyter_dl.wire.options import RunOptions


def _rank_and_size():
    import horovod.tensorflow as hvd

    return hvd.rank(), hvd.size()


@pytest.fixture(scope="module")
def external_cluster(tmp_path_factory):
    profile_dir = tmp_path_factory.mktemp("ipython") / "profile_jdltest"
    cluster = ipp.Cluster(n=2, profile_dir=str(profile_dir), cluster_id=f"ext-{uuid.uuid4().hex[:6]}", log_level=40)
    cluster.start_cluster_sync()
    client = cluster.connect_client_sync()
    client.wait_for_engines(2, timeout=120, interactive=False)
    client.close()
    yield cluster
    cluster.stop_cluster_sync()


def test_connect_by_cluster_file_runs_jobs_and_stop_only_disconnects(external_cluster):
    session = Session()
    with pytest.raises(UsageError, match="no cluster found"):
        session.cluster.connect(profile="no-such-profile-jdl", cluster_id="nope")
    status = session.cluster.connect_file(external_cluster.cluster_file)
    assert status.engines == 2 and status.owned is False
    result = session.runner.run(FunctionWork(_rank_and_size, all_ranks=True), RunOptions(n=2))
    assert result.results == [(0, 2), (1, 2)]
    with pytest.raises(UsageError, match="connected cluster has 2 engines"):
        session.runner.run(FunctionWork(_rank_and_size), RunOptions(n=3))
    session.cluster.stop()
    # Still running for its owner:
    client = external_cluster.connect_client_sync()
    assert len(client.ids) == 2
    client.close()
