"""jupyter-dl: run an unchanged Keras cell as a Horovod job on an ipyparallel cluster, from a notebook."""
from ._version import __version__

__all__ = ["__version__", "distribute", "shutdown", "load_ipython_extension", "LiveMetrics"]


def LiveMetrics(*args, **kwargs):
    """Keras callback streaming metrics to the cell's live view; add it yourself in `--manual` cells."""
    from .runtime.live import LiveMetrics as _LiveMetrics

    return _LiveMetrics(*args, **kwargs)


def distribute(*args, **kwargs):
    from .api import distribute as _distribute

    return _distribute(*args, **kwargs)


distribute.__doc__ = "Run a function or a cell's code as a distributed job; see jupyter_dl.api.distribute."


def shutdown():
    from .api import shutdown as _shutdown

    _shutdown()


def load_ipython_extension(ipython):
    # Imports stay inside: `import jupyter_dl` must not pull in ipyparallel or TensorFlow.
    from .magics import DistributeMagics

    ipython.register_magics(DistributeMagics(ipython))


def _jupyter_server_extension_points():
    return [{"module": "jupyter_dl.server"}]


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-dl"}]
