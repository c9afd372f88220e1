"""Engines from a real multi-node Slurm: slurmctld on a head host and slurmd on two node hosts, each a network
namespace with its own hostname and address (tests/support/slurm_nodes.py). `%dl_cluster start --engines slurm -n 4`
asks ipyparallel's Slurm launcher for 4 engines as one batch job, which Slurm spreads over both nodes; the kernel (this
process, in the root namespace) runs the controller on the bridge's address. Everything is removed afterwards, also
on failure."""

import os
import socket
import subprocess
import time

import netns
import numpy as np
import pytest
import slurm_nodes
from digits_cells import DIGITS_MODEL
from netns import HOSTS, KERNEL_ADDRESS

NODES = [hostname for _, hostname, *_ in HOSTS]
# The engines' batch job as ipyparallel writes it (a template of one's own gets no --ntasks or --output added), plus
# --no-kill (sbatch's and srun's), what a site would set so that Slurm marking a lost node down (after SlurmdTimeout,
# 300 s: longer than these tests, so not exercised here) does not end the other node's engines too.
BATCH_TEMPLATE = """#!/bin/sh
#SBATCH --export=ALL
#SBATCH --job-name=ipengine-{cluster_id}
#SBATCH --ntasks={n}
#SBATCH --output={output_file}
#SBATCH --no-kill
srun --no-kill {program_and_args}
"""
CELL = (
    DIGITS_MODEL
    + """
history = model.fit(x_train, y_train, epochs=5, batch_size=32, verbose=0)
import socket, horovod.tensorflow as hvd
placement = hvd.allgather_object((socket.gethostname(), hvd.rank(), hvd.local_rank(), model.get_weights()))
"""
)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with slurm_nodes.nodes(tmp_path_factory.mktemp("slurm-nodes")) as running:
        yield running


@pytest.fixture(scope="module")
def on_slurm(slurm):
    """`%dl_cluster start --engines slurm -n 4` in a real IPython shell whose config (what ipython_config.py would
    say) puts the controller on the bridge and the batch job above; yields (magics, what start printed)."""
    import contextlib
    import io

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from jupyter_dl.kernel import api
    from jupyter_dl.kernel.magics import DistributeMagics

    shell = InteractiveShell.instance()
    saved = {name: shell.config.pop(name, None) for name in ("Cluster", "SlurmEngineSetLauncher")}
    shell.config.Cluster = Config(controller_ip=KERNEL_ADDRESS, controller_location=KERNEL_ADDRESS)
    shell.config.SlurmEngineSetLauncher = Config(batch_template=BATCH_TEMPLATE)
    magics = DistributeMagics(shell)
    magics.session = api.Session(parent=shell)  # its own: the process-wide session may hold another cluster
    try:
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            magics.dl_cluster("start --engines slurm -n 4")
        yield magics, said.getvalue()
    finally:
        magics.session.cluster.stop()
        for name, value in saved.items():
            shell.config.pop(name, None)
            if value is not None:
                shell.config[name] = value


def _engine_jobs():
    """[(job id, state, node list or pending reason, CPUs)] of the Slurm jobs holding engines, oldest first."""
    lines = subprocess.run(["squeue", "-h", "-o", "%i %T %R %C %j"], capture_output=True, text=True).stdout
    return sorted(
        (tuple(line.split()[:4]) for line in lines.splitlines() if "ipengine-" in line), key=lambda j: int(j[0])
    )


def _engines_job():
    (job,) = _engine_jobs()
    return job


def test_nodes_declare_cpus_and_stand_in_gpus_that_slurm_binds_to_jobs(slurm):
    """Runs before the engines hold every CPU. Each node: 2 CPUs and GRES gpu:2 backed by stand-in device files; a
    job asking for one GPU per node gets one bound on each (CUDA_VISIBLE_DEVICES set by Slurm's gres/gpu plugin)."""
    lines = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T %c %G"], capture_output=True, text=True).stdout
    assert sorted(lines.split("\n")[:-1]) == [f"{node} idle 2 gpu:2" for node in NODES], lines
    assert slurm_nodes.gres_accepted() == "0\n0\n"


def test_four_engines_from_one_slurm_job_spread_over_both_nodes(on_slurm, capsys):
    magics, started = on_slurm
    job_id, state, node_list, cpus = _engines_job()
    assert (state, node_list, cpus) == ("RUNNING", ",".join(NODES), "4")
    client = magics.session.cluster.client
    engines = client[client.ids]  # asked with functions the engines import by name (this module they cannot)
    placed = list(
        zip(
            engines.apply_sync(socket.gethostname),
            engines.apply_sync(os.getenv, "SLURMD_NODENAME"),
            engines.apply_sync(os.getenv, "SLURM_JOB_ID"),
        )
    )
    # Each engine runs where Slurm says (its node's slurmd started it, under that host's name), all in the one job.
    assert sorted(placed) == sorted((node, node, job_id) for node in NODES for _ in range(2)), placed
    by_node = {node: sorted(eid for eid, p in zip(client.ids, placed) if p[0] == node) for node in NODES}
    magics.dl_cluster("status")
    status = capsys.readouterr().out
    for said in (started, status):  # start and status list the engines by node
        assert "4 engines on " in said and ", no GPUs" in said, said
        for node, ids in by_node.items():
            assert f"{node} (engines {ids[0]}, {ids[1]})" in said, said


def test_a_zero_code_cell_trains_on_2_nodes_x_2_ranks_with_identical_weights(on_slurm, digits):
    magics, _ = on_slurm
    namespace = magics.shell.user_ns
    namespace.update(digits)
    try:
        magics.distribute("-n 4 --name slurm-2x2 --no-plot", CELL)
        placement = namespace["placement"]
        first, second = placement[0][0], placement[2][0]
        assert {first, second} == set(NODES)  # each node's ranks consecutive: local ranks 0, 1 on each node
        assert [p[:3] for p in placement] == [(first, 0, 0), (first, 1, 1), (second, 2, 0), (second, 3, 1)]
        for _, _, _, weights in placement[1:]:
            for w0, w in zip(placement[0][3], weights):
                np.testing.assert_array_equal(w0, w)
        history = namespace["history"].history
        assert history["accuracy"][-1] > 0.5 and history["loss"][-1] < history["loss"][0], history
    finally:
        for name in ("placement", "history", "model", *digits):
            namespace.pop(name, None)


LINK_CUT_CELL = """
import os
import keras

class CutHere(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 3 and not os.path.exists(MARKER):  # every rank is training: time to cut
            open(MARKER, "w").close()

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy")
model.fit(x_train, y_train, epochs=200, batch_size=8, verbose=0, callbacks=[CutHere()])
"""
COLLECTIVE_TIMEOUT = 8  # seconds a rank waits for a peer in a collective (c.JobRunner.collective_timeout)


def _hostname_and_size():
    import socket

    from jupyter_dl import collectives

    return socket.gethostname(), collectives.size()


def test_a_node_cut_off_mid_job_ends_it_and_the_next_job_runs_on_the_other_node(on_slurm, digits, tmp_path):
    """Node b's link goes down while 4 ranks train: the job ends with the one-line lost-host error naming node b,
    within the collective timeout + 10 s, and the next job runs on node a's engines, still in the same Slurm job."""
    from jupyter_dl.errors import HostLost
    from jupyter_dl.kernel.job.work import CellWork, FunctionWork
    from jupyter_dl.wire.options import RunOptions

    magics, _ = on_slurm
    session = magics.session
    session.runner.collective_timeout = COLLECTIVE_TIMEOUT
    job_id, *_ = _engines_job()
    marker = str(tmp_path / "training")
    cutter, cut = netns.cut_link_when(marker, 1)
    try:
        with pytest.raises(HostLost) as error:
            session.runner.run(
                CellWork(LINK_CUT_CELL, {**digits, "MARKER": marker}),
                RunOptions(n=4, timeout=600, stall_timeout=0, plot=False, name="slurm-node-cut"),
            )
        took, message = time.monotonic() - cut["t"], str(error.value)
        assert took < COLLECTIVE_TIMEOUT + 10, f"{took:.1f}s from the cut to the error"
        job = session.jobs.all()[-1]
        ranks = ", ".join(str(r) for r, host in enumerate(job.hosts) if host == "jdl-host-b")
        assert f"host jdl-host-b (ranks {ranks}) stopped answering during the job" in message, message
        assert "\n" not in message and job.state == "failed" and job.error == "host jdl-host-b lost"
        hosts = session.runner.run(FunctionWork(_hostname_and_size, all_ranks=True), RunOptions(n=2)).results
        assert hosts == [("jdl-host-a", 2), ("jdl-host-a", 2)]
        # Slurm has not noticed (SlurmdTimeout: 300 s): the engines' job still runs on both nodes, and the kernel's
        # request for 2 engines replacing node b's waits in Slurm's queue, since node b's CPUs are still that job's.
        deadline = time.monotonic() + 30
        while (jobs := _engine_jobs())[1:] and jobs[1][2] == "(None)" and time.monotonic() < deadline:
            time.sleep(0.5)  # submitted, not yet looked at by Slurm's scheduler
        first, *replacing = jobs
        assert first == (job_id, "RUNNING", ",".join(NODES), "4")
        assert [(state, reason, cpus) for _, state, reason, cpus in replacing] == [("PENDING", "(Resources)", "2")]
    finally:
        cutter.join(1)
        netns.set_link(1, up=True)  # the fixture's teardown then kills what is left on node b
