"""Where jupyter-dl keeps what it can reuse across kernels on this machine (built wheels, checks that passed)."""

import os


def cache_dir() -> str:
    """$JUPYTER_DL_CACHE, else ~/.cache/jupyter-dl."""
    return os.environ.get("JUPYTER_DL_CACHE") or os.path.expanduser("~/.cache/jupyter-dl")
