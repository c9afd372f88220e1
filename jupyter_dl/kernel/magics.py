"""Notebook magics: thin parsing over the API; every error is one line and starts nothing."""

import shlex

from IPython.core.error import UsageError as IPythonUsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from jupyter_dl.cluster.status import ClusterStatus
from jupyter_dl.errors import DistributeError, JobCancelled, UsageError
from jupyter_dl.jobs.comparison import X_AXES
from jupyter_dl.kernel import api, ipython_lines, template
from jupyter_dl.kernel.cell import CELL_FILENAME
from jupyter_dl.kernel.job.outcomes import JobInterrupted
from jupyter_dl.kernel.job.work import CellWork
from jupyter_dl.kernel.options import Parser, help_text, magic_help, parse_distribute_line
from jupyter_dl.live import summary as summary_mod
from jupyter_dl.wire.options import duration, positive_int


def _cluster_parser():
    p = Parser(prog="%dl_cluster", add_help=False, description="Start, connect, show or stop the cluster jobs run on.")
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    start = sub.add_parser("start", add_help=False)
    start.add_argument(
        "-n",
        type=positive_int,
        default=None,
        help="engines (default: EngineCluster.default_engines, else one per GPU, else 2)",
    )
    start.add_argument("--gpus", default="all", help="which GPUs get an engine: all, or 0,1,...")
    start.add_argument(
        "--engines",
        default=None,
        metavar="LAUNCHER",
        help="local (default), or an ipyparallel launcher such as slurm, mpi, ssh",
    )
    connect = sub.add_parser("connect", add_help=False)
    connect.add_argument("--profile", default=None, help="the IPython profile the cluster was started in")
    connect.add_argument("--cluster-id", dest="cluster_id", default=None, metavar="ID", help="which of its clusters")
    connect.add_argument(
        "--cluster-file", dest="cluster_file", default=None, metavar="FILE", help="a cluster's JSON file instead"
    )
    sub.add_parser("status", add_help=False)
    sub.add_parser("stop", add_help=False)
    return p


def _jobs_parser():
    p = Parser(
        prog="%dl_jobs",
        add_help=False,
        description="List the job store's jobs (the newest first; `%dl_jobs list` is the same), cancel one, show a "
        "rank's log, or load what a succeeded job kept. A job is named by its id, a unique id prefix, or its name "
        "(the newest job of that name).",
    )
    _listing_options(p)
    sub = p.add_subparsers(dest="action", parser_class=Parser, metavar="{cancel,logs,load}")
    cancel = sub.add_parser("cancel", add_help=False, help="stop a running job (from any kernel)")
    cancel.add_argument("job_id", metavar="JOB")
    logs = sub.add_parser("logs", add_help=False, help="print a rank's log")
    logs.add_argument("job_id", metavar="JOB")
    logs.add_argument("--rank", type=int, default=0, metavar="N", help="whose log (default: rank 0)")
    logs.add_argument("--tail", type=int, default=None, metavar="N", help="only its last N lines")
    logs.add_argument("--stderr", action="store_true", help="its stderr instead of its stdout")
    load = sub.add_parser("load", add_help=False, help="what a succeeded job kept, as jupyter_dl.load_job gives it")
    load.add_argument("job_id", metavar="JOB")
    return p


def _listing_options(p):
    p.add_argument("--name", default=None, help="only jobs of this name (* and ? match any characters)")
    p.add_argument("--state", default=None, metavar="STATE[,STATE]", help="only jobs in these states")
    p.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        metavar="N",
        help="the N newest jobs (default: c.JobListSettings.limit, 20)",
    )
    p.add_argument("--probes", action="store_true", help="show the probe jobs jupyter-dl runs for its measurements")
    p.add_argument("--all", dest="everything", action="store_true", help="every job, probes included, no limit")


def _cancelled_line(error) -> str:
    """One line for a job the user stopped (the stop button, the jobs panel, %dl_jobs cancel): which job, how, after
    how long, how far it got (outcomes.stop_line), and that the notebook kept its names as they were."""
    told = str(getattr(error, "message", None) or error) or "interrupted"  # a bare KeyboardInterrupt says nothing
    return f"{told}; the notebook's names were not updated"


class CellCancelled(JobCancelled):
    """What %%distribute raises for a cancel the user asked for: IPython shows its one line, no traceback, and the
    cell still ends in error (so "Run all" stops there, as after an interrupt)."""

    def __init__(self, line):
        super().__init__(line)
        self.line = line

    def _render_traceback_(self):
        return [self.line]


class CellSyntaxError(DistributeError):
    """A %%distribute cell that does not parse, shown as IPython shows a plain cell's SyntaxError: the cell and
    line (counting the %%distribute line, as the notebook numbers them), the line and a caret; no frames of ours.
    Not a SyntaxError itself: IPython prints the whole stack for those when a magic raises them."""

    def __init__(self, error: SyntaxError, shell, source):
        super().__init__(f"{error.msg} (cell line {error.lineno})")
        self.error = error
        # Named as IPython names this cell, so the location reads "Cell In[n], line N".
        error.filename = shell.compile.cache(source, shell.execution_count)
        self.lines = shell.SyntaxTB.structured_traceback(type(error), error, [])

    def _render_traceback_(self):
        return self.lines


def format_status(status: ClusterStatus) -> str:
    if status.starting:
        return f"cluster starting in the background ({status.starting}); %%distribute waits for it"
    if not status.running:
        return "no cluster; %%distribute starts a local one, or run %dl_cluster start | connect"
    kind = "started here" if status.owned else "connected"
    gpus = f", GPUs {status.gpus}" if status.gpus else ", no GPUs (CPU ranks)"
    return (
        f"cluster {status.cluster_id or f'(profile {status.profile})'} ({kind}): "
        f"{status.engines} engines on {_hosts(status) or '-'}{gpus}"
    )


def _hosts(status: ClusterStatus) -> str:
    """'node1 (engines 0, 1), node2 (engines 2, 3)': which engines share a host (and so Horovod's local ranks)."""
    by_host = status.engines_by_host
    if len(by_host) == 1:
        return next(iter(by_host))
    return ", ".join(
        f"{host} (engine{'s' if len(ids) != 1 else ''} {', '.join(map(str, ids))})" for host, ids in by_host.items()
    )


def _compare_parser():
    p = Parser(
        prog="%dl_compare",
        add_help=False,
        description="The runs' curves overlaid, and a table of the settings that differ, final metrics, wall time, "
        "samples/s and scaling efficiency. IDs as %dl_jobs shows them.",
    )
    p.add_argument("job_ids", nargs="*", metavar="ID")
    p.add_argument("--x", choices=X_AXES, default="step", help="the curves' x axis")
    return p


def _model_parser(prog, description):
    """The start both model magics share: MODEL --data X,Y [--batch-size B]."""
    p = Parser(prog=prog, add_help=False, description=description)
    p.add_argument("model", help="the name of a compiled Keras model in the notebook")
    p.add_argument("--data", required=True, metavar="X,Y", help="names of the inputs and targets")
    p.add_argument("--batch-size", dest="batch_size", type=positive_int, default=32)
    return p


def _lr_find_parser():
    p = _model_parser(
        "%lr_find", "Learning-rate range test: plots loss against learning rate and returns the suggestion."
    )
    p.add_argument("--start-lr", dest="start_lr", type=float, default=1e-7)
    p.add_argument("--end-lr", dest="end_lr", type=float, default=10.0)
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("-n", type=positive_int, default=None, help="ranks (default: the cluster's engines, if any)")
    return p


def _recommend_parser():
    p = _model_parser(
        "%dl_recommend",
        "The recommended devices, per-rank batch and learning rate for training MODEL, with alternatives.",
    )
    p.add_argument("--epochs", type=positive_int, default=1)
    p.add_argument("--deadline", type=duration, default=None, metavar="30m")
    p.add_argument("--no-probe", dest="probe", action="store_false", help="estimate only, no engine probe")
    return p


def _notebook_values(shell, prog, model, data):
    names = [model, *data.split(",")]
    if len(names) != 3:
        raise UsageError(f"{prog}: --data takes two names, X,Y (got {data!r})")
    missing = [name for name in names if name not in shell.user_ns]
    if missing:
        raise UsageError(f"{prog}: no variable named {', '.join(map(repr, missing))} in the notebook")
    return [shell.user_ns[name] for name in names]


@magics_class
class DistributeMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.session = api.session(parent=shell)

    @line_magic
    def dl_cluster(self, line):
        try:
            args = _cluster_parser().parse_args(shlex.split(line))
            cluster = self.session.cluster
            if args.action == "start":
                print(format_status(cluster.start(args.n, args.gpus, args.engines)))
                self.session.runner.warm_up()
            elif args.action == "connect" and args.cluster_file:
                print(format_status(cluster.connect_file(args.cluster_file)))
            elif args.action == "connect":
                print(format_status(cluster.connect(args.profile, args.cluster_id)))
            elif args.action == "status":
                print(format_status(cluster.status()))
                pool = self.session.runner.pools.status()
                if pool:
                    print(pool)
            else:
                cluster.stop()
                print("cluster stopped")
        except UsageError as exc:
            raise IPythonUsageError(str(exc)) from None

    @line_magic
    def dl_jobs(self, line):
        from jupyter_dl.jobs.lookup import find_job
        from jupyter_dl.kernel.job_listing import JobListSettings, list_jobs
        from jupyter_dl.server.service import JobService, ServiceError

        store = self.session.store
        try:
            words = shlex.split(line)
            args = _jobs_parser().parse_args(words[1:] if words[:1] == ["list"] else words)
            if args.action is None:
                limit = args.limit if args.limit is not None else JobListSettings(parent=self.shell).limit
                return list_jobs(store, args.name, args.state, args.probes, limit, args.everything)
            job = find_job(store, args.job_id)
            if args.action == "load":
                return api.load_job(job["id"])
            service = JobService(store)
            if args.action == "cancel":
                state = service.cancel(job["id"], source="%dl_jobs cancel")["state"]
                print(f"job {job['id']} ({job['name']}): {state}")
            else:
                stream = "stderr" if args.stderr else "stdout"
                print(service.logs(job["id"], args.rank, args.tail, stream)["text"], end="")
        except (UsageError, ServiceError) as exc:
            raise IPythonUsageError(f"%dl_jobs: {exc}" if not str(exc).startswith("%dl_jobs") else str(exc)) from None

    @line_magic
    def dl_compare(self, line):
        try:
            args = _compare_parser().parse_args(shlex.split(line))
            return api.compare(args.job_ids, x=args.x)
        except UsageError as exc:
            message = str(exc)  # argparse's errors name the magic already
            raise IPythonUsageError(
                message if message.startswith("%dl_compare") else f"%dl_compare: {message}"
            ) from None

    @line_magic
    def lr_find(self, line):
        from jupyter_dl.kernel.lr_finder import lr_find

        try:
            args = _lr_find_parser().parse_args(shlex.split(line))
            model, x, y = _notebook_values(self.shell, "%lr_find", args.model, args.data)
            result = lr_find(
                model,
                x,
                y,
                start_lr=args.start_lr,
                end_lr=args.end_lr,
                steps=args.steps,
                batch_size=args.batch_size,
                n=args.n,
                show=True,
            )
        except UsageError as exc:
            raise IPythonUsageError(str(exc)) from None
        return result.suggestion

    @line_magic
    def dl_recommend(self, line):
        try:
            args = _recommend_parser().parse_args(shlex.split(line))
            model, x, y = _notebook_values(self.shell, "%dl_recommend", args.model, args.data)
            if getattr(model, "optimizer", None) is None or not model.built:
                raise UsageError("%dl_recommend: compile and build the model first (keras.Input, or call it once)")
            recommendation = api.recommend(
                model, x, y, epochs=args.epochs, batch_size=args.batch_size, deadline=args.deadline, probe=args.probe
            )
        except (UsageError, ValueError) as exc:
            raise IPythonUsageError(str(exc)) from None
        return recommendation

    @line_magic
    def dl_template(self, line):
        from jupyter_dl.kernel.template import dl_template_magic

        try:
            dl_template_magic(self.shell, line)
        except UsageError as exc:
            raise IPythonUsageError(str(exc)) from None

    @cell_magic
    def distribute(self, line, cell):
        # The docstring (what `%%distribute?` shows) is the parser's help, set below the class.
        try:
            options = parse_distribute_line(line)
            taken = ipython_lines.take_kernel_lines(cell)  # `%%time`, `%matplotlib inline`: the notebook's
            work = CellWork(taken.code, self.shell.user_ns, first_line=2)  # line 1 is the %%distribute line
            for name, arguments in taken.line_magics:
                self.shell.run_line_magic(name, arguments)
            timer = ipython_lines.CellTimer() if taken.timed else None
            result = self.session.run(work, options, summary_mod.work_key(cell), show_view=True)
            if timer is not None:
                print(timer.report())
        except UsageError as exc:
            raise IPythonUsageError(str(exc)) from None
        except SyntaxError as exc:
            if exc.filename != CELL_FILENAME:
                raise
            # Found before anything started: shown as for any cell, not through our frames.
            raise CellSyntaxError(exc, self.shell, f"%%distribute {line}\n{cell}") from None
        except JobCancelled as exc:  # asked for by the user: say what stopped, not where in our code
            raise CellCancelled(f"[jupyter-dl] {_cancelled_line(exc)}") from None
        except KeyboardInterrupt as exc:  # the stop button: the same one line, and still an interrupt
            raise JobInterrupted(_cancelled_line(exc)) from None
        return api.bind_results(result, self.shell.user_ns)


# What `%magic?` shows: each magic's parser's help, so usage is written once (in the parser).
DistributeMagics.distribute.__doc__ = magic_help()
for _magic, _parser in [
    (DistributeMagics.dl_cluster, _cluster_parser),
    (DistributeMagics.dl_jobs, _jobs_parser),
    (DistributeMagics.dl_compare, _compare_parser),
    (DistributeMagics.lr_find, _lr_find_parser),
    (DistributeMagics.dl_recommend, _recommend_parser),
    (DistributeMagics.dl_template, template.parser),
]:
    _magic.__doc__ = help_text(_parser())
