"""Counting a backend's eager collective calls, for the stall watch: a new call is progress."""

import contextlib


@contextlib.contextmanager
def counting_calls(owner, names, on_call):
    """Call `on_call()` before each call of `owner.<name>` for every name it has, for the duration."""
    originals = {name: getattr(owner, name) for name in names if hasattr(owner, name)}

    def counted(fn):
        def call(*args, **kwargs):
            on_call()
            return fn(*args, **kwargs)

        return call

    for name, fn in originals.items():
        setattr(owner, name, counted(fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(owner, name, fn)
