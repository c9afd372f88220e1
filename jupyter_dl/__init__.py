"""jupyter-dl: run an unchanged Keras cell as a Horovod job on an ipyparallel cluster, from a notebook."""

from jupyter_dl._version import __version__

__all__ = [
    "LiveMetrics",
    "__version__",
    "compare",
    "distribute",
    "load_ipython_extension",
    "load_job",
    "lr_find",
    "shutdown",
]


def __getattr__(name):
    # jupyter_dl.LiveMetrics is the Keras callback class itself, imported on first use (Keras imports slowly).
    if name == "LiveMetrics":
        from jupyter_dl.runtime.metrics_callback import LiveMetrics

        return LiveMetrics
    raise AttributeError(name)


def distribute(*args, **kwargs):
    from jupyter_dl.kernel.api import distribute as _distribute

    return _distribute(*args, **kwargs)


distribute.__doc__ = "Run a function or a cell's code as a distributed job; see jupyter_dl.kernel.api.distribute."


def lr_find(*args, **kwargs):
    from jupyter_dl.kernel.lr_finder import lr_find as _lr_find

    return _lr_find(*args, **kwargs)


lr_find.__doc__ = "Learning-rate range test on a compiled Keras model; see jupyter_dl.kernel.lr_finder.lr_find."


def load_job(job_id):
    from jupyter_dl.kernel.api import load_job as _load_job

    return _load_job(job_id)


load_job.__doc__ = (
    "A finished job's kept models, histories, source, options and environment; see jupyter_dl.kernel.api."
)


def compare(ids, x="step"):
    from jupyter_dl.kernel.api import compare as _compare

    return _compare(ids, x)


compare.__doc__ = "Runs side by side: their curves and a table of what differs; see jupyter_dl.kernel.api.compare."


def shutdown():
    from jupyter_dl.kernel.api import shutdown as _shutdown

    _shutdown()


def load_ipython_extension(ipython):
    # Imports stay inside: `import jupyter_dl` must not pull in ipyparallel or TensorFlow.
    from jupyter_dl.kernel.magics import DistributeMagics
    from jupyter_dl.wire.keras_objects import record_constructor_arguments_when_keras_loads

    ipython.register_magics(DistributeMagics(ipython))
    from jupyter_dl.cli.doctor import load_hint  # file lookups only: one stderr line pointing to `jupyter-dl doctor`

    load_hint()
    # Subclassed models built in the notebook from here on can travel to the engines (see keras_objects).
    record_constructor_arguments_when_keras_loads()


def _jupyter_server_extension_points():
    return [{"module": "jupyter_dl.server"}]


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-dl"}]
