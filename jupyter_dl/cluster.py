"""Kernel side: the ipyparallel cluster the ranks run on.

We drive ipyparallel's own `Cluster` API, so any cluster it can start or connect to (local processes, MPI, Slurm,
SSH, via profiles and cluster files) is usable unchanged. The embedded default is a local cluster started on demand.
"""
import os
import signal
import socket
import sys
import time

from traitlets import Dict, Float, Integer, Unicode
from traitlets.config import Configurable

from . import gpus
from .errors import UsageError

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


class ClusterManager(Configurable):
    """Owns (or borrows) one ipyparallel cluster per kernel."""

    default_engines = Integer(
        0, help="Engines for the embedded local cluster: 0 means one per visible GPU, or 2 on a machine without GPUs."
    ).tag(config=True)
    profile = Unicode(
        "default", help="IPython profile for clusters started here (connect can name another)."
    ).tag(config=True)
    start_timeout = Float(120.0, help="Seconds to wait for engines to register when starting them.").tag(config=True)
    engine_environment = Dict(
        QUIET_TF, help="Extra environment for engines started here (TensorFlow's C++ logging is quiet by default)."
    ).tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cluster = None
        self.client = None
        self.owned = False
        self._engine_info = {}  # engine id -> {"hostname", "pid"}
        self._dead = set()      # engine ids we killed; ipyparallel may list them until it notices
        self._expected = 0      # engines we started and did not kill (some may still be registering)

    # ------------------------------------------------------------------------------------------ lifecycle
    def default_size(self) -> int:
        return self.default_engines or len(gpus.discover()) or 2

    def start(self, n=None, gpu_spec="all"):
        """Start the embedded local cluster: one engine per rank, each pinned to one GPU where GPUs exist."""
        import ipyparallel as ipp

        self._require_none_in_use()
        devices = gpus.select(gpu_spec)
        n = n or (len(devices) if devices else self.default_size())
        if n < 1:
            raise UsageError(f"-n must be at least 1 (got {n})")
        if devices and n > len(devices):
            raise UsageError(f"{n} engines requested but only {len(devices)} GPUs selected ({gpu_spec}); "
                             f"lower -n or widen --gpus")
        cluster = ipp.Cluster(n=n, profile=self.profile, cluster_id=f"jupyter-dl-{os.getpid()}",
                              log_level=40)
        cluster.start_controller_sync()
        self.cluster, self.owned = cluster, True
        try:
            self._start_engines(n, devices)
            self.client = cluster.connect_client_sync()
            self.client.wait_for_engines(n, timeout=self.start_timeout, interactive=False)
        except BaseException:
            self.stop()
            raise
        return self.status()

    def _start_engines(self, n, devices=()):
        self._expected += n
        # One engine set per GPU: CUDA_VISIBLE_DEVICES must be set before TensorFlow starts in the engine.
        if devices:
            for dev in devices[:n]:
                # Memory growth on: TensorFlow would otherwise take the whole GPU at its first op.
                env = {**self.engine_environment, "CUDA_VISIBLE_DEVICES": str(dev), "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
                self.cluster.start_engines_sync(1, environment=env)
        else:
            env = {**self.engine_environment, "CUDA_VISIBLE_DEVICES": ""} if gpus.discover() else self.engine_environment
            self.cluster.start_engines_sync(n, environment=dict(env))

    def connect(self, profile=None, cluster_id=None):
        """Use a cluster someone else started (ipcluster, a Slurm job, ...). We never stop what we did not start."""
        import ipyparallel as ipp

        self._require_none_in_use()
        profile = profile or self.profile
        try:
            if cluster_id is not None:
                cluster = ipp.Cluster.from_file(profile=profile, cluster_id=cluster_id)
                client = cluster.connect_client_sync()
            else:
                cluster, client = None, ipp.Client(profile=profile)
        except (OSError, ValueError) as exc:
            raise UsageError(f"no cluster found in profile {profile!r}"
                             f"{f' with id {cluster_id!r}' if cluster_id else ''} ({exc}); "
                             f"start one with `ipcluster start --profile {profile}` or use %dl_cluster start") from None
        self.cluster, self.client, self.owned = cluster, client, False
        return self.status()

    def connect_file(self, cluster_file):
        """Use the cluster described by an ipyparallel cluster file (what `Cluster.from_file` reads)."""
        import ipyparallel as ipp

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
        client, cluster, owned = self.client, self.cluster, self.owned
        self.client = self.cluster = None
        self.owned = False
        self._engine_info.clear()
        self._dead.clear()
        self._expected = 0
        if client is not None:
            client.close()
        if cluster is not None and owned:
            cluster.stop_cluster_sync()

    # ------------------------------------------------------------------------------------------- engines
    def engine_ids(self):
        return [i for i in sorted(self.client.ids) if i not in self._dead] if self.client else []

    def ensure(self, n):
        """A client with at least n live engines; starts the embedded cluster (or grows it) on demand."""
        if self.client is None:
            status = self.start(n=max(n, self.default_size()))
            print(f"[jupyter-dl] started a local cluster: {status['engines']} engines "
                  f"({'GPUs ' + str(status['gpus']) if status['gpus'] else 'CPU'}); %dl_cluster stop ends it",
                  file=sys.stderr)
        have = len(self.engine_ids())
        if have < n:
            if not self.owned:
                raise UsageError(f"{n} ranks requested but the connected cluster has {have} engines; "
                                 f"use -n {have} or add engines to the cluster")
            if gpus.discover() and n > self._expected:
                raise UsageError(f"{n} ranks requested but {self._expected} GPU engines exist; use -n "
                                 f"{self._expected}")
            if n > self._expected:
                self._start_engines(n - self._expected)
            self._wait_for(n)  # new engines, or replacements of killed ones, still registering
        return self.client

    def _wait_for(self, n):
        deadline = time.monotonic() + self.start_timeout
        while len(self.engine_ids()) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.engine_ids())} of {n} engines registered "
                                   f"within {self.start_timeout:.0f}s")
            time.sleep(0.1)

    def describe(self, ids):
        """Hostname and pid of each engine (asked once per engine)."""
        from .runtime import rank

        missing = [i for i in ids if i not in self._engine_info]
        if missing:
            view = self.client.direct_view(missing)
            for eid, info in zip(missing, view.apply_sync(rank.describe)):
                self._engine_info[eid] = info
        return [self._engine_info[i] for i in ids]

    def kill_and_replace(self, ids):
        """Kill engines stuck in native code (signals cannot reach Python there) and start fresh ones."""
        if not ids:
            return
        if self.client is not None:
            self.client.send_signal(signal.SIGKILL, targets=list(ids), block=False)
        self.replace_dead(ids)

    def replace_dead(self, ids):
        """Forget engines that are gone and, on a cluster we own, start as many new ones."""
        ids = [i for i in ids if i not in self._dead]
        if not ids:
            return
        self._dead.update(ids)
        self._expected -= len(ids)
        for i in ids:
            self._engine_info.pop(i, None)
        if self.owned and self.cluster is not None:
            # Replacements start now and register while the notebook goes on; the next job waits for them.
            self._start_engines(len(ids))

    # ------------------------------------------------------------------------------------------- status
    def status(self) -> dict:
        if self.client is None:
            return {"running": False}
        ids = self.engine_ids()
        hosts = sorted({info["hostname"] for info in self.describe(ids)}) if ids else []
        return {
            "running": True,
            "owned": self.owned,
            "cluster_id": getattr(self.cluster, "cluster_id", None),
            "profile": getattr(self.cluster, "profile", None) or self.profile,
            "engines": len(ids),
            "engine_ids": ids,
            "hosts": hosts,
            "gpus": gpus.discover(),
        }

    def all_local(self, ids) -> bool:
        me = socket.gethostname()
        return all(info["hostname"] == me for info in self.describe(ids))
