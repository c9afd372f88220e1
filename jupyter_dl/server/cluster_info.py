"""Cluster and GPU facts for the panel: ipyparallel's cluster files (what jupyter-dl kernels started or
connected to) and nvidia-smi's utilisation readings."""
import os
import shutil
import subprocess


def clusters():
    try:
        import ipyparallel as ipp
    except ImportError:
        return []
    out = []
    manager = ipp.ClusterManager()
    try:
        found = manager.load_clusters()
    except Exception:  # unreadable profile dirs must not break the panel
        return []
    for key, cluster in found.items():
        if not _controller_alive(cluster.controller):
            continue  # a cluster file left behind by a process that was killed
        engines = sum(getattr(es, "n", 0) or 0 for es in (cluster.engines or {}).values())
        out.append({"cluster_id": cluster.cluster_id, "profile": cluster.profile, "engines": engines,
                    "running": True})
    return out


def _controller_alive(controller) -> bool:
    """Cluster files say 'running' until someone stops the cluster; a local controller's pid tells the truth."""
    if controller is None or not controller.running:
        return False
    pid = getattr(controller, "pid", None)
    if not pid or type(controller).__name__ != "LocalControllerLauncher":
        return True  # remote launchers (Slurm, SSH, MPI): trust the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gpu_stats():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        text = subprocess.run([smi, "--query-gpu=index,name,utilization.gpu,memory.used,memory.total",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in text.strip().splitlines():
        index, name, util, used, total = [part.strip() for part in line.split(",")]
        gpus.append({"index": int(index), "name": name, "utilization": float(util),
                     "memory_used_mb": float(used), "memory_total_mb": float(total)})
    return gpus
