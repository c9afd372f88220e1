"""Scale-out through Slurm: a real single-node Slurm (Debian's slurmctld + slurmd, munge) on this machine.

ipyparallel's own Slurm launcher submits the engines as one batch job of N tasks, so Slurm allocates them all at
once (its gang allocation) and the notebook connects to that cluster unchanged. The fixture runs the daemons with a
generated slurm.conf in a temporary directory and its own ports, so it needs no system configuration.
"""

import os
import pathlib
import shutil
import socket
import subprocess
import time
import uuid

import ipyparallel as ipp
import pytest

from jupyter_dl.kernel.api import Session
from jupyter_dl.kernel.job.work import FunctionWork
from jupyter_dl.wire.options import RunOptions


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _munge_running():
    munge = shutil.which("munge")
    return munge and subprocess.run(f"{munge} -n | unmunge", shell=True, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    for tool in ("slurmctld", "slurmd", "sbatch", "sinfo", "munged"):
        assert shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}"), (
            f"{tool} is missing: run `make setup` (scripts/setup.sh installs Debian's slurm-wlm and munge)"
        )
    if not _munge_running():
        # Without systemd nobody made munged's socket directory; the Debian package made the user and the key.
        os.makedirs("/run/munge", exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
        assert _munge_running(), "munged did not start"
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log"):
        (root / sub).mkdir()
    host = socket.gethostname().split(".")[0]
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 - 1024
    conf = root / "slurm.conf"
    conf.write_text(f"""ClusterName=jdltest
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}
SlurmctldLogFile={root / "log" / "slurmctld.log"}
SlurmdLogFile={root / "log" / "slurmd.log"}
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd.pid"}
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN
PartitionName=jdl Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = [
        subprocess.Popen(
            [f"/usr/sbin/{d}", "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for d in ("slurmctld", "slurmd")
    ]
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)  # sbatch, squeue and scancel (run by ipyparallel) find this Slurm
    try:
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline and all(d.poll() is None for d in daemons), (
                root / "log" / "slurmctld.log"
            ).read_text()[-2000:]
            time.sleep(0.5)
        yield root
    finally:
        for daemon in daemons:
            daemon.terminate()
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:  # slurmd waits for job steps a failed test left running
                daemon.kill()
                daemon.wait(10)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


def _rank_size_host():
    import socket

    import horovod.tensorflow as hvd

    return hvd.rank(), hvd.size(), socket.gethostname()


def test_engines_started_by_slurm_run_a_horovod_job(slurm, tmp_path):
    cluster = ipp.Cluster(
        n=2,
        engines="slurm",
        profile_dir=str(tmp_path / "profile_slurm"),
        cluster_id=f"slurm-{uuid.uuid4().hex[:6]}",
        log_level=40,
    )
    cluster.start_controller_sync()
    try:
        cluster.start_engines_sync(batch_file_name=str(tmp_path / "engines.sbatch"))  # not into the repository
        queued = subprocess.run(["squeue", "-h", "-o", "%i %D %C %T"], capture_output=True, text=True).stdout.split()
        assert queued, "Slurm shows no job for the engines"
        _, nodes, cpus, _ = queued[:4]
        assert int(cpus) >= 2  # one batch job holding both engines' CPUs: allocated together
        session = Session()
        session.cluster.start_timeout = 120
        status = session.cluster.connect_file(cluster.cluster_file)
        session.cluster.client.wait_for_engines(2, timeout=120, interactive=False)
        result = session.runner.run(FunctionWork(_rank_size_host, all_ranks=True), RunOptions(n=2))
        assert [r[:2] for r in result.results] == [(0, 2), (1, 2)]
        assert status.owned is False
        session.cluster.stop()  # only disconnects
    finally:
        cluster.stop_cluster_sync()
    deadline = time.monotonic() + 30
    while subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "the engines' Slurm job outlived the cluster"
        time.sleep(0.5)


def test_the_kernel_asks_slurm_for_all_its_engines_at_once_and_waits_in_its_queue(slurm, capsys):
    """`%dl_cluster start --engines slurm`: while another Slurm job holds the node, the engines' job pends as a
    whole (no engine starts alone) and the kernel says so; once Slurm allocates it, a Horovod job runs on the
    engines; stopping the cluster ends the Slurm job."""
    import threading

    blocker = (
        subprocess.run(
            ["sbatch", "--parsable", "-n", str(os.cpu_count()), "-o", "/dev/null", "--wrap", "sleep 600"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .split(";")[0]
    )
    session = Session()
    session.cluster.profile = f"jdl-slurm-{uuid.uuid4().hex[:6]}"
    started = {}
    try:
        _wait_squeue(lambda jobs: jobs.get(blocker, ("",))[0] == "RUNNING", "the blocking job never ran")
        starter = threading.Thread(
            target=lambda: started.update(status=session.cluster.start(2, engines="slurm")), daemon=True
        )
        starter.start()
        pending = _wait_squeue(
            lambda jobs: any(j != blocker and s == ("PENDING", "Resources") for j, s in jobs.items()),
            "the engines' job never pended",
        )
        (engines_job,) = [j for j in pending if j != blocker]
        # The kernel polls the queue once a second and says each new state; Slurm may first report the job pending
        # for no reason yet ("(None)"): wait for the line with the reason (however slow this machine is now).
        expected = f"waiting for slurm to allocate 2 engines at once (Slurm job {engines_job} PENDING (Resources))"
        said, deadline = "", time.monotonic() + 60
        while expected not in said and time.monotonic() < deadline:
            time.sleep(0.5)
            said += capsys.readouterr().err
        assert session.cluster.engine_ids() == []  # all or nothing: no engine runs while the job pends
        # The batch script is kept with the cluster's files, not written into the notebook's folder.
        assert list(pathlib.Path(session.cluster.cluster.profile_dir).glob("*-engines-0.sbatch"))
        assert not os.path.exists("slurm_engine.sbatch")
        assert expected in said, said
        subprocess.run(["scancel", blocker], check=True)
        starter.join(180)
        assert started["status"].engines == 2 and started["status"].launcher == "slurm"
        result = session.runner.run(FunctionWork(_rank_size_host, all_ranks=True), RunOptions(n=2))
        assert [r[:2] for r in result.results] == [(0, 2), (1, 2)]
    finally:
        subprocess.run(["scancel", blocker])
        session.cluster.stop()
        from IPython.paths import get_ipython_dir

        shutil.rmtree(os.path.join(get_ipython_dir(), f"profile_{session.cluster.profile}"), ignore_errors=True)
    _wait_squeue(lambda jobs: not jobs, "the engines' Slurm job outlived the cluster")


def _wait_squeue(done, message, timeout=60):
    """Poll squeue until done({job id: (state, reason)}) holds; returns that mapping."""
    deadline = time.monotonic() + timeout
    while True:
        lines = subprocess.run(["squeue", "-h", "-o", "%i %T %r"], capture_output=True, text=True).stdout
        jobs = {parts[0]: (parts[1], parts[2]) for parts in (line.split() for line in lines.splitlines()) if parts}
        if done(jobs):
            return jobs
        assert time.monotonic() < deadline, f"{message}: {jobs}"
        time.sleep(0.5)
