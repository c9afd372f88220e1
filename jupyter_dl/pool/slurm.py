"""Kernel side: the GPU pool delegated to Slurm. Each job's ranks are one Slurm allocation, and that allocation is
the job's engines: n engines as one sbatch job (ipyparallel's Slurm launcher), all-or-nothing by Slurm's own gang
scheduling, `--gres=gpu:K` on each node. Slurm's queue is the only queue: while the job waits, its place in that
queue, Slurm's reason and its start estimate (`squeue --start`) go where the embedded pool's wait goes (the job's
`queued` state and progress: the cell, the job store, the panel). The job runs on exactly the engines Slurm granted;
when it ends, however it ends (an interrupt while queued included), the allocation is cancelled (scancel).

Engines live per job, not per cluster: an allocation kept between cells would hold its GPUs while the notebook's
user reads and types, which is what a shared pool exists to prevent; the price is starting engines for each job.
The controller stays per cluster (this kernel's; it holds no GPU).
"""

import re
import subprocess
import sys
import time

from traitlets import Bool, Float, Integer, Unicode, default
from traitlets.config import Configurable

from jupyter_dl.cluster import scheduler_queue
from jupyter_dl.errors import UsageError
from jupyter_dl.pool.gang import PoolError

POOL_ENV = "JUPYTER_DL_POOL_SCHEDULER"  # set to "slurm" by a hub whose GPUs are Slurm's (c.Spawner.environment)


class SlurmPool(Configurable):
    """Settings of the pool delegated to Slurm (c.SlurmPool.*), read in the kernel."""

    enabled = Bool(
        help="Delegate the GPU pool to Slurm: each job's ranks are one Slurm allocation (its engines, started "
        "with sbatch when the job starts and cancelled when it ends), queued by Slurm alone. Takes precedence over "
        "c.JobRunner.pool_url and the embedded pool. Default: on when $JUPYTER_DL_POOL_SCHEDULER is 'slurm' (what "
        "a hub can set for every user), else off."
    ).tag(config=True)
    account = Unicode(
        "",
        help="Slurm account the jobs are charged to (sbatch --account). Empty: sbatch's own default, which reads "
        "$SBATCH_ACCOUNT, so a hub that knows each user's account sets that in the user's environment.",
    ).tag(config=True)
    qos = Unicode(
        "", help="Slurm QOS of the jobs (sbatch --qos). Empty: sbatch's own default, which reads $SBATCH_QOS."
    ).tag(config=True)
    partition = Unicode(
        "", help="Slurm partition (sbatch --partition). Empty: sbatch's default ($SBATCH_PARTITION, else Slurm's)."
    ).tag(config=True)
    time_limit = Unicode(
        "",
        help="Slurm time limit of each job's allocation (sbatch --time, e.g. '2:00:00'). Empty: the partition's "
        "default. A limit also lets Slurm estimate when waiting jobs start.",
    ).tag(config=True)
    gpus_per_node = Integer(
        0,
        help="GPUs (and so ranks) per node of an allocation: a job of n ranks asks for ceil(n / this) nodes, each "
        "with --gres=gpu:K and K ranks. 0: the most GPUs one node of the cluster has (sinfo).",
    ).tag(config=True)
    poll_interval = Float(1.0, help="Seconds between asking squeue where a waiting job stands.").tag(config=True)

    @default("enabled")
    def _enabled_from_hub(self):
        import os

        return os.environ.get(POOL_ENV, "").strip().lower() == "slurm"

    def batch_template(self, n: int, job_name: str, gpus: bool) -> str:
        """The engines' sbatch script, as ipyparallel's Slurm launcher formats it ({n}, {output_file} and
        {program_and_args} are its own)."""
        per_node = min(n, self.gpus_per_node or node_gpus())
        if gpus and not per_node:
            raise UsageError("Slurm has no node with GPUs (sinfo lists no gres gpu); set c.SlurmPool.gpus_per_node")
        lines = [
            "#!/bin/sh",
            "#SBATCH --export=ALL",
            f"#SBATCH --job-name=jdl-{re.sub(r'[^A-Za-z0-9_.-]', '_', job_name)}",
            "#SBATCH --ntasks={n}",
            "#SBATCH --output={output_file}",
        ]
        if gpus:  # K ranks and K GPUs on each node; --ntasks caps the last node's
            lines += [f"#SBATCH --ntasks-per-node={per_node}", f"#SBATCH --gres=gpu:{per_node}"]
        for flag, value in (("account", self.account), ("qos", self.qos), ("partition", self.partition)):
            if value:
                lines.append(f"#SBATCH --{flag}={_plain(value, flag)}")
        if self.time_limit:
            lines.append(f"#SBATCH --time={_plain(self.time_limit, 'time_limit')}")
        # Each task sees all of its node's GPUs of the job: each engine keeps the one of its local task id, so an
        # engine is pinned to one GPU as on a local cluster (and placement matches the grant by (host, GPU)).
        lines.append(
            'srun sh -c \'export CUDA_VISIBLE_DEVICES=$(echo "$CUDA_VISIBLE_DEVICES"'
            ' | cut -d, -f$((SLURM_LOCALID + 1))); exec "$0" "$@"\' {program_and_args}'
        )
        return "\n".join(lines) + "\n"

    def summary(self) -> dict:
        """{"gpus", "free", "queued"} across Slurm's nodes, for `%dl_cluster status` and the recommender."""
        total = used = 0
        for line in _run(["sinfo", "-h", "-N", "-O", "NodeHost:40,Gres:60,GresUsed:60"]).splitlines():
            fields = line.split()
            if len(fields) >= 3:
                total += _gpu_count(fields[1])
                used += _gpu_count(fields[2])
        queued = len(_run(["squeue", "-h", "-t", "PENDING", "-o", "%i"]).split())
        return {"gpus": total, "free": max(0, total - used), "queued": queued}


class SlurmLease:
    """The PoolLease of a job whose pool is Slurm: `with` it, the job's n engines are one running allocation."""

    def __init__(self, cluster, settings: SlurmPool, n: int, job, stderr=None, gpus=True):
        self.cluster, self.settings, self.n, self.job, self.gpus = cluster, settings, n, job, gpus
        self.stderr = stderr or sys.stderr
        self.set_id = None
        self.slurm_job = ""
        self._shown = None

    def __enter__(self):
        template = self.settings.batch_template(self.n, self.job.name, self.gpus)
        self.set_id, self.slurm_job = self.cluster.allocate(self.n, "slurm", batch_template=template)
        try:
            self._wait_in_queue()
            self.cluster.ensure(self.n)  # the allocation runs: its engines register
            ids = self.cluster.engine_ids()
            devices = [(i["hostname"], int(i["gpu"])) for i in self.cluster.describe(ids) if i.get("gpu")]
        except BaseException:
            self._release()
            raise
        if self.job.state == "queued":
            self.job.transition("starting")
        self.job.gpus = [f"{host}:{gpu}" for host, gpu in devices]
        self.job.progress = {k: v for k, v in self.job.progress.items() if k not in ("queue_position", "reason")}
        return {"id": f"slurm-{self.slurm_job}", "state": "granted", "devices": devices, "slurm_job": self.slurm_job}

    def __exit__(self, *exc):
        self._release()
        return False

    def _wait_in_queue(self):
        gone = 0
        while True:
            place = scheduler_queue.slurm_wait(self.slurm_job)
            if place["state"] != "PENDING":
                gone = gone + 1 if not place["state"] else 0
                if place["state"] or gone >= 3:  # '' three times: not a squeue hiccup
                    break
            else:
                if self.job.state != "queued":
                    self.job.transition("queued")
                self._waiting(place)
            time.sleep(self.settings.poll_interval)
        if not place["state"]:
            raise PoolError(
                f"Slurm job {self.slurm_job} ended before its engines started (cancelled, or refused: see "
                f"`sacct -j {self.slurm_job}` or its output in the profile directory); run the cell again"
            )

    def _waiting(self, place):
        start = f"estimated start {place['start']}" if place["start"] else "no start estimate yet"
        why = "not looked at yet" if place["reason"] in ("None", "") else place["reason"]  # just submitted
        reason = f"Slurm job {self.slurm_job}: {why}, {start}"
        self.job.progress = {**self.job.progress, "queue_position": place["position"], "reason": reason}
        self.job.changed()
        if (place["position"], reason) != self._shown:
            self._shown = (place["position"], reason)
            print(
                f"[jupyter-dl] queued in Slurm for {self.n} ranks{' with GPUs' if self.gpus else ''}: position "
                f"{place['position']} ({reason}); interrupt the kernel to give up (scancel)",
                file=self.stderr,
                flush=True,
            )

    def _release(self):
        if self.set_id is None:
            return
        set_id, self.set_id = self.set_id, None
        for _ in range(3):
            try:
                self.cluster.release(set_id)  # scancel
                return
            except KeyboardInterrupt:  # a second Ctrl-C while stopping must not leave the allocation held
                continue
            except Exception as exc:
                print(
                    f"[jupyter-dl] could not cancel Slurm job {self.slurm_job} ({exc}); run `scancel {self.slurm_job}`",
                    file=self.stderr,
                )
                return


def node_gpus(attempts=3) -> int:
    """The most GPUs (gres gpu) one Slurm node has, 0 without any. sinfo failing (slurmctld busy, unreachable) is
    not "no GPUs": asked again, then PoolError with sinfo's own words."""
    for attempt in range(attempts):
        try:
            done = subprocess.run(["sinfo", "-h", "-N", "-o", "%G"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            why = str(exc)
        else:
            if done.returncode == 0:
                return max((_gpu_count(g) for g in done.stdout.split()), default=0)
            why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        if attempt + 1 < attempts:
            time.sleep(1)
    raise PoolError(f"sinfo failed ({why}): check that Slurm's controller answers (`sinfo`), then run the cell again")


def _gpu_count(gres: str) -> int:
    """GPUs in a gres string such as 'gpu:2', 'gpu:a100:4(S:0-1)' or 'gpu:0(IDX:N/A)'."""
    return sum(int(m) for m in re.findall(r"gpu(?::[A-Za-z0-9_.-]+)?:(\d+)", gres))


def _plain(value: str, name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.:,+-]+", value):
        raise UsageError(f"c.SlurmPool.{name} = {value!r}: use letters, digits and _.:,+- only")
    return value


def _run(argv) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
