"""Keras' downloads in a distributed cell, one writer per file.

A cell that starts with `keras.datasets.mnist.load_data()` (or the flowers tutorial's
`get_file('flower_photos', origin=url, untar=True)`) runs on every rank at once, and every rank would write the same
cache file: a rank that finds a half-written file re-downloads over it (with a hash) or reads it truncated (without
one). So rank 0 fetches first; then the first rank of each other host, for a host that does not share rank 0's
disk; then the rest, which find the file in their cache. A failed download fails every rank, in one line each."""

import socket
import sys

from jupyter_dl.runtime.job_backend import backend


def get_file_patches(next_call):
    """(module, "get_file", guarded) for every module attribute that is Keras' get_file (`keras.utils.get_file`,
    tf.keras', and the names each `keras.datasets` module imported it by). next_call(): this cell's next call
    number, the same on every rank (each rank runs the same cell)."""
    from keras.src.utils import file_utils

    original = file_utils.get_file

    def get_file(*args, **kwargs):
        return _in_turns(lambda: original(*args, **kwargs), next_call())

    found = []
    for module_name, module in list(sys.modules.items()):
        if module is not None and module_name.startswith(("keras", "tensorflow", "tf_keras")):
            if getattr(module, "__dict__", {}).get("get_file") is original:
                found.append((module, "get_file", get_file))
    return found


def _in_turns(fetch, call):
    rank, size = backend().rank_and_size()
    if size == 1:
        return fetch()
    hosts = backend().allgather_object(socket.gethostname(), name=f"jdl.download.{call}.hosts")
    first_of_host = hosts.index(hosts[rank]) == rank
    turn = 0 if rank == 0 else 1 if first_of_host and hosts[rank] != hosts[0] else 2
    result = error = None
    for this_turn in range(3):
        if turn == this_turn:
            try:
                result = fetch()
            except Exception as exc:
                error = exc
        failures = backend().allgather_object(
            None if turn != this_turn or error is None else f"{type(error).__name__}: {error}",
            name=f"jdl.download.{call}.{this_turn}",
        )
        if error is not None:
            raise error
        failed = next(((r, why) for r, why in enumerate(failures) if why), None)
        if failed is not None:
            raise RuntimeError(f"rank {failed[0]} could not download the file: {failed[1]}")
    return result
