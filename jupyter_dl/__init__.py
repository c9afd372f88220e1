"""jupyter-dl: run an unchanged Keras cell as a data-parallel job (Horovod, or TensorFlow's own collectives) on an
ipyparallel cluster, from a notebook."""

from typing import TYPE_CHECKING

from jupyter_dl._version import __version__

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ below imports them on first use
    from jupyter_dl.kernel.api import compare, distribute, load_job, shutdown
    from jupyter_dl.kernel.lr_finder import lr_find
    from jupyter_dl.runtime.elastic import elastic_epochs
    from jupyter_dl.runtime.metrics_callback import LiveMetrics

__all__ = [
    "LiveMetrics",
    "__version__",
    "compare",
    "distribute",
    "elastic_epochs",
    "load_ipython_extension",
    "load_job",
    "lr_find",
    "shutdown",
]


# The public functions and LiveMetrics, by the module that defines them. They are imported on first use (PEP 562):
# `import jupyter_dl` must not pull in ipyparallel, TensorFlow or Keras, and what comes back is the function itself,
# so help() and inspect.signature() show its real parameters and documentation.
_LAZY = {
    "distribute": "jupyter_dl.kernel.api",
    "load_job": "jupyter_dl.kernel.api",
    "compare": "jupyter_dl.kernel.api",
    "shutdown": "jupyter_dl.kernel.api",
    "lr_find": "jupyter_dl.kernel.lr_finder",
    "elastic_epochs": "jupyter_dl.runtime.elastic",  # a custom loop's commit points in an elastic job
    "LiveMetrics": "jupyter_dl.runtime.metrics_callback",  # the Keras callback class (Keras imports slowly)
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    # Not cached here: each access reads the defining module, so a patched function there is the one called.
    return getattr(importlib.import_module(module), name)


def __dir__():
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython):
    # Imports stay inside: `import jupyter_dl` must not pull in ipyparallel or TensorFlow.
    from jupyter_dl.kernel.tf_logs import quiet_kernel

    quiet_kernel(parent=ipython)  # first: TensorFlow reads its log level once, when it loads
    from jupyter_dl.kernel.magics import DistributeMagics
    from jupyter_dl.wire.keras_objects import record_constructor_arguments_when_keras_loads

    ipython.register_magics(DistributeMagics(ipython))
    from jupyter_dl.cli.doctor import load_hint  # file lookups only: one stderr line pointing to `jupyter-dl doctor`

    load_hint()
    # Subclassed models built in the notebook from here on can travel to the engines (see keras_objects).
    record_constructor_arguments_when_keras_loads()
    from jupyter_dl.kernel import api
    from jupyter_dl.kernel.start_on_load import start_on_load

    # Loaded from a cell: the cluster starts now, while the first %%distribute cell is typed (start_on_load.py).
    start_on_load(ipython, api.session(parent=ipython))


def _jupyter_server_extension_points():
    return [{"module": "jupyter_dl.server"}]


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-dl"}]
