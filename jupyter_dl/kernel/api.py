"""The Python API: the same behaviour as the magics, for scripts and tests."""

import inspect
import sys

from traitlets import Enum
from traitlets.config import Configurable

from jupyter_dl.cluster.engines import EngineCluster
from jupyter_dl.jobs import JobRegistry
from jupyter_dl.jobs.store import JobStore
from jupyter_dl.kernel.job.observer import JobObserver
from jupyter_dl.kernel.job.runner import JobRunner
from jupyter_dl.kernel.job.work import CellWork, FunctionWork
from jupyter_dl.kernel.options import options_from_python, python_doc, python_parameters
from jupyter_dl.live import summary as summary_mod
from jupyter_dl.wire.options import parse_duration
from jupyter_dl.wire.spec import OUT_NAME


class LiveViewSettings(Configurable):
    theme = Enum(
        ["auto", "light", "dark"],
        "auto",
        help="Figure theme: 'auto' follows the theme chosen in JupyterLab's settings.",
    ).tag(config=True)


class Session:
    """One per process: the cluster in use, the job runner, the jobs run from here and the job store."""

    def __init__(self, parent=None):
        self.cluster = EngineCluster(parent=parent)
        self.store = JobStore(parent=parent)
        self.jobs = JobRegistry(self.store)
        self.runner = JobRunner(self.cluster, self.jobs, parent=parent)
        self.view_settings = LiveViewSettings(parent=parent)
        self.baselines = {}  # work key -> samples/s of its last single-rank run, for scaling efficiency
        self._advisor = None
        self._parent = parent

    @property
    def advisor(self):
        if self._advisor is None:
            from jupyter_dl.recommend.advisor import Advisor

            self._advisor = Advisor(self, parent=self._parent)
        return self._advisor

    def run(self, work, options, key, show_view: bool):
        """Run with a live view in the cell (when wanted) and remember single-rank throughput. With --recommend
        (or -n auto) the cell is probed first and runs with the recommended plan."""
        from jupyter_dl.live.theme import template_for
        from jupyter_dl.live.view import LiveView

        options.validate()
        if options.recommend:
            return self._run_recommended(work, options, key, show_view)

        observers: list[JobObserver] = []
        view = None
        if show_view:
            view = LiveView(
                template_for(self.view_settings.theme), show_plot=options.plot, baseline_sps=self.baselines.get(key)
            )
            observers.append(view)
        result = self.runner.run(work, options, observers=observers)
        result.view = view
        if result.job.n == 1:
            single = summary_mod.summarize(result.job, result.state)["samples_per_s"]
            if single:
                self.baselines[key] = single
        return result

    def _run_recommended(self, work, options, key, show_view):
        import dataclasses

        from jupyter_dl.errors import UsageError
        from jupyter_dl.recommend.planner import Workload
        from jupyter_dl.wire.lr_scale import lr_scale_factor

        if not isinstance(work, CellWork):
            raise UsageError(
                "--recommend sizes a %%distribute cell (or distribute(code)); for a function, use "
                "%dl_recommend MODEL --data X,Y"
            )
        probe_options = dataclasses.replace(
            options,
            n=1,
            recommend=False,
            deadline=None,
            probe=True,
            plot=False,
            restarts=0,
            checkpoint_dir=None,
            name=f"{options.name or 'cell'}-probe",
        )
        measured = self.runner.run(work, probe_options).probe
        if measured is None:
            raise UsageError("--recommend: the cell ended without calling model.fit(x, y); there is nothing to size")
        workload = Workload(
            measured["features"],
            measured["samples"],
            measured["epochs"],
            measured["batch_size"],
            measured["learning_rate"],
            measured["optimizer_slots"],
        )
        recommendation = self.advisor.recommend(workload, options.deadline, probe=measured)
        show(recommendation)
        plan = recommendation.chosen
        multiplier = plan.batch_size / workload.batch_size
        planned = dataclasses.replace(
            options,
            n=plan.ranks,
            recommend=False,
            deadline=None,
            device_kind=plan.kind,
            batch_size=plan.batch_size if multiplier != 1 else None,
            lr_multiplier=lr_scale_factor(options.lr_scale, multiplier),
        )
        result = self.run(work, planned, key, show_view)
        result.recommendation = recommendation
        return result


_session = None


def session(parent=None) -> Session:
    global _session
    if _session is None:
        _session = Session(parent)
    return _session


def distribute(fn_or_code, n=None, *, args=(), kwargs=None, namespace=None, all_ranks=False, **options):
    in_kernel = _in_kernel()
    plot = options.get("plot")
    options = options_from_python({**options, "n": n, "plot": in_kernel if plot is None else plot})
    current = session()
    show_view = in_kernel or bool(plot)
    key = summary_mod.work_key(fn_or_code)
    if isinstance(fn_or_code, str):
        if namespace is None:
            namespace = _notebook_namespace()
        result = current.run(CellWork(fn_or_code, namespace), options, key, show_view)
        bind_results(result, namespace)
        return result
    result = current.run(FunctionWork(fn_or_code, tuple(args), dict(kwargs or {}), all_ranks), options, key, show_view)
    return result.results if all_ranks else result.results[0]


distribute.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter("fn_or_code", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("n", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        inspect.Parameter("args", inspect.Parameter.KEYWORD_ONLY, default=()),
        inspect.Parameter("kwargs", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("namespace", inspect.Parameter.KEYWORD_ONLY, default=None),
        inspect.Parameter("all_ranks", inspect.Parameter.KEYWORD_ONLY, default=False),
        *python_parameters(),
    ]
)
distribute.__doc__ = f"""Run `fn(*args, **kwargs)` (or a cell's code) as an n-rank job on the cluster.

With a function: returns rank 0's return value, or every rank's in a list with all_ranks=True.
With code (a str): runs it like `%%distribute`; names it binds come back into `namespace` (default: the
notebook's), which is also where the variables it reads come from. Returns the RunResult.

{python_doc()}
"""


def _seconds(deadline):
    return parse_duration(deadline) if isinstance(deadline, str) else deadline


def recommend(model, x, y, *, epochs=1, batch_size=32, deadline=None, probe=True):
    """The recommendation table for training `model` (compiled, built) on (x, y): devices, ranks, per-rank batch,
    learning rate, predicted time and energy, and the alternatives. probe=False skips the engine probe."""
    from jupyter_dl.recommend.planner import Workload
    from jupyter_dl.wire.model_features import model_features, optimizer_facts

    current = session()
    learning_rate, slots = optimizer_facts(model)
    workload = Workload(model_features(model).as_dict(), len(x), epochs, batch_size, learning_rate, slots)
    measured = current.advisor.probe_model(model, x, y, batch_size) if probe else None
    return current.advisor.recommend(workload, _seconds(deadline), probe=measured)


def load_job(job_id):
    """A finished job's kept results (jobs.results.SavedJob): its models, histories, source, options and
    environment, in any notebook or script that sees the same job store. `job_id`: an id, a unique id prefix or a
    job name (its newest job), as every command that takes a job reads it (jobs.lookup)."""
    from jupyter_dl.jobs.results import load_job as load_kept

    store = _session.store if _session is not None else JobStore()
    return load_kept(store, job_id)


def compare(ids, x="step"):
    """Compare jobs side by side (ids as %dl_jobs shows them, unique id prefixes, or unique job names): a plotly
    figure of their loss and metric curves against x ("step", "epoch" or "time"), and a table of the settings that
    differ, final metrics, wall time, samples/s and scaling efficiency across rank counts of the same cell. Returns
    a live.compare_figure.Comparison: shown as the figure and the table; `.data` is the JSON-able comparison."""
    from jupyter_dl.jobs.comparison import CompareSettings, compare_jobs
    from jupyter_dl.live.compare_figure import Comparison
    from jupyter_dl.live.theme import template_for

    parent = _session._parent if _session is not None else None
    store = _session.store if _session is not None else JobStore()
    theme = _session.view_settings.theme if _session is not None else "auto"
    data = compare_jobs(store, ids, x, settings=CompareSettings(parent=parent))
    return Comparison(data, template_for(theme))


def bind_results(result, namespace):
    """Put what rank 0 bound into the namespace; say which names could not come back. Those are removed from the
    namespace: an older value left under the name would look like the job's result. Returns the value of the cell's
    last expression (None without one, or when it could not come back), for the cell to show as Out[n]."""
    shown = result.values.pop(OUT_NAME, None)
    result.problems.pop(OUT_NAME, None)  # a value that cannot travel is simply not shown
    namespace.update(result.values)
    for name in result.deleted:  # `del x` in the cell: gone here too, as in one process
        namespace.pop(name, None)
    for name, why in result.problems.items():
        stale = namespace.pop(name, None) is not None
        removed = "; its older value was removed from the notebook so it cannot be mistaken for this result"
        print(
            f"[jupyter-dl] '{name}' did not come back from the engines ({why}){removed if stale else ''}",
            file=sys.stderr,
        )
    return shown


def show(obj):
    """Rich display in a notebook; its text form elsewhere."""
    if _in_kernel():
        from IPython.display import display

        display(obj)
    else:
        print(repr(obj))


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
