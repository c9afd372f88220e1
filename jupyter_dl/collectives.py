"""Collectives for hand-written (`--manual`) loops that run on either backend: Horovod's or TensorFlow's own.

Inside a `%%distribute --manual` cell (or a function given to `jupyter_dl.distribute(..., manual=True)`):

    from jupyter_dl import collectives
    collectives.rank(), collectives.size()
    grads = [collectives.allreduce(g) for g in grads]          # average (op="sum", "min", "max")
    weights = collectives.broadcast(weights, root=0)            # root's value on every rank
    everyone = collectives.allgather({"rank": collectives.rank()})  # every rank's object, in rank order
    collectives.barrier()

Values may be numbers, NumPy arrays or tensors (allreduce), or any picklable object (broadcast, allgather). For
gradients inside a compiled train step, zero-code mode (no --manual) averages them for you.
"""

from jupyter_dl.runtime.job_backend import backend, call_number

__all__ = ["allgather", "allreduce", "barrier", "broadcast", "rank", "size"]


def rank() -> int:
    """This rank's number, 0 to size() - 1."""
    return backend().rank_and_size()[0]


def size() -> int:
    """How many ranks the job has."""
    return backend().rank_and_size()[1]


def allreduce(value, op: str = "average"):
    """`value` reduced over every rank (op: average, sum, min or max), as a NumPy array of its shape."""
    if op not in ("average", "sum", "min", "max"):
        raise ValueError(f"op must be average, sum, min or max (got {op!r})")
    return backend().allreduce(value, op=op, name=f"jdl.user.allreduce.{call_number('allreduce')}")


def broadcast(value, root: int = 0):
    """Rank `root`'s value on every rank (any picklable value; what the others pass is ignored)."""
    return backend().broadcast_object(value, root_rank=root, name=f"jdl.user.broadcast.{call_number('broadcast')}")


def allgather(value) -> list:
    """Every rank's value, in rank order, on every rank (any picklable value)."""
    return backend().allgather_object(value, name=f"jdl.user.allgather.{call_number('allgather')}")


def barrier() -> None:
    """Return once every rank has called barrier()."""
    allreduce(0.0, op="sum")
