"""Ranks on several hosts, for real: two "hosts" made of Linux network namespaces with their own hostnames, joined
by veth pairs on a private bridge, with interface names that are not eth0 (and differ between the hosts). The kernel
(this process) stays in the root namespace; an ipyparallel controller listens on the bridge; two engines run in
each namespace. Everything the test creates is removed afterwards, also on failure."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

BRIDGE, KERNEL_ADDRESS = "jdlbr0", "10.77.0.1"
HOSTS = [  # namespace, hostname, interface name inside, address
    ("jdl-ns-a", "jdl-host-a", "ens5", "10.77.0.2"),
    ("jdl-ns-b", "jdl-host-b", "enp3s0", "10.77.0.3"),
]


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def _teardown_network():
    for namespace, *_ in HOSTS:
        sh("ip", "netns", "del", namespace, check=False)
        shutil.rmtree(f"/etc/netns/{namespace}", ignore_errors=True)
    for index in range(len(HOSTS)):
        sh("ip", "link", "del", f"jdl-veth{index}", check=False)
    sh("ip", "link", "del", BRIDGE, check=False)


def _make_network():
    _teardown_network()  # what a killed earlier run left
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{KERNEL_ADDRESS}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for index, (namespace, _, interface, address) in enumerate(HOSTS):
        outside = f"jdl-veth{index}"
        sh("ip", "netns", "add", namespace)
        sh("ip", "link", "add", outside, "type", "veth", "peer", "name", f"jdl-tmp{index}")
        sh("ip", "link", "set", f"jdl-tmp{index}", "netns", namespace)
        sh("ip", "netns", "exec", namespace, "ip", "link", "set", f"jdl-tmp{index}", "name", interface)
        sh("ip", "link", "set", outside, "master", BRIDGE)
        sh("ip", "link", "set", outside, "up")
        sh("ip", "netns", "exec", namespace, "ip", "addr", "add", f"{address}/24", "dev", interface)
        sh("ip", "netns", "exec", namespace, "ip", "link", "set", interface, "up")
        sh("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
        # Hosts resolve each other's names, as on a real network (`ip netns exec` mounts this over /etc/hosts).
        os.makedirs(f"/etc/netns/{namespace}", exist_ok=True)
        with open(f"/etc/netns/{namespace}/hosts", "w") as hosts:
            hosts.write("127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for _, h, _, a in HOSTS))


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """A controller on the bridge and 2 engines in each namespace; yields the client connection file."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        pytest.skip("network namespaces need root and iproute2/util-linux")
    try:
        _make_network()
    except subprocess.CalledProcessError as exc:
        _teardown_network()
        pytest.skip(f"this kernel forbids creating network namespaces here: {exc.stderr.strip()}")
    import ipyparallel as ipp

    cluster = ipp.Cluster(n=0, controller_ip=KERNEL_ADDRESS, controller_location=KERNEL_ADDRESS, log_level=40,
                          cluster_id=f"jdl-multihost-{os.getpid()}")
    engines = []
    logs = open(tmp_path_factory.mktemp("engines") / "engines.log", "w")  # kept with the test's files
    try:
        cluster.start_controller_sync()
        engine_file = os.path.join(cluster.profile_dir, "security", f"ipcontroller-{cluster.cluster_id}-engine.json")
        for namespace, hostname, *_ in HOSTS:
            for _ in range(2):
                engines.append(subprocess.Popen(
                    ["ip", "netns", "exec", namespace, "unshare", "--uts", "sh", "-c",
                     f'hostname {hostname} && exec "$0" -m ipyparallel.engine --file="$1" --log-level=40',
                     sys.executable, engine_file],
                    env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
                    stdout=logs, stderr=subprocess.STDOUT))
        client = cluster.connect_client_sync()
        deadline = time.monotonic() + 120
        while len(client.ids) < 4:
            assert time.monotonic() < deadline, "engines in the namespaces never registered"
            assert all(e.poll() is None for e in engines), "an engine in a namespace exited"
            time.sleep(0.2)
        client.close()
        yield cluster.cluster_file
    finally:
        for engine in engines:
            engine.kill()
        for engine in engines:
            engine.wait(10)
        cluster.stop_cluster_sync()
        _teardown_network()
        logs.close()


@pytest.fixture
def session(two_hosts):
    from jupyter_dl.api import Session

    session = Session()
    session.cluster.connect_file(two_hosts)
    yield session
    session.cluster.stop()  # a connected cluster is only disconnected


def _train_and_report(x_train, y_train, **_):
    """An ordinary Keras cell, plus where Horovod placed this rank."""
    import socket

    import horovod.tensorflow as hvd
    import keras

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])  # no seed: ranks start apart
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x_train, y_train, epochs=6, batch_size=32, verbose=0)
    return {"host": socket.gethostname(), "rank": hvd.rank(), "local_rank": hvd.local_rank(),
            "cross_rank": hvd.cross_rank(), "local_size": hvd.local_size(), "weights": model.get_weights(),
            "gloo_iface": os.environ.get("HOROVOD_GLOO_IFACE"), "accuracy": history.history["accuracy"][-1]}


def test_four_ranks_on_two_hosts_train_as_one(session, digits):
    import jupyter_dl  # noqa: F401  (the session above is the one the launcher uses)
    from jupyter_dl.launcher import FunctionWork
    from jupyter_dl.options import RunOptions

    from jupyter_dl.magics import format_status

    status = session.cluster.status()
    assert status["hosts"] == ["jdl-host-a", "jdl-host-b"] and status["engines"] == 4
    assert [len(ids) for ids in status["engines_by_host"].values()] == [2, 2]
    line = format_status(status)  # what %dl_cluster status prints: engines grouped by host
    for host, ids in status["engines_by_host"].items():
        assert f"{host} (engines {ids[0]}, {ids[1]})" in line
    result = session.launcher.run(FunctionWork(_train_and_report, kwargs=digits, all_ranks=True),
                                  RunOptions(n=4, timeout=600))
    ranks = result.results
    # Horovod's host assignment follows the engines' real hosts: each host's ranks consecutive, local ranks 0 and 1
    # on each, cross rank the host's position.
    first, second = ranks[0]["host"], ranks[2]["host"]
    assert {first, second} == {"jdl-host-a", "jdl-host-b"}
    assert [(r["host"], r["rank"], r["local_rank"], r["cross_rank"]) for r in ranks] == [
        (first, 0, 0, 0), (first, 1, 1, 0), (second, 2, 0, 1), (second, 3, 1, 1)]
    assert all(r["local_size"] == 2 for r in ranks)
    # gloo ran over each host's own interface, found by the route to the kernel (no host has an eth0).
    interface = {hostname: name for _, hostname, name, _ in HOSTS}
    assert [r["gloo_iface"] for r in ranks] == [interface[r["host"]] for r in ranks]
    for other in ranks[1:]:
        for w0, w in zip(ranks[0]["weights"], other["weights"]):
            np.testing.assert_array_equal(w0, w)
    assert ranks[0]["accuracy"] > 0.5


def test_a_host_that_cannot_reach_the_kernel_is_named_within_seconds(session):
    from jupyter_dl.errors import UsageError
    from jupyter_dl.launcher import FunctionWork
    from jupyter_dl.options import RunOptions

    session.launcher.rendezvous_address = "10.77.0.99"  # on the bridge's subnet, but nobody's address
    t = time.monotonic()
    with pytest.raises(UsageError, match=r"host jdl-host-[ab] \(rank 0\) cannot reach this kernel's rendezvous server "
                                         r"on port \d+ at 10\.77\.0\.99"):
        session.launcher.run(FunctionWork(os.getpid), RunOptions(n=4))
    assert time.monotonic() - t < 15
