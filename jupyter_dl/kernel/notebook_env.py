"""Environment variables the notebook set (`os.environ["X"] = ...` in a cell) go to the ranks with each job.

The engines started with the environment of their own launch; a variable an earlier cell sets (a switch of the
user's code, a library's setting or key) would be missing on the ranks, and the cell would behave differently than
in one process. What this kernel process changed since it started is sent, except the variables that place a rank
or make up the job (devices, Horovod's, TensorFlow's, MPI's and the schedulers' settings), those that name this
host's paths, and those the kernel itself sets for the notebook's display.

Kernel-side only. The ranks set these for the job's duration (runtime/rank.py), under the job's own variables.
"""

import os

# Names a rank gets from its placement or its job, or that belong to this host or to the kernel's display.
_KEPT_OUT_NAMES = {
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "TF_CONFIG",
    "PATH",
    "PWD",
    "OLDPWD",
    "HOME",
    "SHELL",
    "USER",
    "LOGNAME",
    "HOSTNAME",
    "TMPDIR",
    "VIRTUAL_ENV",
    "MPLBACKEND",
    "TERM",
    "CLICOLOR",
    "FORCE_COLOR",
    "PAGER",
    "GIT_PAGER",
}
_KEPT_OUT_PREFIXES = (
    "HOROVOD_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "SLURM_",
    "JPY_",
    "JUPYTER",
    "IPY",
    "LD_",
    "PYTHON",
    "CONDA_",
    "PYTEST_",
)


def _started_with() -> dict:
    """The environment this process started with (Linux reads it back from /proc; elsewhere, the one at import)."""
    try:
        with open("/proc/self/environ", "rb") as source:
            entries = source.read().split(b"\0")
    except OSError:
        return dict(os.environ)
    pairs = (entry.split(b"=", 1) for entry in entries if b"=" in entry)
    return {os.fsdecode(name): os.fsdecode(value) for name, value in pairs}


_AT_START = _started_with()


# Names that look like credentials stay in the kernel: sent, their values would reach the ranks' output and logs
# unredacted. `--secret NAME` sends one and redacts it everywhere (kernel/secrets.py).
_CREDENTIAL_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "ACCESS_KEY", "PRIVATE_KEY")


def changed() -> dict:
    """{name: value} of the variables the notebook set or changed that may go to the ranks."""
    return {name: value for name, value in os.environ.items() if _AT_START.get(name) != value and not _kept_out(name)}


def _kept_out(name: str) -> bool:
    upper = name.upper()
    return (
        name in _KEPT_OUT_NAMES
        or name.startswith(_KEPT_OUT_PREFIXES)
        or upper.endswith("_KEY")
        or any(word in upper for word in _CREDENTIAL_WORDS)
    )
