"""GPU discovery on this host. Without nvidia-smi (or with no GPU) the answer is an empty list and ranks run on CPU."""

import functools
import shutil
import subprocess

from .errors import UsageError


def _query(field: str) -> list:
    """One nvidia-smi column, a line per GPU in index order; [] without nvidia-smi or GPUs."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


@functools.lru_cache(maxsize=1)
def discover() -> list:
    """Indices of the GPUs nvidia-smi lists, e.g. [0, 1]."""
    return [int(index) for index in _query("index") if index.isdigit()]


@functools.lru_cache(maxsize=1)
def names() -> list:
    """Model names of this host's GPUs in index order (what TensorFlow reports as device_name too)."""
    return _query("name")


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
