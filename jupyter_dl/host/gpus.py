"""GPU discovery on this host. Without nvidia-smi (or with no GPU) the answer is an empty list and ranks run on CPU."""

import functools
import shutil
import subprocess

from jupyter_dl.errors import UsageError


def query(*fields: str, timeout: float = 10) -> list:
    """nvidia-smi's readings of `fields` (--query-gpu names), a list of strings per GPU in index order, without
    units; [] without nvidia-smi or GPUs, or when it does not answer within `timeout` seconds."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    return [row for row in rows if len(row) == len(fields)]


def stats() -> list:
    """Each GPU's index, name, utilisation (%) and memory (MB) now, for the panel's cluster view."""
    return [
        {
            "index": int(index),
            "name": name,
            "utilization": float(util),
            "memory_used_mb": float(used),
            "memory_total_mb": float(total),
        }
        for index, name, util, used, total in query(
            "index", "name", "utilization.gpu", "memory.used", "memory.total", timeout=5
        )
    ]


@functools.lru_cache(maxsize=1)
def discover() -> list:
    """Indices of the GPUs nvidia-smi lists, e.g. [0, 1]."""
    return [int(row[0]) for row in query("index") if row[0].isdigit()]


@functools.lru_cache(maxsize=1)
def names() -> list:
    """Model names of this host's GPUs in index order (what TensorFlow reports as device_name too)."""
    return [row[0] for row in query("name")]


def select(spec: str | None) -> list:
    """Parse --gpus: 'all', or a comma list of indices that must exist."""
    found = discover()
    if spec in (None, "", "all"):
        return found
    try:
        wanted = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--gpus takes 'all' or indices like 0,1 (got {spec!r})") from None
    missing = [g for g in wanted if g not in found]
    if missing:
        raise UsageError(f"GPU(s) {missing} not found; this host has {found or 'no GPUs'}")
    return wanted
