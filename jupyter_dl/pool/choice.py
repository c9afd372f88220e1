"""Kernel side: which GPU pool a job takes its GPUs from, and the lease that holds them while it runs.

Slurm when the pool is delegated to it (c.SlurmPool.enabled: each job's ranks are one Slurm allocation), else the
pool service when one is configured (shared JupyterHub), else the embedded pool this user's kernels share when jobs
run on this host's own GPU engines, else none (CPU engines, or the embedded pool turned off)."""

import contextlib

from jupyter_dl.errors import UsageError
from jupyter_dl.pool.local import LocalPool
from jupyter_dl.pool.slurm import SlurmLease, SlurmPool


class PoolChoice:
    def __init__(self, url: str, use_local_pool: bool, cluster, local_pool: LocalPool):
        self.url = url
        self.use_local_pool = use_local_pool
        self.cluster = cluster
        self.local_pool = local_pool
        self.slurm = SlurmPool(parent=cluster)  # c.SlurmPool.*, from the same config as the cluster's

    def active(self):
        """(pool, description), or (None, "") when jobs take no pool's GPUs."""
        if self.slurm.enabled:
            return self.slurm, "delegated to Slurm (squeue shows its queue)"
        if self.url:
            from jupyter_dl.pool.client import PoolClient

            return PoolClient(self.url), f"service {self.url}"
        if self.use_local_pool and self.cluster.local and self.local_pool.active:
            return self.local_pool, f"embedded ({self.local_pool.path()})"
        return None, ""

    def lease(self, job, n, stderr, kind=None, min_n=None):
        """The job's GPUs, one per rank, held for as long as it runs; nothing to hold without a pool. With `min_n`
        the job is elastic: it starts on `min_n` and the lease follows its GPUs between `min_n` and `n`."""
        from jupyter_dl.pool.lease import PoolLease

        pool, _ = self.active()
        if pool is self.slurm:  # the allocation is the engines: a CPU job needs one too, without GPUs
            if min_n is not None:
                raise UsageError("elastic jobs (-n MIN:MAX) do not run through the Slurm pool; give -n one number")
            return SlurmLease(self.cluster, self.slurm, n, job, stderr, gpus=kind != "cpu")
        if pool is None or kind == "cpu":  # a plan for CPU ranks needs no GPU
            return contextlib.nullcontext()
        if pool is not self.local_pool:
            owner = job.kernel_id or f"{job.kernel_host}:{job.kernel_pid}"
            return PoolLease(pool, n, job, owner, stderr, min_gpus=min_n)
        return PoolLease(pool, n, job, pool.owner, stderr, allowed=self._engine_gpus(n, kind), min_gpus=min_n)

    def _engine_gpus(self, n, kind):
        """(host, GPU) pairs this kernel's engines are pinned to, of the plan's kind when a recommendation chose one:
        an embedded-pool grant must be among them."""
        if self.cluster.client is None:
            self.cluster.ensure(n)  # the engines first
        ids = self.cluster.engine_ids()
        kinds = self.cluster.kinds(ids) if kind else [None] * len(ids)
        return [
            (info["hostname"], int(info["gpu"]))
            for info, engine_kind in zip(self.cluster.describe(ids), kinds)
            if info.get("gpu") and engine_kind in (kind, None)
        ]

    def status(self) -> str:
        """One line on the GPU pool jobs started here use, or '' when none."""
        pool, description = self.active()
        if pool is None:
            return ""
        try:
            summary = pool.summary()
        except Exception as exc:  # a status line must not fail because the pool service is down
            return f"GPU pool, {description}: not reachable ({exc})"
        queued = summary["queued"]
        return (
            f"GPU pool, {description}: {summary['free']} of {summary['gpus']} GPUs free, "
            f"{queued} job{'s' if queued != 1 else ''} queued"
        )
