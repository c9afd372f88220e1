"""Cluster and GPU facts for the panel: ipyparallel's cluster files (what jupyter-dl kernels started or
connected to) and nvidia-smi's utilisation readings.

The cluster files are read as JSON, not loaded as ipyparallel `Cluster` objects: loading one starts watchers of
its processes on the server's event loop, once per poll, which outlived the cluster when a kernel stopped it."""

import glob
import json
import os
import re
import socket

from jupyter_dl.host.gpus import stats as gpu_stats  # noqa: F401  (the REST cluster view's GPU readings)
from jupyter_dl.host.processes import pid_running

# Clusters a jupyter-dl kernel starts are named after the kernel's pid (cluster/engines.py): jupyter-dl-<pid>-<n>.
OWNER_PID = re.compile(r"^jupyter-dl-(\d+)-\d+$")


def cluster_files():
    """Every ipyparallel cluster file in every IPython profile of this user."""
    from IPython.paths import get_ipython_dir

    return sorted(glob.glob(os.path.join(get_ipython_dir(), "profile_*", "security", "cluster-*.json")))


def clusters():
    """The running clusters: id, profile, engines (and how many on each host), the kernel pid that started it."""
    out = []
    for path in cluster_files():
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue  # being written or removed right now
        controller = data.get("controller") or {}
        if not _controller_alive(controller):
            continue  # a cluster file left behind by a process that was killed
        info = data.get("cluster") or {}
        cluster_id = info.get("cluster_id", "")
        by_host = engines_by_host(data.get("engines") or {})
        owner = OWNER_PID.match(cluster_id)
        out.append(
            {
                "cluster_id": cluster_id,
                "profile": _profile_name(info.get("profile_dir", "")),
                "engines": sum(by_host.values()),
                "engines_by_host": by_host,
                "running": True,
                "owner_pid": int(owner.group(1)) if owner else None,
                "cluster_file": path,
            }
        )
    return out


def engines_by_host(engines: dict) -> dict:
    """{host: engine count} of the running engine sets. Local engines run on this host; launchers that record a
    host per engine (ssh) are grouped by it; a scheduler's (slurm, pbs, ...) are under '<launcher> allocation'."""
    kind = engines.get("class", "")
    local = kind == "local" or kind.endswith("LocalEngineSetLauncher")
    here = socket.gethostname()
    counts: dict = {}
    for engine_set in (engines.get("sets") or {}).values():
        if engine_set.get("state") != "running":
            continue
        members = engine_set.get("engines") or {}
        if isinstance(members, dict) and members:
            for member in members.values():
                if member.get("state", "running") != "running":
                    continue
                host = member.get("hostname") or (here if local else f"{_short(kind)} allocation")
                counts[host] = counts.get(host, 0) + (member.get("n") or 1)
        else:
            host = here if local else f"{_short(kind)} allocation"
            counts[host] = counts.get(host, 0) + (engine_set.get("n") or 0)
    return counts


def _short(launcher_class: str) -> str:
    name = launcher_class.rsplit(".", 1)[-1]
    return name.removesuffix("EngineSetLauncher").lower() or "scheduler"


def _profile_name(profile_dir: str) -> str:
    return os.path.basename(profile_dir.rstrip(os.sep)).removeprefix("profile_") if profile_dir else ""


def _controller_alive(controller: dict) -> bool:
    """Cluster files say 'running' until someone stops the cluster; a local controller's pid tells the truth."""
    state = controller.get("state") or {}
    if state.get("state") != "running":
        return False
    kind = controller.get("class", "")
    pid = state.get("pid")
    if not pid or not (kind == "local" or kind.endswith("LocalControllerLauncher")):
        return True  # remote launchers (Slurm, SSH, MPI): trust the file
    return pid_alive(pid)


def pid_alive(pid: int) -> bool:
    return pid_running(pid)
