"""Engine side: callbacks that act every so many batches (ModelCheckpoint's and BackupAndRestore's integer
`save_freq`, written as `save_freq=5 * n_batches` in TensorFlow's save-and-load tutorial) count one process's
batches. Each of N ranks runs 1/N of them, so while the cell's fit runs they count in this rank's batches."""

import contextlib

_COUNTING = ("ModelCheckpoint", "BackupAndRestore")


@contextlib.contextmanager
def in_one_process_batches(callbacks, size: int):
    """Divide the integer `save_freq` of the cell's saving callbacks by the rank count for the fit, then put it
    back, so the notebook's callback keeps the value the cell gave it."""
    changed = []
    for cb in callbacks:
        freq = getattr(cb, "save_freq", None)
        counting = any(klass.__name__ in _COUNTING for klass in type(cb).__mro__)
        if size > 1 and counting and isinstance(freq, int) and not isinstance(freq, bool):
            cb.save_freq = max(1, -(-freq // size))  # rounded up: never more often than one process saves
            changed.append((cb, freq))
    try:
        yield
    finally:
        for cb, freq in changed:
            cb.save_freq = freq
