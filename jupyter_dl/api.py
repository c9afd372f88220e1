"""The Python API: the same behaviour as the magics, for scripts and tests."""
import sys

from .cluster import ClusterManager
from .jobs import JobRegistry
from .launcher import CellWork, FunctionWork, Launcher
from .options import RunOptions


class Session:
    """One per process: the cluster in use, the launcher and the jobs run from here."""

    def __init__(self, parent=None):
        self.cluster = ClusterManager(parent=parent)
        self.jobs = JobRegistry()
        self.launcher = Launcher(self.cluster, self.jobs, parent=parent)


_session = None


def session(parent=None) -> Session:
    global _session
    if _session is None:
        _session = Session(parent)
    return _session


def distribute(fn_or_code, n=None, *, args=(), kwargs=None, namespace=None, name=None, timeout=None,
               output="rank0", lr_scale="linear", manual=False, backend="horovod", all_ranks=False):
    """Run `fn(*args, **kwargs)` (or a cell's code) as an n-rank Horovod job on the cluster.

    With a function: returns rank 0's return value, or every rank's in a list with all_ranks=True.
    With code (a str): runs it like `%%distribute`; names it binds come back into `namespace` (default: the
    notebook's), which is also where the variables it reads come from. Returns the RunResult.
    Zero-code-change Keras interception is on unless manual=True.
    """
    options = RunOptions(n=n, name=name, backend=backend, timeout=timeout, output=output, lr_scale=lr_scale,
                         manual=manual)
    launcher = session().launcher
    if isinstance(fn_or_code, str):
        if namespace is None:
            namespace = _notebook_namespace()
        result = launcher.run(CellWork(fn_or_code, namespace), options)
        bind_results(result, namespace)
        return result
    result = launcher.run(FunctionWork(fn_or_code, tuple(args), dict(kwargs or {}), all_ranks), options)
    return result.results if all_ranks else result.results[0]


def bind_results(result, namespace):
    """Put what rank 0 bound into the namespace; say which names could not come back."""
    namespace.update(result.values)
    for name, why in result.problems.items():
        print(f"[jupyter-dl] '{name}' stayed on the engines: it could not be sent back ({why})", file=sys.stderr)


def _notebook_namespace():
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython else None
    if shell is None:
        raise TypeError("pass namespace= when distributing code outside IPython")
    return shell.user_ns


def shutdown():
    """Stop the cluster this process started (connected clusters are only disconnected)."""
    if _session is not None:
        _session.cluster.stop()
