"""Kernel side: the ipyparallel cluster the ranks run on.

We drive ipyparallel's own `Cluster` API, so any cluster it can start or connect to (local processes, MPI, Slurm,
SSH, via profiles and cluster files) is usable unchanged. The embedded default is a local cluster started on demand.
"""

import atexit
import contextlib
import itertools
import logging
import os
import signal
import socket
import sys
import time

from traitlets import Bool, Dict, Float, Integer, Unicode
from traitlets.config import Configurable

from jupyter_dl.cluster import engine_sets, iopub_guard, scheduler_queue, size_checks, ssh_engines
from jupyter_dl.cluster import reaper as cluster_reaper
from jupyter_dl.cluster import status as cluster_status
from jupyter_dl.cluster.background_start import BackgroundStart
from jupyter_dl.cluster.fork_server import ForkServer
from jupyter_dl.cluster.known_engines import KnownEngines
from jupyter_dl.cluster.registration import wait_for_engines
from jupyter_dl.cluster.size_checks import counted
from jupyter_dl.cluster.status import ClusterStatus
from jupyter_dl.errors import UsageError
from jupyter_dl.host import gpus
from jupyter_dl.host.processes import pid_running
from jupyter_dl.wire import remote

_STARTS = itertools.count(1)  # cluster ids stay unique when one process starts several clusters
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


class _LogFileAlreadyGone(logging.Filter):
    """Drops ipyparallel's 'Failed to remove <log file>: [Errno 2] No such file or directory'. Each engine's and the
    controller's log file is removed from more than one place when they stop (the stop itself, the callback when
    the process exits, ipyparallel's server extension holding the same cluster); the one that finds it gone logs
    an error for a file that is gone, as wanted. Other failures to remove a file still show."""

    def filter(self, record):
        message = record.getMessage()
        return not (message.startswith("Failed to remove ") and "[Errno 2]" in message)


def _ipyparallel_log():
    """ipyparallel's own logger for clusters started here, errors only. With parent=self it would otherwise log
    through the kernel's logger, and the controller's and engines' chatter would land in the cell."""
    log = logging.getLogger("jupyter_dl.ipyparallel")
    log.setLevel(logging.ERROR)
    if not any(isinstance(f, _LogFileAlreadyGone) for f in log.filters):
        log.addFilter(_LogFileAlreadyGone())
    return log


# What a cluster started elsewhere (background_start.py) hands over to the EngineCluster that adopts it.
_STATE = (
    "cluster",
    "client",
    "owned",
    "_known",
    "_expected",
    "devices",
    "_launcher",
    "_engine_sets",
    "_reaper",
    "_forks",
)


class EngineCluster(Configurable):
    """Owns (or borrows) one ipyparallel cluster per kernel: starts or connects it, keeps its engines, stops it."""

    default_engines = Integer(
        0, help="Engines for the embedded local cluster: 0 means one per visible GPU, or 2 on a machine without GPUs."
    ).tag(config=True)
    profile = Unicode("default", help="IPython profile for clusters started here (connect can name another).").tag(
        config=True
    )
    engines = Unicode(
        "local",
        help="How clusters started here start their engines: 'local' (processes on this host, one per GPU "
        "where there are GPUs), or one of ipyparallel's launchers for a scheduler or other hosts "
        "('slurm', 'mpi', 'ssh', 'pbs', 'sge', 'lsf', ...), configured with ipyparallel's own traits "
        "(e.g. c.SlurmEngineSetLauncher.timelimit). A scheduler starts each engine set as one job, "
        "so all of a job's engines are allocated at once.",
    ).tag(config=True)
    max_cpu_ranks = Integer(
        0,
        help="Most ranks the embedded local cluster runs on a host without GPUs; 0 means twice the CPU cores. "
        "Each rank is a process with its own TensorFlow: far past the cores, engines start slower than "
        "start_timeout and collectives time out, so a larger -n is refused before anything starts.",
    ).tag(config=True)
    start_timeout = Float(120.0, help="Seconds to wait for engines to register once they run.").tag(config=True)
    queue_timeout = Float(
        0.0,
        help="Seconds to wait for a scheduler (Slurm, PBS, ...) to allocate the engines; 0 waits as long as it "
        "takes (interrupting the kernel gives up and cancels the request).",
    ).tag(config=True)
    engine_environment = Dict(
        QUIET_TF, help="Extra environment for engines started here (TensorFlow's C++ logging is quiet by default)."
    ).tag(config=True)
    engine_niceness = Integer(
        5,
        help="Niceness (Unix scheduling priority, 0-19) of the embedded local cluster's engines. Training ranks "
        "use every core they get; on the notebook's own host the browser, the kernel and its live plot then wait "
        "behind them and the page stutters (a 130 ms redraw took 330 ms beside two ranks on 2 cores). A little "
        "lower priority lets the notebook go first and costs training nothing while the notebook is idle. 0 "
        "leaves the engines as they start; engines on other hosts, or of a cluster connected to, are not changed.",
    ).tag(config=True)
    fork_engines = Bool(
        True,
        help="Start the embedded local cluster's CPU engines from a fork server that has imported TensorFlow, Keras "
        "and Horovod once, instead of each engine importing them itself (~7 s of CPU each: on 2 cores the first "
        "cell waited for two imports, and a replacement of a dead engine for a whole new one). Engines on GPUs, "
        "on other hosts or from a scheduler start as ipyparallel starts them. The server imports with the "
        "environment of the cluster's start: a variable the notebook sets later for TensorFlow's import reaches "
        "new engines only with this off. Linux only.",
    ).tag(config=True)
    heartbeat_ms = Integer(
        1000,
        help="Heartbeat period (ms) of the controller of local clusters started here (ipyparallel's "
        "HeartMonitor.period; Slurm, MPI and SSH clusters keep ipyparallel's default, "
        "3000). A new engine counts as registered only at the second heartbeat after it connects, so "
        "ipyparallel's default kept every engine start 3-6 s longer than the engine itself took; a dead engine "
        "is dropped after 10 missed beats (10 s here instead of 30). A HeartMonitor.period in "
        "c.Cluster.controller_args wins.",
    ).tag(config=True)
    start_on_load = Bool(
        True,
        help="When `%load_ext jupyter_dl` runs in a notebook cell, start the embedded local cluster right away, in "
        "the background, so its engines register and import TensorFlow while the first %%distribute cell is "
        "being typed (that cell then waits only for what is left). Only from a cell: a kernel that loads the "
        "extension from its config (c.InteractiveShellApp.extensions) may never distribute anything, so it starts "
        "nothing until asked. Only for local engines (engines = 'local'), never a scheduler's. Off: the cluster "
        "starts with the first job or %dl_cluster start.",
    ).tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cluster = None
        self.client = None
        self.owned = False
        self._known = KnownEngines()
        self._expected = 0  # engines we started and did not kill (some may still be registering)
        self.devices = []  # GPUs the engines started here are pinned to, one engine each
        self._launcher = "local"
        self._engine_sets = []  # ipyparallel engine set ids, newest last
        self._reaper = None  # the process that ends our controller if this kernel dies
        self._background = None  # start_in_background's BackgroundStart, until adopted or stopped
        self._unclaimed = None  # adopted from it and unused yet: what it was started as (n, launcher, GPUs)
        self._allocating = False  # started by allocate(): its engines come and go with each job's allocation
        self._forks = None  # the fork server local CPU engines come from (fork_engines), while the cluster runs

    # ------------------------------------------------------------------------------------------ lifecycle
    def default_size(self) -> int:
        return self.default_engines or len(gpus.discover()) or 2

    def start(self, n=None, gpu_spec="all", engines=None, progress=None, wait_for=None) -> ClusterStatus:
        """Start a cluster of our own: local engines, one per rank, each pinned to one GPU where GPUs exist; or
        engines from a scheduler through ipyparallel's launcher of that name. Returns once all have registered, or
        `wait_for` of them (an elastic job starts with what it can have; the others register meanwhile).
        A cluster starting in the background (start_in_background) is taken as it is when it is what was asked
        for, else stopped first."""
        requested = n
        n, engines, devices = self._request(n, gpu_spec, engines)
        early = self._background.request if self._background is not None else self._unclaimed
        if early is not None:  # started on load and no job has used it yet: the user never asked for that one
            if early == (n, engines, devices) and wait_for is None:
                self._settle(progress)
                if self.client is not None:
                    self._unclaimed = None
                    return self.status()
            self.stop()
        self._require_none_in_use()
        size_checks.check_new_cluster(n, engines, devices, gpu_spec, self.max_cpu_ranks)
        cluster = self._new_cluster(n, engines)
        if engines == "ssh":
            hosts = ssh_engines.prepare(cluster)
            n = cluster.n = requested or sum(hosts.values())
        if engines == "local" and not devices:
            self._fork_server()  # its TensorFlow import goes on while the controller starts
        try:
            self._start_controller(cluster, engines)
        except BaseException:
            self._stop_fork_server()
            raise
        try:
            self._start_engines(n, devices[:n])
            self.client = cluster.connect_client_sync()
            self._wait_for(min(n, wait_for or n), progress)
            self.describe(self.engine_ids())  # also starts each engine importing TensorFlow and Horovod
        except BaseException:
            self.stop()  # also withdraws the scheduler request
            raise
        return self.status()

    def _request(self, n, gpu_spec, engines) -> tuple:
        """(engines, launcher, GPUs) that start(n, gpu_spec, engines) starts."""
        engines = (engines or self.engines).lower()  # ipyparallel's launcher names are case-insensitive
        devices = tuple(gpus.select(gpu_spec)) if engines == "local" else ()  # elsewhere the scheduler assigns GPUs
        return n or (len(devices) if devices else self.default_size()), engines, devices

    def _new_cluster(self, n, engines):
        import ipyparallel as ipp

        iopub_guard.guard_iopub()  # before its client connects

        try:
            # parent=self: ipyparallel's own traits (c.SSHEngineSetLauncher.engines, c.Cluster.controller_ip, ...)
            # come from the same config as ours, in a notebook or in a script's Session(parent=...), merged by
            # ipyparallel with the profile's ipcluster_config.py.
            return ipp.Cluster(
                n=n,
                profile=self.profile,
                cluster_id=f"jupyter-dl-{os.getpid()}-{next(_STARTS)}",
                engines=engines,
                log_level=40,
                parent=self,
                log=_ipyparallel_log(),
            )
        except Exception as exc:  # traitlets refuses an unknown launcher name
            raise UsageError(
                f"unknown engine launcher {engines!r} ({exc}); use local, slurm, mpi, ssh, pbs, sge or lsf"
            ) from None

    def _start_controller(self, cluster, engines):
        if engines == "local":
            # Ahead of the configured arguments, so that one of the user's own wins. Only where every engine is on
            # this host: elsewhere a host cut off must stay listed for ~30 s, so that its silence tells it from an
            # engine that died (kernel/job/lost_hosts.py; dropped after 10 s, it looked like a dead engine).
            cluster.controller_args = [f"--HeartMonitor.period={self.heartbeat_ms}", *cluster.controller_args]
        cluster.start_controller_sync()
        self.cluster, self.owned, self._launcher = cluster, True, engines
        controller_pid = getattr(cluster.controller, "pid", None)
        if controller_pid:  # the controller (and its schedulers) end with this kernel, however it ends
            self._reaper = cluster_reaper.start(os.getpid(), [controller_pid])

    def _start_engines(self, n, devices=()):
        self._expected += n
        if self._launcher == "local" and devices:
            for dev in devices:
                self._engine_sets.append(engine_sets.start_on_gpu(self.cluster, dev, self.engine_environment))
                self.devices.append(dev)
        else:
            index = len(self._engine_sets)
            engine_cmd = self._fork_server() if self._launcher == "local" else None
            self._engine_sets.append(
                engine_sets.start_set(self.cluster, self._launcher, n, self.engine_environment, index, engine_cmd)
            )

    def _fork_server(self):
        """The engine command of this cluster's fork server, started (again, if it died) when needed; None when
        engines are not forked."""
        if not self.fork_engines or not sys.platform.startswith("linux"):  # macOS forbids much after a fork
            return None
        if self._forks is None or self._forks.process.poll() is not None:
            self._stop_fork_server()
            environment = engine_sets.cpu_environment(self.engine_environment)
            self._forks = ForkServer(environment, self.engine_niceness)
        return self._forks.engine_cmd

    def _stop_fork_server(self):
        forks, self._forks = self._forks, None
        if forks is not None:
            forks.stop()

    # ------------------------------------------------------------------ allocations (pool/slurm.py: one per job)
    def allocate(self, n, launcher, **launcher_options):
        """n engines as one scheduler job (one allocation), on a cluster started here with that launcher; its
        controller starts first when there is no cluster. Returns (engine set id, scheduler job id); the engines
        register later (ensure(n) waits for them)."""
        if self.client is None:
            cluster = self._new_cluster(n, launcher)
            self._start_controller(cluster, launcher)
            self.client, self._allocating = cluster.connect_client_sync(), True
        elif not self._allocating:
            raise UsageError(
                f"jobs get their engines from {launcher}, one allocation each, but this notebook's cluster has "
                "engines of its own; run %dl_cluster stop first"
            )
        self._known.forget(self.engine_ids())  # a released allocation's engine that registered as it was cancelled
        index = len(self._engine_sets)
        batch_file = os.path.join(self.cluster.profile_dir, f"{self.cluster.cluster_id}-engines-{index}.sbatch")
        set_id = self.cluster.start_engines_sync(
            n, environment=dict(self.engine_environment), batch_file_name=batch_file, **launcher_options
        )
        self._engine_sets.append(set_id)
        self._expected += n
        return set_id, getattr(self.cluster.engines[set_id], "job_id", "")

    def release(self, set_id):
        """End one allocation (the scheduler's cancel: scancel) and forget its engines (every live one: there is
        one allocation at a time); none replace them."""
        self._known.forget(self.engine_ids())
        self._expected = max(0, self._expected - self.cluster.engines[set_id].n)
        self._engine_sets.remove(set_id)
        self.cluster.stop_engines_sync(set_id)

    @property
    def local(self) -> bool:
        """Whether jobs run on this host's engines started here (or will: the embedded cluster starts on demand)."""
        if self.client is None:
            return self.engines.lower() == "local"
        return self.owned and self._launcher == "local"

    @property
    def expected(self) -> int:
        """Engines started here and not killed, registered or still registering (0 for a connected cluster)."""
        return self._expected

    def connect(self, profile=None, cluster_id=None) -> ClusterStatus:
        """Use a cluster someone else started (ipcluster, a Slurm job, ...). We never stop what we did not start."""
        import ipyparallel as ipp

        iopub_guard.guard_iopub()  # before its client connects
        self._drop_background()
        self._require_none_in_use()
        profile = profile or self.profile
        try:
            if cluster_id is not None:
                cluster = ipp.Cluster.from_file(profile=profile, cluster_id=cluster_id)
                client = cluster.connect_client_sync()
            else:
                cluster, client = None, ipp.Client(profile=profile)
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"no cluster found in profile {profile!r}"
                f"{f' with id {cluster_id!r}' if cluster_id else ''} ({exc}); "
                f"start one with `ipcluster start --profile {profile}` or use %dl_cluster start"
            ) from None
        self.cluster, self.client, self.owned = cluster, client, False
        return self.status()

    def connect_file(self, cluster_file) -> ClusterStatus:
        """Use the cluster described by an ipyparallel cluster file (what `Cluster.from_file` reads)."""
        import ipyparallel as ipp

        iopub_guard.guard_iopub()  # before its client connects
        self._drop_background()
        self._require_none_in_use()
        try:
            cluster = ipp.Cluster.from_file(cluster_file)
        except OSError as exc:
            raise UsageError(f"cannot read cluster file {cluster_file} ({exc})") from None
        self.cluster, self.client, self.owned = cluster, cluster.connect_client_sync(), False
        return self.status()

    def _require_none_in_use(self):
        if self.client is not None:
            raise UsageError("a cluster is already in use; run %dl_cluster stop first")

    def stop(self):
        self._drop_background()
        self._unclaimed = None
        client, cluster, owned = self.client, self.cluster, self.owned
        self.client = self.cluster = None
        self.owned = False
        self._known = KnownEngines()
        self._expected = 0
        self.devices = []
        self._engine_sets = []
        self._allocating = False
        if client is not None:
            client.close()
        if cluster is not None and owned:
            cluster.stop_cluster_sync()
        self._stop_fork_server()  # after the engines it forked: those were the launcher's to stop
        reaper, self._reaper = self._reaper, None
        if reaper is not None:  # it would exit by itself within a second; don't leave it behind as a zombie
            reaper.terminate()
            reaper.wait(5)

    def _controller_running(self) -> bool:
        """Whether the controller started here still runs (a local process; other launchers: assumed)."""
        controller = getattr(self.cluster, "controller", None)
        pid = getattr(controller, "pid", None)
        return pid_running(pid) if pid else True

    def _forget_stopped_cluster(self):
        """Drop a cluster someone else stopped, quietly: its engines and controller are gone already, so stopping
        them again may complain (stop() forgets the cluster before it stops anything)."""
        with contextlib.suppress(Exception):
            self.stop()

    # ----------------------------------------------------------------- started in the background (start_on_load)
    def start_in_background(self) -> bool:
        """Start the embedded local cluster in a thread (background_start.py), unless a cluster is in use or
        engines start elsewhere than here. The next command that needs the cluster adopts it (or stops it)."""
        if self.client is not None or self._background is not None or self.engines.lower() != "local":
            return False
        from jupyter_dl.pool.slurm import SlurmPool

        if SlurmPool(parent=self).enabled:  # each job's engines are its own Slurm allocation: none start here
            return False
        n, launcher, devices = self._request(None, "all", None)
        size_checks.check_new_cluster(n, launcher, devices, "all", self.max_cpu_ranks)
        self._background = BackgroundStart(EngineCluster(parent=self), n, (n, launcher, devices))
        # A kernel that exits while it starts leaves no engine behind (a kernel manager kills one that takes >5 s).
        atexit.register(self._drop_background, 3.0)
        return True

    def _settle(self, progress=None, announce=False):
        """Wait for the background start (progress hears its stages) and take its cluster as this one's; a start
        that failed is reported here, in one line, and forgotten (the caller starts a cluster as usual)."""
        background = self._background
        if background is None:
            return
        background.wait(progress)
        self._background = None
        if background.error is not None:
            self._tell_failed(background)
            return
        other = background.cluster
        for name in _STATE:
            setattr(self, name, getattr(other, name))
        self._unclaimed = background.request  # until a job or %dl_cluster start takes it (see start)
        if announce:
            self._announce("a local cluster", " when jupyter-dl loaded")
        if progress is not None:
            self._wait_for_imports(progress)

    def _wait_for_imports(self, progress):
        """Show the last stage a prestarted cluster may be in: its engines importing TensorFlow (describe() started
        it); a job would wait for the same import on its engines anyway."""
        ids = self.engine_ids()
        deadline = time.monotonic() + self.start_timeout
        told = False
        while ids and not all(self.client[ids].apply_sync(remote.PRELOADED)) and time.monotonic() < deadline:
            if not told:
                progress("engines importing TensorFlow")
                told = True
            time.sleep(0.2)

    def _drop_background(self, timeout=None):
        """Stop a background start and what it started (also while it is still starting)."""
        background, self._background = self._background, None
        if background is None:
            return
        background.cancel(self.start_timeout if timeout is None else timeout)
        if background.error is not None:
            self._tell_failed(background)

    @staticmethod
    def _tell_failed(background):
        if background.cancelled:
            return
        why = " ".join(str(background.error).split()) or type(background.error).__name__
        print(
            f"[jupyter-dl] the local cluster started when jupyter-dl loaded failed ({why}); jobs start one as usual "
            "(c.EngineCluster.start_on_load = False turns the early start off)",
            file=sys.stderr,
            flush=True,
        )

    # ------------------------------------------------------------------------------------------- engines
    def engine_ids(self):
        return self._known.live(self.client.ids) if self.client else []

    def check_size(self, n):
        """Refuse, before anything starts, a rank count this cluster cannot run."""
        if self.client is not None and not self.owned:
            size_checks.check_connected(n, len(self.engine_ids()))
        elif self.local:  # elsewhere a scheduler decides what it can allocate
            size_checks.check_local(n, self.max_cpu_ranks)

    def ensure(self, n, progress=None):
        """A client with at least n live engines; starts the embedded cluster (or grows it) on demand.
        progress(text), when given, hears how many engines have registered while they start."""
        self._settle(progress, announce=True)
        self._unclaimed = None
        if self.client is not None and self.owned and not self._controller_running():
            # Stopped from outside this kernel (the jobs panel's Stop): the old client would wait forever.
            print(
                "[jupyter-dl] this notebook's cluster was stopped outside it (jobs panel); starting a new one",
                flush=True,
            )
            self._forget_stopped_cluster()
        if self.client is None:
            self._start_embedded(n, progress)
        have = len(self.engine_ids())
        if have < n:
            self._grow(n, have, progress)
        return self.client

    def ensure_at_least(self, low, high, progress=None):
        """An elastic job's engines: start (or grow) toward `high` where this cluster starts its own CPU engines,
        and return once `low` are live; the rest register while the job runs, and it grows into them. A connected
        cluster, or one engine per GPU, is used as it is."""
        self._settle(progress, announce=True)
        self._unclaimed = None
        if self.client is not None and self.owned and not self._controller_running():
            self._forget_stopped_cluster()
        if self.client is None:
            self._start_embedded(high, progress, wait_for=low)
        elif self.owned and self._launcher == "local" and not gpus.discover() and self._expected < high:
            self._start_engines(high - self._expected)
        have = len(self.engine_ids())
        if have < low:
            self._grow(low, have, progress)
        return self.client

    def _start_embedded(self, n, progress, wait_for=None):
        self.start(n=max(n, self.default_size()), progress=progress, wait_for=wait_for)
        local = self._launcher == "local"
        self._announce("a local cluster" if local else f"a cluster with engines from {self._launcher}")

    def _announce(self, where, when=""):
        devices = f"GPUs {self.devices}" if self.devices else "CPU" if self._launcher == "local" else "as allocated"
        print(
            f"[jupyter-dl] started {where}: {counted(len(self.engine_ids()), 'engine')} ({devices}){when}; "
            "%dl_cluster stop ends it",
            flush=True,
        )  # progress, not an error: ordinary output

    def _grow(self, n, have, progress):
        """From `have` live engines to n: new engines, or replacements of killed ones still registering."""
        if not self.owned:
            size_checks.check_connected(n, have)
        if self._launcher == "local" and gpus.discover() and n > self._expected:
            raise UsageError(
                f"{counted(n, 'rank')} requested but this cluster has {counted(self._expected, 'GPU engine')}; "
                f"use -n {self._expected}"
            )
        if n > self._expected and self._allocating:  # engines come only with a job's allocation (pool/slurm.py)
            raise UsageError(
                f"only {counted(have, 'engine')} of this job's {self._launcher} allocation are left; "
                "run the cell again for a new allocation"
            )
        if n > self._expected:
            self._start_engines(n - self._expected)
        self._wait_for(n, progress)

    def _wait_for(self, n, progress=None):
        wait_for_engines(
            n,
            count=lambda: len(self.engine_ids()),
            queued=self._scheduler_pending,
            launcher=self._launcher,
            start_timeout=self.start_timeout,
            queue_timeout=self.queue_timeout,
            progress=progress,
            detail=self._fork_server_stage,
        )

    def _fork_server_stage(self) -> str:
        forks = self._forks
        return " (importing TensorFlow for them)" if forks is not None and forks.importing else ""

    def _scheduler_pending(self) -> str:
        """Why the newest engine set waits in a scheduler's queue, or '' once it runs (scheduler_queue.py)."""
        if self._launcher == "local" or not self._engine_sets:
            return ""
        engine_set = self.cluster.engines.get(self._engine_sets[-1])
        return scheduler_queue.pending(self._launcher, engine_set, bool(self.engine_ids()))

    def describe(self, ids):
        """Hostname and pid of each engine (asked once per engine)."""
        # Engines of a local cluster started here end with this kernel (ipyparallel starts them in their own
        # session, so they would outlive it holding their GPU's memory). Others' clusters are not ours to end.
        owner = (os.getpid(), socket.gethostname()) if self.local else None
        return self._known.describe(self.client, ids, owner, self.engine_niceness if self.local else 0)

    def described(self, ids) -> list:
        """What describe() learned of each engine, without asking ({} for one never described): for engines that
        may not answer."""
        return [self._known.info.get(i, {}) for i in ids]

    def kinds(self, ids):
        """Device kind of each engine ('cpu' or 'gpu:<name>', what the recommender plans with), asked once."""
        self.describe(ids)
        return self._known.kinds(self.client, ids)

    def kill_and_replace(self, ids):
        """Kill engines stuck in native code (signals cannot reach Python there) and start fresh ones."""
        if not ids:
            return
        if self.client is not None:
            self.client.send_signal(signal.SIGKILL, targets=list(ids), block=False)
        self.replace_dead(ids)

    def replace_dead(self, ids):
        """Forget engines that are gone and, on a cluster we own, start as many new ones."""
        lost_gpus = self._known.forget(ids)  # one entry per engine not already known dead
        if not lost_gpus:
            return
        self._expected -= len(lost_gpus)
        if self.owned and self.cluster is not None and not self._allocating:  # an allocation is not refilled
            # Replacements start now and register while the notebook goes on; the next job waits for them.
            # Each replaces the dead engine on its GPU, so the cluster keeps one engine per GPU.
            refill = engine_sets.gpus_to_refill(lost_gpus, self.devices, self._known.held_gpus())
            for gpu in refill:
                self.devices.remove(gpu)  # _start_engines adds it back
            self._start_engines(len(lost_gpus), refill)

    def all_local(self, ids) -> bool:
        me = socket.gethostname()
        return all(info["hostname"] == me for info in self.describe(ids))

    # ------------------------------------------------------------------------------------------- status
    def status(self) -> ClusterStatus:
        if self._background is not None and not self._background.done:
            return ClusterStatus(starting=self._background.stage)  # asks nothing of a cluster still starting
        self._settle()
        if self.client is None:
            return ClusterStatus()
        ids = self.engine_ids()
        return cluster_status.of_engines(
            ids,
            self.describe(ids),
            owned=self.owned,
            cluster_id=getattr(self.cluster, "cluster_id", None),
            profile=getattr(self.cluster, "profile", None) or self.profile,
            launcher=self._launcher if self.owned else None,
        )
