"""Kernel side: starting the engine sets of a cluster started here, and which GPUs replacements of dead engines take.

Local engines on GPUs start one set per GPU: CUDA_VISIBLE_DEVICES must be set before TensorFlow starts in the
engine. Other launchers (a scheduler, SSH) start each set as one job, so all of a set's engines are allocated at once.
"""

import os

from jupyter_dl.cluster import ssh_engines
from jupyter_dl.host import gpus


def start_on_gpu(cluster, gpu: int, environment: dict):
    """One local engine pinned to `gpu`; returns its engine set id."""
    # Memory growth on: TensorFlow would otherwise take the whole GPU at its first op.
    env = {**environment, "CUDA_VISIBLE_DEVICES": str(gpu), "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    return cluster.start_engines_sync(1, environment=env)


def start_set(cluster, launcher: str, n: int, environment: dict, index: int, engine_cmd=None):
    """n engines as one set, the cluster's `index`th: local CPU engines, or the launcher's; returns the set id.
    `engine_cmd`, for local engines: what starts each one instead of ipyparallel's default (a fork server's)."""
    if launcher != "local":
        return cluster.start_engines_sync(
            n, environment=dict(environment), **_launcher_options(cluster, launcher, index)
        )
    options = {"engine_cmd": list(engine_cmd)} if engine_cmd else {}
    return cluster.start_engines_sync(n, environment=cpu_environment(environment), **options)


def cpu_environment(environment: dict) -> dict:
    """Local CPU engines' environment: on a host with GPUs they keep off them."""
    return {**environment, "CUDA_VISIBLE_DEVICES": ""} if gpus.discover() else dict(environment)


def _launcher_options(cluster, launcher: str, index: int) -> dict:
    extra = ssh_engines.engine_options(cluster.config) if launcher == "ssh" else {}
    if hasattr(cluster.engine_launcher_class, "batch_file_name"):
        # A scheduler's batch script goes with the cluster's files, not into the notebook's folder.
        extra["batch_file_name"] = os.path.join(cluster.profile_dir, f"{cluster.cluster_id}-engines-{index}.sbatch")
    return extra


def gpus_to_refill(lost_gpus: list, pinned: list[int], held: set[int]) -> list[int]:
    """The GPUs to start replacements on, so the cluster keeps one engine per GPU: each dead engine's own (`lost_gpus`,
    None for one that died before it described itself); failing that, the `pinned` GPUs no live engine is known
    to hold. Empty on a cluster without GPUs."""
    if not pinned:
        return []
    if all(g is not None for g in lost_gpus):
        return [int(g) for g in lost_gpus]
    return [g for g in pinned if g not in held][: len(lost_gpus)]
