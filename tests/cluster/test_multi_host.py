"""Ranks on several hosts, for real: two "hosts" made of Linux network namespaces with their own hostnames, joined
by veth pairs on a private bridge, with interface names that are not eth0 (and differ between the hosts). The kernel
(this process) stays in the root namespace; an ipyparallel controller listens on the bridge; two engines run in
each namespace. Everything the test creates is removed afterwards, also on failure."""

import os
import re
import time

import netns
import numpy as np
import pytest
from netns import HOSTS


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """A controller on the bridge and 2 engines in each namespace; yields the client connection file."""
    with (
        netns.hosts(),
        open(tmp_path_factory.mktemp("engines") / "engines.log", "w") as logs,
        netns.EnginesOnHosts(logs) as engines,
    ):
        _RUNNING["engines"] = engines
        try:
            yield engines.cluster_file
        finally:
            _RUNNING.clear()


_RUNNING: dict = {}  # what two_hosts started (netns.EnginesOnHosts), for _restore_host


def _restore_host(index):
    """After a cut: host `index` back, with two fresh engines, so the next test finds 4 engines that answer."""
    _RUNNING["engines"].restore(index)


@pytest.fixture
def session(two_hosts):
    from jupyter_dl.kernel.api import Session

    session = Session()
    session.cluster.connect_file(two_hosts)
    yield session
    session.cluster.stop()  # a connected cluster is only disconnected


def _ordinary_fit(x_train, y_train):
    """An ordinary Keras cell's training: (final weights, last epoch's accuracy)."""
    import keras

    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10, activation="softmax")]
    )  # no seed: ranks start apart
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x_train, y_train, epochs=6, batch_size=32, verbose=0)
    return model.get_weights(), history.history["accuracy"][-1]


def _train_and_report(x_train, y_train, **_):
    """An ordinary Keras cell, plus where Horovod placed this rank."""
    import socket

    import horovod.tensorflow as hvd

    weights, accuracy = _ordinary_fit(x_train, y_train)
    return {
        "host": socket.gethostname(),
        "rank": hvd.rank(),
        "local_rank": hvd.local_rank(),
        "cross_rank": hvd.cross_rank(),
        "local_size": hvd.local_size(),
        "weights": weights,
        "gloo_iface": os.environ.get("HOROVOD_GLOO_IFACE"),
        "accuracy": accuracy,
    }


def test_four_ranks_on_two_hosts_train_as_one(session, digits, capsys):
    import jupyter_dl  # noqa: F401  (the session above is the one the job runner uses)
    from jupyter_dl.kernel.job.work import FunctionWork
    from jupyter_dl.kernel.magics import format_status
    from jupyter_dl.wire.options import RunOptions

    status = session.cluster.status()
    assert status.hosts == ["jdl-host-a", "jdl-host-b"] and status.engines == 4
    assert [len(ids) for ids in status.engines_by_host.values()] == [2, 2]
    line = format_status(status)  # what %dl_cluster status prints: engines grouped by host
    for host, ids in status.engines_by_host.items():
        assert f"{host} (engines {ids[0]}, {ids[1]})" in line
    result = session.runner.run(
        FunctionWork(_train_and_report, kwargs=digits, all_ranks=True), RunOptions(n=4, timeout=600)
    )
    ranks = result.results
    # Horovod's host assignment follows the engines' real hosts: each host's ranks consecutive, local ranks 0 and 1
    # on each, cross rank the host's position.
    first, second = ranks[0]["host"], ranks[2]["host"]
    assert {first, second} == {"jdl-host-a", "jdl-host-b"}
    assert [(r["host"], r["rank"], r["local_rank"], r["cross_rank"]) for r in ranks] == [
        (first, 0, 0, 0),
        (first, 1, 1, 0),
        (second, 2, 0, 1),
        (second, 3, 1, 1),
    ]
    assert all(r["local_size"] == 2 for r in ranks)
    # gloo ran over each host's own interface, found by the route to the kernel (no host has an eth0).
    interface = {hostname: name for _, hostname, name, _ in HOSTS}
    assert [r["gloo_iface"] for r in ranks] == [interface[r["host"]] for r in ranks]
    for other in ranks[1:]:
        for w0, w in zip(ranks[0]["weights"], other["weights"]):
            np.testing.assert_array_equal(w0, w)
    assert ranks[0]["accuracy"] > 0.5
    # Identical hosts: --balance auto measured them and kept the even split (noise is not a speed difference).
    assert "per-rank batch sizes" not in capsys.readouterr().out


def _train_and_report_on_tf(x_train, y_train, **_):
    """The same ordinary cell on TensorFlow's collectives, plus where this rank ran and the group's addresses."""
    import socket

    from jupyter_dl import collectives
    from jupyter_dl.backends import tf_ops

    weights, accuracy = _ordinary_fit(x_train, y_train)
    return {
        "host": socket.gethostname(),
        "rank": collectives.rank(),
        "size": collectives.size(),
        "addresses": list(tf_ops.current().addresses),
        "weights": weights,
        "accuracy": accuracy,
    }


def test_four_ranks_on_two_hosts_train_as_one_on_tensorflows_collectives(session, digits):
    """The TF backend has no server in the kernel: each engine names the address its collective server listens on,
    the one its host uses toward the controller (not loopback, which the other host cannot reach)."""
    from jupyter_dl.kernel.job.work import FunctionWork
    from jupyter_dl.wire.options import RunOptions

    result = session.runner.run(
        FunctionWork(_train_and_report_on_tf, kwargs=digits, all_ranks=True),
        RunOptions(n=4, timeout=600, backend="tf"),
    )
    ranks = result.results
    address = {hostname: a for _, hostname, _, a in HOSTS}
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3] and all(r["size"] == 4 for r in ranks)
    assert sorted(r["host"] for r in ranks) == ["jdl-host-a", "jdl-host-a", "jdl-host-b", "jdl-host-b"]
    group = ranks[0]["addresses"]
    assert all(r["addresses"] == group for r in ranks)
    assert [a.rsplit(":", 1)[0] for a in group] == [address[r["host"]] for r in ranks], group
    for other in ranks[1:]:
        for w0, w in zip(ranks[0]["weights"], other["weights"]):
            np.testing.assert_array_equal(w0, w)
    assert ranks[0]["accuracy"] > 0.5


def test_a_host_that_cannot_reach_the_kernel_is_named_within_seconds(session):
    from jupyter_dl.errors import UsageError
    from jupyter_dl.kernel.job.work import FunctionWork
    from jupyter_dl.wire.options import RunOptions

    session.runner.rendezvous_address = "10.77.0.99"  # on the bridge's subnet, but nobody's address
    t = time.monotonic()
    with pytest.raises(
        UsageError,
        match=r"host jdl-host-[ab] \(rank 0\) cannot reach this kernel's rendezvous server "
        r"on port \d+ at 10\.77\.0\.99",
    ):
        session.runner.run(FunctionWork(os.getpid), RunOptions(n=4))
    assert time.monotonic() - t < 15


SLOW_HOST_CELL = """
import horovod.tensorflow as hvd
import keras

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(512, activation="relu"),
                          keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.Adam(0.001), "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=128, epochs=1, verbose=0)
checksums = hvd.allgather_object(float(sum(abs(v.numpy()).sum() for v in model.trainable_variables)))
"""


def test_balance_auto_gives_a_slowed_host_smaller_batches(session, digits, capsys):
    """Host b's processes share a fifth of one CPU (a CFS quota, whatever else the machine runs): with ranks on
    several hosts, --balance auto (the default) measures every rank and gives host b's ranks smaller batches."""
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.wire.options import RunOptions

    namespace = dict(digits)
    netns.slow_down(HOSTS[1][0], cpu_share=0.2)
    try:
        result = session.runner.run(CellWork(SLOW_HOST_CELL, namespace), RunOptions(n=4, timeout=600, plot=False))
    finally:
        netns.remove_cgroup()
    line = next(l for l in capsys.readouterr().out.splitlines() if "per-rank batch sizes" in l)
    sizes = [int(v) for v in re.search(r"batch sizes \[([\d, ]+)\]", line).group(1).split(",")]
    slowed = [r for r, host in enumerate(result.job.hosts) if host == HOSTS[1][1]]
    fast = [r for r in range(4) if r not in slowed]
    assert sum(sizes) == 512 and len(slowed) == 2, line
    assert min(sizes[r] for r in fast) > 1.5 * max(sizes[r] for r in slowed), line
    assert len(set(result.values["checksums"])) == 1  # every rank holds the same weights


LINK_CUT_CELL = """
import os
import keras

class CutHere(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 3 and not os.path.exists(MARKER):  # training is under way on every rank: time to cut
            open(MARKER, "w").close()

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy")
model.fit(x_train, y_train, epochs=200, batch_size=8, verbose=0, callbacks=[CutHere()])
"""
COLLECTIVE_TIMEOUT = 8  # seconds a rank waits for a peer in a collective (c.JobRunner.collective_timeout)
HOST_SILENCE = 3.0  # seconds without heartbeats before an elastic job counts a host lost (elastic_host_timeout)


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_a_host_cut_off_mid_job_ends_it_and_the_next_job_runs_on_the_other(session, digits, tmp_path, backend):
    """Host b's link goes down while the 4 ranks train. Its ranks can neither finish nor say so; host a's ranks
    leave the collective when gloo gives up on their peers (Horovod) or the coordination service misses their
    heartbeats (TF), and the job ends with an error, in the bounds the fault suite gives a stall (the configured
    wait + 10 s). The next job runs on host a's engines."""

    from jupyter_dl.errors import HostLost
    from jupyter_dl.kernel.job.work import CellWork, FunctionWork
    from jupyter_dl.wire.options import RunOptions

    marker = str(tmp_path / "training")
    session.runner.collective_timeout = COLLECTIVE_TIMEOUT
    cutter, cut = netns.cut_link_when(marker, 1)
    try:
        with pytest.raises(HostLost) as error:
            session.runner.run(
                CellWork(LINK_CUT_CELL, {**digits, "MARKER": marker}),
                RunOptions(n=4, timeout=600, stall_timeout=0, plot=False, name="link-cut", backend=backend),
            )
        took = time.monotonic() - cut["t"]
        message = str(error.value)
        print(f"{backend}: link cut -> error in {took:.1f}s: {message}")
        assert took < COLLECTIVE_TIMEOUT + 10, f"{took:.1f}s from the cut to the error"
        # One line naming the host and its ranks, not gloo's connection errors.
        job = session.jobs.all()[-1]
        ranks = ", ".join(str(r) for r, host in enumerate(job.hosts) if host == "jdl-host-b")
        assert f"host jdl-host-b (ranks {ranks}) stopped answering during the job" in message, message
        assert "\n" not in message and job.state == "failed" and job.error == "host jdl-host-b lost"
        # The next job goes to the engines still reachable, all on host a.
        hosts = session.runner.run(
            FunctionWork(_hostname_and_size, all_ranks=True), RunOptions(n=2, backend=backend)
        ).results
        assert hosts == [("jdl-host-a", 2), ("jdl-host-a", 2)]
    finally:
        cutter.join(1)
        _restore_host(1)  # host b's engines were lost with the link: the next test gets new ones


ELASTIC_LINK_CUT_CELL = """
import os, socket
import keras
from jupyter_dl.runtime.job_backend import backend

RANK = backend().rank_and_size()[0]

class CutHere(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
    def on_train_batch_end(self, batch, logs=None):
        # past epoch 1's commit after step 4: the test cuts the host this rank names off the network
        if self.epoch == 1 and batch == 5 and RANK == CUT_RANK and not os.path.exists(MARKER):
            with open(MARKER + ".part", "w") as f:
                f.write(socket.gethostname())
            os.rename(MARKER + ".part", MARKER)

keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=4, batch_size=8, verbose=0, callbacks=[CutHere()])
"""


@pytest.mark.parametrize("backend", ["horovod", "tf"])
@pytest.mark.parametrize("cut_rank", [3, 0], ids=["other-host", "leaders-host"])
def test_an_elastic_job_goes_on_on_the_hosts_left_when_a_host_is_cut_off(
    session, digits, tmp_path, backend, cut_rank, monkeypatch, capsys
):
    """A `-n 2:4` job on both hosts (2 ranks each); inside epoch 1 the link of rank `cut_rank`'s host goes down:
    rank 0's (the leader: Horovod's coordinator, TensorFlow's coordination service) or the other one. The other
    host's 2 ranks (the job's MIN) go on from the last commit, inside that epoch, without a restart; the job ends with
    all its epochs. The collectives' timeout stays at its default (120 s): the cut host's ranks stop beating, the
    kernel counts that host lost after elastic_host_timeout and stops waiting for it, and the ranks left end their
    waits on it (Horovod: they cut their connections at the kernel's word; TensorFlow: its heartbeats, 10 s)."""
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.wire.options import RunOptions

    marker = str(tmp_path / "training")
    session.runner.collective_timeout = 120.0
    monkeypatch.setattr(session.runner, "elastic_host_timeout", HOST_SILENCE)
    monkeypatch.setattr(session.runner, "elastic_commit_steps", 4)
    cutter, cut = netns.cut_link_when(marker)
    try:
        result = session.runner.run(
            CellWork(ELASTIC_LINK_CUT_CELL, {**digits, "MARKER": marker, "CUT_RANK": cut_rank}),
            RunOptions(n=(2, 4), timeout=600, stall_timeout=0, plot=False, name="elastic-link-cut", backend=backend),
        )
        membership = result.job.membership
        print(f"{backend}: groups {membership}; {capsys.readouterr().err[-600:]}")
        cut_host = HOSTS[cut["index"]][1]
        assert [change["n"] for change in membership] == [4, 2]
        assert membership[1]["reason"].startswith(f"lost host {cut_host} (ranks "), membership[1]["reason"]
        assert result.job.state == "succeeded" and result.diverged is None
        assert result.values["history"].epoch == [0, 1, 2, 3]
        assert result.job.hosts == [HOSTS[1 - cut["index"]][1]] * 2
        cut_at = time.time() - (time.monotonic() - cut["t"])  # the cut on the wall clock the membership uses
        recovered = membership[1]["t"] - cut_at
        print(f"{backend}: link of rank {cut_rank}'s host cut -> the 2 ranks left regrouped in {recovered:.1f}s")
        assert recovered < HOST_SILENCE + 20, f"{recovered:.1f}s: the survivors waited for the collectives' timeout"
    finally:
        cutter.join(1)
        _restore_host(cut.get("index", 1))


def _hostname_and_size():
    import socket

    from jupyter_dl import collectives

    return socket.gethostname(), collectives.size()
