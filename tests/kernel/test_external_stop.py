"""A notebook's cluster stopped from outside the kernel (the jobs panel's Stop, which uses ipyparallel's own stop on
the cluster file) does not strand the notebook: the next job says so and starts a new cluster. Real engines."""

import ipyparallel as ipp

import jupyter_dl


def _one():
    return 1


def test_the_next_job_starts_a_new_cluster_after_an_outside_stop(dl_session, capsys):
    assert jupyter_dl.distribute(_one, n=2) == 1
    old_file = dl_session.cluster.cluster.cluster_file
    ipp.Cluster.from_file(old_file).stop_cluster_sync()  # what DELETE /jupyter-dl/api/cluster/<id> does
    assert jupyter_dl.distribute(_one, n=2) == 1
    assert "cluster was stopped outside it (jobs panel); starting a new one" in capsys.readouterr().out
    assert dl_session.cluster.cluster.cluster_file != old_file
