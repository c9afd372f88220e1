"""Distributed backends: Horovod (horovod.py, the only module naming Horovod) and TensorFlow's own collectives
(tf.py). Each has a kernel half (`Rendezvous`: what every rank is told so they find each other) and an engine half
(`init`, `shutdown` and the collectives the Keras hooks use); `Backend` below is what both provide."""

import importlib
from typing import Protocol

NAMES = ("horovod", "tf")
AUTO = "auto"


class Rendezvous(Protocol):
    """Kernel half, one per job attempt: what every rank is told so that they find each other."""

    port: int | None  # a server in the kernel the ranks must reach (route.py checks they do), or None

    def environments(self, address: str, interfaces: list) -> list: ...
    def stop(self) -> None: ...


class Backend(Protocol):
    NAME: str
    SETUP_HINT: str
    RELEASED_FROM_SILENT_HOSTS: bool  # release_peers() can end waits on a host cut off (not only on a dead peer)
    COLLECTIVE_OPS: dict
    Rendezvous: type  # (hosts_by_rank, timeout_s, client, ids) -> a Rendezvous

    def check_installed(self) -> None: ...
    def preload(self) -> None: ...
    def init(self, environment: dict) -> bool: ...
    def shutdown(self, failed: bool = False) -> None: ...
    def release_peers(self, message: str) -> bool: ...
    def rank_and_size(self) -> tuple: ...
    def average_gradients(self, grads, weight=None, name="jdl_grads", timer=None) -> list: ...
    def broadcast_from_root(self, variables, root_rank=0) -> None: ...
    def allgather_object(self, obj, name=None) -> list: ...
    def broadcast_object(self, obj, root_rank=0, name=None): ...
    def average_scalars(self, values, name="jdl.metrics") -> list: ...
    def allreduce(self, value, op="average", name=None): ...
    def counting_collectives(self, on_call): ...
    def measure_allreduce(self, megabytes=8, repeats=5) -> tuple: ...


def named(name: str) -> Backend:
    if name not in NAMES:
        raise ValueError(f"unknown backend {name!r}; one of {', '.join(NAMES)}")
    return importlib.import_module(f"jupyter_dl.backends.{name}")  # type: ignore[return-value]


def resolve(requested: str, manual: bool) -> tuple:
    """(backend name, a line to tell the user or ''). `auto`: Horovod where it works, else TensorFlow's collectives
    for zero-code cells; a --manual cell calls Horovod's API itself, so it needs Horovod unless it asked for tf.
    Raises BackendMissing with what to do."""
    from jupyter_dl.errors import BackendMissing

    if requested != AUTO:
        named(requested).check_installed()
        return requested, ""
    horovod = named("horovod")
    try:
        horovod.check_installed()
        return "horovod", ""
    except BackendMissing as missing:
        if manual:
            raise BackendMissing(
                f"--manual cells call Horovod's own API: {missing}; or write the loop with jupyter_dl.collectives "
                "and run it with --backend tf"
            ) from None
        named("tf").check_installed()
        return "tf", (
            f"[jupyter-dl] Horovod is not installed: running on TensorFlow's own collectives (--backend tf); "
            f"{horovod.SETUP_HINT} to use Horovod"
        )
