"""A real multi-node Slurm on one machine: slurmctld on a "head" host and one slurmd on each of two node hosts, every
host a network namespace with its own hostname and address (tests/support/netns.py). Debian's slurm-wlm and munge.

- slurmctld runs in the head namespace (netns.HEAD), as on a site where the controller is its own machine. The
  kernel (the test process, where ipyparallel's Slurm launcher runs sbatch, squeue and scancel) stays in the root
  namespace and reaches it over the bridge like any login node; nothing needed it on the root namespace's address.
- One munged, in the root namespace, serves every host: munge talks over a unix socket at a path
  (/run/munge/munge.socket.2), and path sockets are reached through the filesystem, which the namespaces share;
  network namespaces only separate abstract sockets. So one key, one daemon.
- Each slurmd is told its node name (-N) and runs under that hostname (a UTS namespace); spool, pid and log files
  are per node (%n in slurm.conf), since both share this filesystem. Fixed ports: each host has its own. `ip netns
  exec` gives each host a fresh /sys without cgroup mounts, and slurmd 22.05 will not start without them (even with
  proctrack/linuxproc, task/none), so each daemon's host mounts this machine's cgroup filesystems again first.
- Nodes are declared with CPUs=2 (this machine's cores, which both nodes share) and GRES gpu:2 on stand-in devices
  (File=<state dir>/dev/nvidia[0-1]). Slurm 22.05 accepts GRES on plain empty files only half-way: it counts them
  (sinfo shows gpu:2) but logs "not a valid character or block device" and binds none to a job (no
  CUDA_VISIBLE_DEVICES). Character device nodes with /dev/null's numbers are accepted fully: a job asking for
  --gres=gpu:1 gets CUDA_VISIBLE_DEVICES=0 on each node (`gres_accepted()`). No GPU work can run on them, so the
  jobs that train ask for no GPUs.
- The backfill pass, which is what estimates when a waiting job starts (shown by the pool), runs every 5 s instead
  of Slurm's 30 s, so a test does not wait half a minute for an estimate.
- SlurmdTimeout stays Slurm's default (300 s): a node cut off mid-job is noticed by jupyter-dl long before Slurm
  marks it down.

`nodes()` makes all of it and removes it all (daemons, the job steps and engines they started, namespaces, state),
also when a test fails; it skips only where namespaces or the packages cannot exist here, saying which.
"""

import contextlib
import getpass
import os
import shutil
import stat
import subprocess
import time

import netns
from netns import HEAD, HOSTS

CONTROLLER_PORT, NODE_PORT = 6817, 6818
GPUS_PER_NODE = 2
DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "squeue", "scancel", "sinfo", "munged", "munge")


def missing_packages() -> str:
    """Why the packages cannot be used here, or ''."""
    lost = [tool for tool in DAEMONS if not (shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}"))]
    if lost:
        return f"{', '.join(lost)} missing: run `make setup` (scripts/setup.sh installs Debian's slurm-wlm and munge)"
    return ""


def munge_works() -> bool:
    return subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode == 0


def ensure_munged():
    """Debian's munged (the package made its user and key); without systemd nobody made its socket directory."""
    if munge_works():
        return
    os.makedirs("/run/munge", exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
    assert munge_works(), "munged did not start"


def write_config(root) -> str:
    """slurm.conf and gres.conf for the head and the two nodes, state under root; returns slurm.conf's path."""
    for sub in ("state", "spool", "log", "dev"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for index in range(GPUS_PER_NODE):
        # Stand-in GPUs: character devices with /dev/null's numbers. Slurm wants a device node (a plain file is
        # "not a valid character or block device": counted, but never bound to a job).
        os.mknod(os.path.join(root, "dev", f"nvidia{index}"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    _, head, _, head_address = HEAD
    nodes = "".join(
        f"NodeName={name} NodeAddr={address} CPUs=2 RealMemory=2048 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN\n"
        for _, name, _, address in HOSTS
    )
    names = ",".join(name for _, name, *_ in HOSTS)
    with open(os.path.join(root, "slurm.conf"), "w") as f:
        f.write(f"""ClusterName=jdlnodes
SlurmctldHost={head}({head_address})
SlurmctldPort={CONTROLLER_PORT}
SlurmdPort={NODE_PORT}
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}PartitionName=jdl Nodes={names} Default=YES MaxTime=INFINITE State=UP
""")
    with open(os.path.join(root, "gres.conf"), "w") as f:
        f.write("AutoDetect=off\n")
        f.write(
            "".join(
                f"NodeName={name} Name=gpu File={root}/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n" for _, name, *_ in HOSTS
            )
        )
    return os.path.join(root, "slurm.conf")


def _cgroup_mounts() -> str:
    """Shell commands that mount this machine's cgroup filesystems again, as /proc/mounts lists them. `ip netns
    exec` gives the host a fresh /sys with nothing under /sys/fs/cgroup, and slurmd 22.05 refuses to start without
    them even with proctrack/linuxproc and task/none. The mounts live in that host's own mount namespace."""
    with open("/proc/mounts") as f:
        mounts = [line.split() for line in f if line.split()[1].startswith("/sys/fs/cgroup")]
    return " && ".join(
        f"mkdir -p {point} && mount -t {kind} -o {options} {source} {point}"
        for source, point, kind, options, *_ in mounts
    )


def _daemon(namespace, hostname, argv, logs):
    """argv on that host, with the cgroup filesystems slurmd needs mounted there first."""
    mounts = _cgroup_mounts() or "true"
    wrapped = ["sh", "-c", f'{mounts} && exec "$@"', "sh", *argv]
    return subprocess.Popen(netns.in_host(namespace, hostname, wrapped), stdout=logs, stderr=subprocess.STDOUT)


def start_slurmd(root, index, logs):
    """The slurmd of HOSTS[index], on its host."""
    namespace, name, *_ = HOSTS[index]
    os.makedirs(os.path.join(root, "spool", name), exist_ok=True)
    conf = os.path.join(root, "slurm.conf")
    return _daemon(namespace, name, ["/usr/sbin/slurmd", "-D", "-N", name, "-f", conf], logs)


def node_states() -> dict:
    """{node: state} as sinfo reports them ('idle', 'mixed', 'down*', ...)."""
    lines = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True).stdout
    return dict(line.split() for line in lines.splitlines() if line.strip())


def drain(names):
    """Nothing new starts on these nodes (what running jobs hold they keep): jobs wait in the queue."""
    _update_nodes(names, "State=DRAIN", "Reason=jupyter-dl-test")


def resume(names):
    _update_nodes(names, "State=RESUME")


def _update_nodes(names, *settings):
    done = subprocess.run(
        ["scontrol", "update", f"NodeName={','.join(names)}", *settings], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr


def wait_until(done, message, daemons, root, timeout=60):
    deadline = time.monotonic() + timeout
    while not done():
        dead = [d.args for d in daemons if d.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise AssertionError(
                f"{message}: {node_states()} (exited: {dead}); slurmctld log: {_tail(root, 'slurmctld.log')}"
            )
        time.sleep(0.3)


def _tail(root, name):
    with contextlib.suppress(OSError), open(os.path.join(root, "log", name)) as f:
        return f.read()[-1500:]
    return "(none)"


@contextlib.contextmanager
def nodes(root):
    """The namespaces, munged, slurmctld on the head and a slurmd per node, state under root; SLURM_CONF set for
    this process (ipyparallel's launcher runs sbatch from here). Yields {"root", "conf", "logs"}; everything is
    removed on the way out. Where other users' commands read the config, root must be outside pytest's base
    directory: each pytest started on the machine makes that 0700 again."""
    import pytest

    reason = missing_packages()
    if reason:
        pytest.skip(reason)
    ensure_munged()
    old = os.environ.get("SLURM_CONF")
    try:
        conf = write_config(str(root))
        with netns.hosts(head=True), open(os.path.join(root, "log", "daemons.log"), "w") as logs:
            os.environ["SLURM_CONF"] = conf  # for this process and what it starts: sbatch, squeue, the engines
            try:
                namespace, head, *_ = HEAD
                daemons = [_daemon(namespace, head, ["/usr/sbin/slurmctld", "-D", "-f", conf], logs)]
                daemons += [start_slurmd(str(root), index, logs) for index in range(len(HOSTS))]
                wait_until(
                    lambda: list(node_states().values()) == ["idle"] * len(HOSTS),
                    "the Slurm nodes never came up idle",
                    daemons,
                    str(root),
                )
                yield {"root": str(root), "conf": conf, "logs": logs}
            finally:  # what jobs are left, while slurmctld still runs; netns.hosts() then kills every process left
                subprocess.run(["scancel", "--full", f"--user={getpass.getuser()}"], capture_output=True, timeout=30)
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        shutil.rmtree(root, ignore_errors=True)


def story(root) -> str:
    """What Slurm knows of every job it still holds (state, reason, start and end times, requeues) and the end of
    slurmctld's log: what an assertion about scheduling shows when it fails."""
    jobs = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True).stdout
    return f"scontrol show job:\n{jobs}\nslurmctld log: {_tail(root, 'slurmctld.log')}"


def gres_accepted() -> str:
    """CUDA_VISIBLE_DEVICES of a job that asked Slurm for one stand-in GPU on each node ('0' and '0'): Slurm
    scheduled the GRES and bound a device to the job."""
    done = subprocess.run(
        ["srun", "-N", "2", "--ntasks-per-node=1", "--gres=gpu:1", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
