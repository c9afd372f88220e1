"""Kernel side: rank counts a cluster cannot run, refused before anything starts."""

import os

from jupyter_dl.errors import UsageError
from jupyter_dl.host import gpus

BIGGER_CLUSTER = "connect a bigger cluster (%dl_cluster connect --profile P, or %dl_cluster start --engines slurm)"


def counted(n, noun) -> str:
    """'1 engine', '2 engines'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def cpu_rank_limit(max_cpu_ranks: int) -> int:
    """Most ranks the local cluster runs without GPUs: max_cpu_ranks (c.EngineCluster), 0 meaning twice the cores."""
    return max_cpu_ranks or 2 * (os.cpu_count() or 1)


def check_cpu_ranks(n: int, max_cpu_ranks: int):
    limit = cpu_rank_limit(max_cpu_ranks)
    if n > limit:
        raise UsageError(
            f"{n} ranks is more than this machine can run: without GPUs the local cluster takes at "
            f"most {limit} ranks on {os.cpu_count()} CPU cores (c.EngineCluster.max_cpu_ranks); "
            f"use -n {limit} or fewer, or {BIGGER_CLUSTER}"
        )


def check_local(n: int, max_cpu_ranks: int):
    """One rank per GPU on a host with GPUs; without, at most cpu_rank_limit ranks."""
    gpu_count = len(gpus.discover())
    if gpu_count and n > gpu_count:
        raise UsageError(
            f"{n} ranks requested but this host has {counted(gpu_count, 'GPU')} (one rank per GPU); use -n "
            f"{gpu_count} or fewer, or {BIGGER_CLUSTER}"
        )
    if not gpu_count:
        check_cpu_ranks(n, max_cpu_ranks)


def check_connected(n: int, have: int):
    """A connected cluster is someone else's: it is not grown here."""
    if n > have:
        raise UsageError(
            f"{n} ranks requested but the connected cluster has {counted(have, 'engine')}; use -n {have} "
            f"or add engines to the cluster"
        )


def check_new_cluster(n: int, launcher: str, devices: list, gpu_spec: str, max_cpu_ranks: int):
    """A cluster about to start with n engines: local ones on the selected GPUs (`devices`) or on the CPU."""
    if n < 1:
        raise UsageError(f"-n must be at least 1 (got {n})")
    if launcher == "local" and not devices:
        check_cpu_ranks(n, max_cpu_ranks)
    if devices and n > len(devices):
        raise UsageError(
            f"{n} engines requested but only {len(devices)} GPUs selected ({gpu_spec}); lower -n or widen --gpus"
        )
