"""Engines on other hosts through ipyparallel's SSH engine-set launcher: `%dl_cluster start --engines ssh` with the
host list in ipyparallel's own trait (c.SSHEngineSetLauncher.engines), against Debian's sshd running inside two
network-namespace "hosts" (tests/support/netns.py), logged into with a key the test makes. The sshds, the engines they
started and the namespaces are removed afterwards, also on failure."""

import shutil

import netns
import numpy as np
import pytest
from netns import HOSTS

CELL = """
import socket
import horovod.tensorflow as hvd
import keras

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])  # no seed: ranks start apart
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=4, batch_size=32, verbose=0)
placement = hvd.allgather_object((socket.gethostname(), hvd.rank(), hvd.local_rank(), hvd.cross_rank(),
                                  model.get_weights()))
"""


@pytest.fixture(scope="module")
def sshd_hosts(tmp_path_factory):
    """An sshd on each namespace host; yields the client key that logs into them as root."""
    if not shutil.which("sshd") and not shutil.which("/usr/sbin/sshd"):
        pytest.skip("needs Debian's openssh-server (apt-get install -y openssh-server)")
    workdir = tmp_path_factory.mktemp("ssh")
    with netns.hosts(), open(workdir / "sshd.log", "w") as logs:
        key = netns.ssh_keys(str(workdir))
        sshds = [
            netns.start_sshd(namespace, hostname, address, str(workdir), logs)
            for namespace, hostname, _, address in HOSTS
        ]
        try:
            for _, hostname, _, address in HOSTS:
                assert netns.wait_for_ssh(address, key) == hostname  # sessions run under that host's own name
            yield key, workdir
        finally:
            for sshd in sshds:
                sshd.kill()
                sshd.wait(10)


@pytest.fixture
def ssh_config(sshd_hosts):
    """The user's config for the SSH launcher, in the IPython shell's config (what ipython_config.py would set):
    one engine per host (each SSH step starts a Python on the host: more engines only cost minutes here), reached
    by address, with the test's key. Each host gets its own remote profile dir: the hosts share this machine's
    filesystem, and ipyparallel copies the connection files there."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    key, workdir = sshd_hosts
    options = netns.ssh_options(key)
    ip = InteractiveShell.instance()
    saved = ip.config.pop("SSHEngineSetLauncher", None)
    ip.config.SSHEngineSetLauncher = Config(
        engines={
            f"root@{address}": {"n": 1, "remote_profile_dir": str(workdir / f"profile-{hostname}")}
            for _, hostname, _, address in HOSTS
        },
        ssh_args=options,
        scp_args=options,
    )
    yield ip
    ip.config.pop("SSHEngineSetLauncher", None)
    if saved is not None:
        ip.config.SSHEngineSetLauncher = saved


def test_dl_cluster_start_engines_ssh_runs_a_job_across_hosts(ssh_config, digits, capsys):
    from jupyter_dl.kernel import api
    from jupyter_dl.kernel.magics import DistributeMagics

    magics = DistributeMagics(ssh_config)
    magics.session = api.Session(parent=ssh_config)  # its own: the process-wide session may hold another cluster
    namespace = ssh_config.user_ns
    try:
        magics.dl_cluster("start --engines ssh")  # -n defaults to the host list's 2 engines
        status_line = capsys.readouterr().out
        assert "2 engines on jdl-host-" in status_line and all(  # engines grouped by host, whichever came first
            f"{hostname} (engine " in status_line for _, hostname, *_ in HOSTS
        ), status_line
        namespace.update(digits)
        # --balance off: this test is about SSH engines. With the default (auto: ranks on two hosts), the batch
        # split follows speeds measured on the shared 2 cores, which differ from run to run; balanced runs reached
        # 0.43-0.47 accuracy where even ones pass 0.5 (an open question for the balancer, tested in test_balance).
        magics.distribute("-n 2 --name over-ssh --no-plot --balance off", CELL)
        placement = namespace["placement"]
        # Each rank on its own host: local rank 0 on both, cross rank the host's position.
        first, second = placement[0][0], placement[1][0]
        assert {first, second} == {"jdl-host-a", "jdl-host-b"}
        assert [p[:4] for p in placement] == [(first, 0, 0, 0), (second, 1, 0, 1)]
        for weights in [p[4] for p in placement[1:]]:
            for w0, w in zip(placement[0][4], weights):
                np.testing.assert_array_equal(w0, w)
        # Trained, not a bound on how well: 4 short epochs from an unseeded start reached 0.43-0.55 here, so the
        # check is three times chance (10 classes) and a falling loss.
        history = namespace["history"].history
        assert history["accuracy"][-1] > 0.3 and history["loss"][-1] < history["loss"][0], history
    finally:
        for name in ("placement", "history", "model", *digits):
            namespace.pop(name, None)
        magics.session.cluster.stop()  # stops the engines over SSH; the fixture then kills what is left
