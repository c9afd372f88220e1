"""The Python API: the same behaviour as the magics, for scripts and tests."""
import sys

from traitlets import Enum
from traitlets.config import Configurable

from .cluster import ClusterManager
from .jobs import JobRegistry
from .jobs.store import JobStore
from .launcher import CellWork, FunctionWork, Launcher
from .live import summary as summary_mod
from .options import RunOptions


class LiveViewSettings(Configurable):
    theme = Enum(["auto", "light", "dark"], "auto",
                 help="Figure theme: 'auto' follows the theme chosen in JupyterLab's settings.").tag(config=True)


class Session:
    """One per process: the cluster in use, the launcher, the jobs run from here and the job store."""

    def __init__(self, parent=None):
        self.cluster = ClusterManager(parent=parent)
        self.store = JobStore(parent=parent)
        self.jobs = JobRegistry(self.store)
        self.launcher = Launcher(self.cluster, self.jobs, parent=parent)
        self.view_settings = LiveViewSettings(parent=parent)
        self.baselines = {}  # work key -> samples/s of its last single-rank run, for scaling efficiency

    def run(self, work, options, key, show_view):
        """Run with a live view in the cell (when wanted) and remember single-rank throughput."""
        from .live.theme import template_for
        from .live.view import LiveView

        observers = []
        view = None
        if show_view:
            view = LiveView(template_for(self.view_settings.theme), show_plot=options.plot,
                            baseline_sps=self.baselines.get(key))
            observers.append(view)
        result = self.launcher.run(work, options, observers=observers)
        result.view = view
        if result.job.n == 1:
            single = summary_mod.summarize(result.job, result.state)["samples_per_s"]
            if single:
                self.baselines[key] = single
        return result


_session = None


def session(parent=None) -> Session:
    global _session
    if _session is None:
        _session = Session(parent)
    return _session


def distribute(fn_or_code, n=None, *, args=(), kwargs=None, namespace=None, name=None, timeout=None,
               output="rank0", lr_scale="linear", manual=False, backend="horovod", all_ranks=False, plot=None,
               stream_metrics=True, secrets=(), stall_timeout=None, restarts=0, checkpoint_dir=None):
    """Run `fn(*args, **kwargs)` (or a cell's code) as an n-rank Horovod job on the cluster.

    With a function: returns rank 0's return value, or every rank's in a list with all_ranks=True.
    With code (a str): runs it like `%%distribute`; names it binds come back into `namespace` (default: the
    notebook's), which is also where the variables it reads come from. Returns the RunResult.
    Zero-code-change Keras interception is on unless manual=True. plot: show the live view and summary (default:
    when running in a notebook kernel). stream_metrics=False stops engine-side metric streaming (to measure it).
    stall_timeout: seconds one rank may wait in a collective the others never enter (default: the Launcher's).
    restarts, checkpoint_dir: restart a failed job up to `restarts` times, resuming each Keras fit from the
    checkpoint rank 0 saves in checkpoint_dir every epoch.
    """
    in_kernel = _in_kernel()
    options = RunOptions(n=n, name=name, backend=backend, timeout=timeout, output=output, lr_scale=lr_scale,
                         manual=manual, plot=in_kernel if plot is None else plot, stream_metrics=stream_metrics,
                         secrets=tuple(secrets), stall_timeout=stall_timeout, restarts=restarts,
                         checkpoint_dir=checkpoint_dir)
    current = session()
    show_view = in_kernel or bool(plot)
    key = summary_mod.work_key(fn_or_code)
    if isinstance(fn_or_code, str):
        if namespace is None:
            namespace = _notebook_namespace()
        result = current.run(CellWork(fn_or_code, namespace), options, key, show_view)
        bind_results(result, namespace)
        return result
    result = current.run(FunctionWork(fn_or_code, tuple(args), dict(kwargs or {}), all_ranks), options, key,
                         show_view)
    return result.results if all_ranks else result.results[0]


def bind_results(result, namespace):
    """Put what rank 0 bound into the namespace; say which names could not come back."""
    namespace.update(result.values)
    for name, why in result.problems.items():
        print(f"[jupyter-dl] '{name}' stayed on the engines: it could not be sent back ({why})", file=sys.stderr)


def _in_kernel() -> bool:
    """True inside a Jupyter kernel, where widgets and rich output can be shown."""
    if "ipykernel" not in sys.modules:
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


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
