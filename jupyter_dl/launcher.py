"""Kernel side: run one job on the cluster's engines and bring back its outcome.

Order matters: everything that can fail on bad input (syntax, unsendable variables, bad options) is checked before
any engine is started or touched. A failing rank leaves Horovod, which unblocks its peers; peers that are still
stuck after a grace period (native code does not see signals) are killed and replaced, so the next cell works.
"""
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from traitlets import Bool, Float, Integer, Unicode
from traitlets.config import Configurable

from . import cell as cellmod
from . import payload
from . import secrets as secretsmod
from .backends import horovod as backend
from .errors import (
    HostLost,
    JobCancelled,
    JobStalled,
    JobTimeout,
    RankError,
    ShipError,
    UsageError,
)
from .jobs import Job, JobRegistry
from .jobs.results import JobResults
from .live.collector import MetricsCollector
from .live.state import TrainingState
from .options import RunOptions
from .output import OutputRelay
from .pool.local import LocalPool


@dataclass
class CellWork:
    code: str
    namespace: dict


@dataclass
class FunctionWork:
    fn: object
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    all_ranks: bool = False


@dataclass
class RunResult:
    job: Job
    values: dict = field(default_factory=dict)      # cell mode: names bound back into the namespace
    problems: dict = field(default_factory=dict)    # names that could not come back, with why
    results: list = field(default_factory=list)     # function mode: return value per rank (rank 0 only unless all)
    stdout: list = field(default_factory=list)      # per rank, the full text
    state: object = None                            # the TrainingState built from streamed metrics
    view: object = None                             # the cell's LiveView, when one was shown
    probe: dict | None = None                       # probe mode: what rank 0 measured of the cell's fit
    recommendation: object = None                   # --recommend: the plan it ran with
    diverged: str | None = None                     # zero-code: the warning when ranks ended with different weights


class Launcher(Configurable):
    rendezvous_address = Unicode(
        "", help="Address ranks use to reach the kernel's rendezvous server. Empty: 127.0.0.1 when every engine runs "
                 "on this host, else the first of this host's addresses that every rank's host can reach (probed "
                 "before each job)."
    ).tag(config=True)
    network_interface = Unicode(
        "", help="Network interface gloo uses between ranks (the same name on every host). Empty: 'lo' when all "
                 "ranks are local, else on each host the interface its route to this kernel leaves through."
    ).tag(config=True)
    collective_timeout = Float(
        120.0, help="Seconds a rank waits for its peers in rendezvous and collectives (HOROVOD_GLOO_TIMEOUT_SECONDS)."
    ).tag(config=True)
    stall_timeout = Float(
        120.0, help="Seconds a rank may wait in one collective (or one compiled training step) before the job is "
                    "stopped as stalled and the error says where every rank was. 0 turns the check off; "
                    "%%distribute --stall-timeout overrides it per job."
    ).tag(config=True)
    stop_grace = Float(
        5.0, help="Seconds the other ranks get to leave after one fails or the job is interrupted, before their "
                  "engines are killed and replaced."
    ).tag(config=True)
    secrets_file = Unicode(
        "~/.jupyter/jupyter_dl_secrets.json",
        help="JSON file of {name: value} that --secret NAME reads when NAME is not in the kernel's environment."
    ).tag(config=True)
    pool_url = Unicode(
        "", help="URL of a jupyter-dl-pool service (e.g. https://hub/services/jupyter-dl-pool/): each job first gets "
                 "its GPUs from it, all at once, and gives them back when it ends. Empty: $JUPYTER_DL_POOL_URL, and "
                 "without that, the embedded pool (see use_local_pool)."
    ).tag(config=True)
    use_local_pool = Bool(
        True, help="Without a pool service, jobs on this host's own engines take their GPUs from the embedded pool "
                   "that this user's kernels share (one job per GPU at a time, all of a job's GPUs at once). Off: "
                   "jobs use the engines' GPUs regardless of other notebooks. No effect on a host without GPUs."
    ).tag(config=True)
    poll_interval = Float(0.2, help="Seconds between polls for rank output, metrics and other ranks' completion "
                                    "(the first pending rank's completion is seen at once). Shorter polls cost the "
                                    "ranks CPU: at 0.05 s a --manual loop ran at 0.88x horovodrun on 2 cores, at "
                                    "0.2 s at 1.0x (bench/horovod_compat.py).").tag(config=True)
    INTERRUPT_REPEAT = 0.5  # seconds between interrupts while ranks are being stopped
    PEER_PATIENCE = 1.0     # seconds after a rank failed before its peers are interrupted
    PROBE_TIMEOUT = 10.0    # seconds for ranks on other hosts to say which of this host's addresses they reach

    resource_interval = Float(0.25, help="Seconds between a rank's samples of its CPU %, resident memory and (where "
                                         "it has one) GPU utilisation and memory, streamed beside the metrics; 0 "
                                         "turns sampling off (bench/resource_overhead.py measures the cost)."
                              ).tag(config=True)
    point_budget = Integer(2000, help="Most points per trace kept for the live figure (the full series goes to "
                                      "the job's metrics.jsonl).").tag(config=True)

    def __init__(self, cluster, registry=None, **kwargs):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.registry = registry or JobRegistry()
        self.local_pool = LocalPool(parent=self)
        self.results = JobResults(parent=self)
        self._backend_checked = False

    # -------------------------------------------------------------------------------------------------- run
    def warm_up(self):
        """Import Horovod's TensorFlow side in the background (TensorFlow takes seconds to import), so that the
        first job after `%dl_cluster start` does not pay for it; run() checks again and reports any problem."""
        import threading

        def check_quietly():
            try:
                backend.check_installed()
                self._backend_checked = True
                import ipywidgets  # noqa: F401  (the live view's, about a second between them)
                import plotly.graph_objects  # noqa: F401
            except Exception:
                pass

        if not self._backend_checked:
            threading.Thread(target=check_quietly, daemon=True, name="jdl-warm-up").start()

    def run(self, work, options: RunOptions, stdout=None, stderr=None, observers=()) -> RunResult:
        """Run the work on the cluster. Observers get started(job), update(state) while it runs, and
        finished(job, state) at the end, whatever the outcome."""
        options.validate()
        if not self._backend_checked:
            backend.check_installed()
            self._backend_checked = True
        shipment = self._prepare(work)  # raises on bad input, before any engine is touched
        secret_values = secretsmod.resolve(options.secrets, self.secrets_file)
        redact = secretsmod.Redactor(secret_values)
        n = options.n or (len(self.cluster.engine_ids()) if self.cluster.client else self.cluster.default_size())
        self.cluster.check_size(n)
        job = self.registry.add(Job(name=options.name or f"job-{len(self.registry.all()) + 1}", n=n,
                                    options={k: v for k, v in vars(options).items() if k != "name"},
                                    **_kernel_identity()))
        job.transition("starting")
        state = TrainingState(budget=self.point_budget)
        t0 = time.perf_counter()
        try:
            with self._pool_lease(job, n, stderr, options.device_kind) if options.pooled else contextlib.nullcontext() \
                    as lease:
                granted = lease["devices"] if lease else None
                outcomes, ars, status, t_cluster, t_ship, shipped = self._attempts(
                    job, n, work, shipment, options, stdout, stderr, state, observers, secret_values, redact,
                    granted)
        except BaseException as exc:
            job.transition("cancelled" if isinstance(exc, KeyboardInterrupt) else "failed", error=str(exc))
            raise
        job.timings = {"cluster_s": t_cluster - t0, "ship_s": t_ship - t_cluster,
                       "run_s": time.perf_counter() - t_ship, "shipped": shipped,
                       "ranks": [o.get("timings") for o in outcomes]}
        result = RunResult(job=job, stdout=[redact(ar.stdout or "") for ar in ars], state=state)
        if redact:
            outcomes = [_redacted(o, redact) for o in outcomes]
        try:
            self._finish(job, status, outcomes, options)
        finally:
            for observer in observers:
                observer.finished(job, state)
        result.probe = outcomes[0].get("probe")
        result.diverged = outcomes[0].get("diverged")
        if result.diverged:
            print(f"[jupyter-dl] warning: {result.diverged}", file=stderr or sys.stderr, flush=True)
        if isinstance(work, CellWork):
            result.values, result.problems = payload.unpack(outcomes[0].get("values", {}), work.namespace)
            self._keep_results(job, work, result.values, outcomes[0].get("environment", {}), stderr)
        else:
            picked = outcomes if work.all_ranks else outcomes[:1]
            result.results = [payload.cloudpickle.loads(o["result"]) for o in picked]
        return result

    def _attempts(self, job, n, work, shipment, options, stdout, stderr, state, observers, secret_values, redact,
                  granted=None):
        """Run the job, and again after a failure while --restarts allows."""
        attempt = 0
        while True:
            cold = self.cluster.client is None
            if cold:
                _tell(observers, f"starting the cluster: {max(n, self.cluster.default_size())} engines")
            # After a failure this waits for the replacements of dead or killed engines; with GPUs granted, for all
            # of them, since the granted GPUs' engines may be among the replacements.
            self.cluster.ensure(max(n, self.cluster.expected) if granted else n)
            ids = self._place(n, granted, options.device_kind)
            job.engine_ids = ids
            job.hosts = [info["hostname"] for info in self.cluster.describe(ids)]
            t_cluster = time.perf_counter()
            shipped = self._ship(ids, shipment)
            t_ship = time.perf_counter()
            _tell(observers, f"{n} ranks: {'importing TensorFlow and Horovod, ' if cold else ''}Horovod rendezvous")
            outcomes, ars, status = self._execute(job, ids, work, shipment, options, stdout, stderr, state,
                                                  observers, secret_values, redact, attempt)
            if status[0] not in ("failed", "stalled") or attempt >= options.restarts:
                return outcomes, ars, status, t_cluster, t_ship, shipped
            attempt += 1
            self._restarting(job, state, attempt, options, _failure_summary(status, outcomes, redact), stderr)

    def active_pool(self):
        """(pool, description) jobs started here take their GPUs from: the pool service when one is configured,
        the embedded pool when jobs run on this host's own GPU engines, else (None, "")."""
        url = self.pool_url or os.environ.get("JUPYTER_DL_POOL_URL", "")
        if url:
            from .pool.client import PoolClient

            return PoolClient(url), f"service {url}"
        if self.use_local_pool and self.cluster.local and self.local_pool.active:
            return self.local_pool, f"embedded ({self.local_pool.path()})"
        return None, ""

    def _pool_lease(self, job, n, stderr, kind=None):
        """The job's GPUs, one per rank, held for as long as it runs; nothing to hold without a pool."""
        from .pool.lease import PoolLease

        pool, _ = self.active_pool()
        if pool is None or kind == "cpu":  # a plan for CPU ranks needs no GPU
            return contextlib.nullcontext()
        if pool is not self.local_pool:
            return PoolLease(pool, n, job, job.kernel_id or f"{job.kernel_host}:{job.kernel_pid}", stderr)
        if self.cluster.client is None:
            self.cluster.ensure(n)  # the engines first: a grant must be among the GPUs they are pinned to
        # The GPUs this kernel's engines hold, of the plan's kind when a recommendation chose one.
        ids = self.cluster.engine_ids()
        kinds = self.cluster.kinds(ids) if kind else [None] * len(ids)
        allowed = [(info["hostname"], int(info["gpu"])) for info, engine_kind in zip(self.cluster.describe(ids), kinds)
                   if info.get("gpu") and engine_kind in (kind, None)]
        return PoolLease(pool, n, job, pool.owner, stderr, allowed=allowed)

    def pool_status(self) -> str:
        """One line on the GPU pool jobs started here use, or '' when none."""
        pool, description = self.active_pool()
        if pool is None:
            return ""
        try:
            summary = pool.summary()
        except Exception as exc:  # a status line must not fail because the pool service is down
            return f"GPU pool, {description}: not reachable ({exc})"
        return (f"GPU pool, {description}: {summary['free']} of {summary['gpus']} GPUs free, {summary['queued']} "
                f"job{'s' if summary['queued'] != 1 else ''} queued")

    def _restarting(self, job, state, attempt, options, reason, stderr):
        """Record a restart where the notebook, the job store and the live plot will show it."""
        record = {"kind": "restart", "attempt": attempt, "reason": reason, "t": time.time()}
        job.restarts.append({k: record[k] for k in ("attempt", "reason", "t")})
        state.restarted(attempt, reason)
        if self.registry.store is not None:
            self.registry.store.append_metrics(job.id, [record])
        job.changed()
        print(f"[jupyter-dl] {reason}; restart {attempt} of {options.restarts}, from the last checkpoint in "
              f"{options.checkpoint_dir}", file=stderr or sys.stderr, flush=True)

    # -------------------------------------------------------------------------------------------- prepare
    def _prepare(self, work):
        """Serialise what must travel. Arrays are fingerprinted and serialised only if an engine lacks them."""
        if isinstance(work, FunctionWork):
            try:
                fn_blob = _dumps_callable((work.fn, work.args, work.kwargs), work.fn)
            except Exception as exc:
                raise ShipError(getattr(work.fn, "__name__", "fn"), f"{type(exc).__name__}: {exc}") from None
            return {"names_in": [], "names_out": [], "values": {}, "fn": fn_blob}
        names = cellmod.analyse(work.code)  # SyntaxError surfaces here
        values = {}
        for name in cellmod.shippable_reads(names, work.namespace):
            value = work.namespace[name]
            fp = payload.fingerprint(value)
            if fp is None:
                try:
                    values[name] = (None, payload.dumps(name, value, work.namespace))
                except Exception as exc:
                    raise ShipError(name, f"{type(exc).__name__}: {exc}") from None
            else:
                values[name] = (fp, value)
        return {"names_in": sorted(values), "names_out": names.binds, "values": values}

    def _place(self, n, granted=None, kind=None):
        """Choose n engines, grouped by host so each host's ranks are contiguous (Horovod's local ranks). With GPUs
        granted by the pool, the engines pinned to exactly those GPUs (engines on CPU clusters are not pinned);
        with a device kind (a recommendation's), only engines of that kind."""
        ids = self.cluster.engine_ids()
        pairs = list(zip(ids, self.cluster.describe(ids)))
        if kind:
            kinds = dict(zip(ids, self.cluster.kinds(ids)))
            pairs = [(eid, info) for eid, info in pairs if kinds[eid] == kind]
            if len(pairs) < n:
                found = ", ".join(f"{list(kinds.values()).count(k)} x {k}" for k in sorted(set(kinds.values())))
                raise UsageError(f"the plan runs {n} ranks on {kind}, but the cluster has {len(pairs)} such engines "
                                 f"({found}); add engines of that kind or run without --recommend")
        if granted and any(info.get("gpu") for _, info in pairs):
            wanted = {(host, str(gpu)) for host, gpu in granted}
            pinned = {(info["hostname"], info.get("gpu")) for _, info in pairs}
            pairs = [(eid, info) for eid, info in pairs if (info["hostname"], info.get("gpu")) in wanted]
            if len(pairs) < n:
                raise UsageError(f"the pool granted GPUs {sorted(wanted)}, but the cluster's engines are pinned to "
                                 f"{sorted(pinned)}; start the cluster with one engine per GPU on the pool's hosts")
        order = {}
        for _, info in pairs:
            order.setdefault(info["hostname"], len(order))
        ranked = sorted(pairs, key=lambda pair: order[pair[1]["hostname"]])
        return [eid for eid, _ in ranked[:n]]

    def _ship(self, ids, shipment):
        """Send each engine the values it lacks; returns the names that travelled."""
        from .runtime import rank as rank_mod

        values = shipment["values"]
        if not values:
            return []
        client = self.cluster.client
        manifests = client.direct_view(ids).apply_sync(rank_mod.manifest)
        needs = {}
        for eid, have in zip(ids, manifests):
            missing = tuple(sorted(name for name, (fp, _) in values.items() if fp is None or have.get(name) != fp))
            needs.setdefault(missing, []).append(eid)
        blobs = {}
        for missing, targets in needs.items():
            if not missing:
                continue
            for name in missing:
                if name not in blobs:
                    fp, value = values[name]
                    blobs[name] = value if fp is None else payload.dumps(name, value)
            fps = {name: values[name][0] for name in missing}
            client.direct_view(targets).apply_sync(rank_mod.receive, {m: blobs[m] for m in missing}, fps)
        return sorted(blobs)

    # -------------------------------------------------------------------------------------------- execute
    def _execute(self, job, ids, work, shipment, options, stdout, stderr, state, observers, secret_values, redact,
                 attempt=0):
        from .runtime import rank as rank_mod

        client = self.cluster.client
        rendezvous = backend.Rendezvous(job.hosts, self.collective_timeout)
        try:
            address, interfaces = self._route(ids, rendezvous.port)
        except BaseException:
            rendezvous.stop()
            raise
        base = {"size": len(ids), "names_in": shipment["names_in"], "names_out": shipment["names_out"],
                "manual": options.manual, "lr_scale": options.lr_scale, "job_name": job.name,
                "stream_metrics": options.stream_metrics, "secrets": secret_values,
                "kernel_pid": job.kernel_pid, "kernel_host": job.kernel_host,
                "stall_s": self.stall_timeout if options.stall_timeout is None else options.stall_timeout,
                "checkpoint_dir": options.checkpoint_dir, "attempt": attempt,
                # Same-host ranks share one kind of device here; across hosts speeds may differ (--balance auto).
                "balance": options.balance == "on" or (options.balance == "auto" and len(set(job.hosts)) > 1),
                "probe": options.probe, "batch_size": options.batch_size, "lr_multiplier": options.lr_multiplier,
                "resource_interval": self.resource_interval}
        if isinstance(work, CellWork):
            base.update(mode="cell", code=work.code)
        else:
            base.update(mode="fn", fn=shipment["fn"], all_ranks=work.all_ranks)
        try:
            environments = rendezvous.environments(address, interfaces)
            ars = [client[eid].apply_async(rank_mod.run, {**base, "rank": r, "env": environments[r]})
                   for r, eid in enumerate(ids)]
            job.transition("running")
            if attempt == 0:  # a restart goes on in the same view
                for observer in observers:
                    observer.started(job)
            relay = OutputRelay(dict(enumerate(ars)), options.output, stdout, stderr, redact)
            feed = _MetricsFeed(job, MetricsCollector(dict(enumerate(ars))), state, observers, self.registry.store,
                                ars, redact)
            outcomes, status = self._monitor(ids, ars, relay, feed, options)
        finally:
            rendezvous.stop()
        return outcomes, ars, status

    def _monitor(self, ids, ars, relay, feed, options):
        """Wait for every rank, relaying output. Returns (outcome per rank, (status, failed ranks, stall reports)).

        Every way a job ends early (a rank failed, --timeout, a stall, a cancel, the stop button) goes through the
        same stop: interrupt the ranks still running, repeatedly, then kill and replace what is left after
        stop_grace. A second stop-button press while stopping only keeps the stop going."""
        outcomes = [None] * len(ars)
        failed_order = []  # ranks in the order their failure was observed
        status, stop_requested_at, last_signal = "ok", None, 0.0
        deadline = time.monotonic() + options.timeout if options.timeout else None
        try:
            while True:
                try:
                    for r, ar in enumerate(ars):
                        if outcomes[r] is None and ar.ready():
                            outcomes[r] = _outcome_of(r, ar)
                            if not outcomes[r]["ok"]:
                                failed_order.append(r)
                    relay.pump()
                    feed.pump()
                    pending = [r for r, o in enumerate(outcomes) if o is None]
                    if not pending:
                        break
                    now = time.monotonic()
                    if stop_requested_at is None:
                        if failed_order:
                            stop_requested_at = now  # Horovod's shutdown should release the others; give it a moment
                        elif deadline is not None and now > deadline:
                            status, stop_requested_at = "timeout", now
                        elif feed.stalls:
                            status, stop_requested_at = "stalled", now
                        elif feed.cancel_requested():
                            status, stop_requested_at = "cancelled", now
                    if stop_requested_at is not None:
                        # Ranks that reported a stall wait in native code no interrupt reaches; when only they are
                        # left, nobody will release them.
                        deadlocked = status == "stalled" and set(pending) <= set(feed.stalls)
                        if deadlocked or now - stop_requested_at > self.stop_grace:
                            self._kill(ids, pending, outcomes)
                            break
                        # After a rank failed, Horovod's shutdown releases peers waiting in a collective; peers busy
                        # elsewhere need an interrupt. Repeat it: a rank that had not started its code ignores one.
                        patience = self.PEER_PATIENCE if status == "ok" else 0.0
                        if now - stop_requested_at >= patience and now - last_signal >= self.INTERRUPT_REPEAT:
                            last_signal = now
                            self._interrupt([ids[r] for r in pending])
                    ars[pending[0]].wait(self.poll_interval)
                except KeyboardInterrupt:
                    if status != "interrupted":
                        status, stop_requested_at, last_signal = "interrupted", time.monotonic(), 0.0
        finally:
            for r, ar in enumerate(ars):
                if outcomes[r] is not None and outcomes[r].get("ok"):
                    ar.wait_for_output(timeout=2)  # metrics published just before the reply may trail it
            relay.pump(final=True)
            feed.pump(final=True)
        if status == "ok" and failed_order:
            status = "failed"
        died = [ids[r] for r, o in enumerate(outcomes) if o and o.get("died")]
        if died:
            self.cluster.replace_dead(died)  # so the next cell finds as many engines as before
        return outcomes, (status, failed_order, dict(feed.stalls))

    def _keep_results(self, job, work, values, environment, stderr):
        """Save what the job produced with it (jobs.results); a failure to save never fails the cell."""
        if self.registry.store is None:
            return
        t0 = time.perf_counter()
        try:
            notes = self.results.save(self.registry.store.job_dir(job.id), values, work.code, job.options,
                                      {**environment, "hosts": job.hosts}, work.namespace)
        except Exception as exc:
            notes = [f"results not kept ({type(exc).__name__}: {exc})"]
        job.timings["results_s"] = time.perf_counter() - t0
        for note in notes:
            print(f"[jupyter-dl] job {job.name!r}: {note}", file=stderr or sys.stderr)

    def _route(self, ids, port):
        """(rendezvous address, gloo interface per rank). Ranks all on this host talk over loopback; ranks elsewhere
        probe which of this host's addresses they reach, and through which of their own interfaces."""
        n = len(ids)
        if self.cluster.all_local(ids):
            return self.rendezvous_address or "127.0.0.1", [self.network_interface or "lo"] * n
        from . import network
        from .runtime import reach

        candidates = [self.rendezvous_address] if self.rendezvous_address else network.candidate_addresses()
        view = self.cluster.client.direct_view(ids)
        probes = view.apply_async(reach.probe, candidates, port).get(timeout=self.PROBE_TIMEOUT)
        address, interfaces = network.choose_route(probes, candidates, port)
        return address, [self.network_interface] * n if self.network_interface else interfaces

    def _interrupt(self, engine_ids):
        if engine_ids:
            self.cluster.client.send_signal(signal.SIGINT, targets=engine_ids, block=False)

    def _kill(self, ids, pending, outcomes):
        for r in pending:
            outcomes[r] = {"rank": r, "ok": False, "induced": True, "ename": "Killed",
                           "evalue": f"did not stop within {self.stop_grace:.0f}s; engine {ids[r]} killed and replaced",
                           "traceback": ""}
        self.cluster.kill_and_replace([ids[r] for r in pending])

    # --------------------------------------------------------------------------------------------- finish
    def _finish(self, job, status, outcomes, options):
        status, failed_order, stalls = status
        if status == "interrupted":
            job.transition("cancelled", error="interrupted")
            print(f"[jupyter-dl] job {job.name!r} interrupted; all {job.n} ranks stopped", file=sys.stderr)
            raise KeyboardInterrupt
        if status == "cancelled":
            source = self.registry.store.cancel_source(job.id) if self.registry.store is not None else None
            job.transition("cancelled", error=f"cancelled from {source or 'the jobs panel or %dl_jobs cancel'}")
            raise JobCancelled(f"job {job.name!r} was cancelled (jobs panel or %dl_jobs cancel); "
                               f"all {job.n} ranks stopped")
        if status == "timeout":
            job.transition("failed", error="timeout")
            where = "; ".join(f"rank {r} was in {_last_frame(o)}" for r, o in enumerate(outcomes) if o and not o["ok"])
            raise JobTimeout(f"job {job.name!r} ran past --timeout {options.timeout:g}s and was stopped"
                             f"{' (' + where + ')' if where else ''}; raise --timeout or make the cell shorter")
        if status == "stalled":
            self._raise_if_host_lost(job)
            job.transition("failed", error="stalled")
            raise JobStalled(f"job {job.name!r} stalled: {describe_stall(stalls, outcomes)}; all {job.n} ranks "
                             f"stopped. Every rank must run the same collectives in the same order; if one rank "
                             f"legitimately works alone this long, raise --stall-timeout")
        if status == "failed":
            self._raise_if_host_lost(job)
            root = _root_failure(outcomes, failed_order)
            first = outcomes[root]
            others = {r: _error_line(o) for r, o in enumerate(outcomes) if r != root and o and not o["ok"]}
            others.update({r: "finished normally" for r, o in enumerate(outcomes) if o and o["ok"]})
            job.transition("failed", error=f"rank {root}: {first['ename']}: {first['evalue']}")
            after = f" (after {len(job.restarts)} restarts)" if job.restarts else ""
            raise RankError(root, first["ename"], first["evalue"], first.get("traceback", ""), others,
                            job.name + after)
        job.transition("succeeded")


    def _raise_if_host_lost(self, job):
        """A multi-host job that failed because a whole host went silent (link down, host frozen) says so in one
        line; the ranks' own errors (a gloo connection reset) would not name the host."""
        if len(set(job.hosts)) < 2:
            return
        lost = self.cluster.silent_hosts(job.engine_ids, job.hosts)
        if not lost:
            return
        host, ranks = next(iter(lost.items()))
        job.transition("failed", error=f"host {host} lost")
        raise HostLost(f"job {job.name!r}: host {host} (rank{'s' if len(ranks) > 1 else ''} "
                       f"{', '.join(map(str, ranks))}) stopped answering during the job (its network link or the host "
                       f"is down); the other ranks were stopped. Run on the remaining hosts' engines "
                       f"(%dl_cluster status) or bring the host back")


class _MetricsFeed:
    """Moves what the ranks produce (metrics, logs) into the job's state, store and observers, and carries
    cancel requests from the store back to the monitor."""

    LOG_INTERVAL = 0.5  # the logs tab ran ~3 epochs behind the panel at 2 s; only changed logs are rewritten
    CANCEL_CHECK_INTERVAL = 0.2
    SPARKLINE_POINTS = 60

    def __init__(self, job, collector, state, observers, store, ars, redact):
        self.job, self.collector, self.state, self.observers, self.store = job, collector, state, observers, store
        self.ars, self.redact = ars, redact
        self._logs_at = self._cancel_at = 0.0
        self._logged = {}  # (stream, rank) -> length of the text last written
        self.stalls = {}  # rank -> its stall report

    def pump(self, final=False):
        records = self.collector.poll()
        for record in records:
            if record.get("kind") == "stall":
                self.stalls.setdefault(record["rank"], record)
        if records:
            self.state.consume(records)
            self.job.progress = {**self.state.progress(), "sparkline": self._sparkline()}
            if self.store is not None:
                self.store.append_metrics(self.job.id, records)
                self.store.save(self.job, progress_only=not final)
        # Also when nothing new came: a view that skipped a redraw (throttled) draws it now, not at the next flush.
        if records or final or self.state.has_undrawn():
            for observer in self.observers:
                observer.update(self.state, force=final)
        now = time.monotonic()
        if self.store is not None and (final or now - self._logs_at > self.LOG_INTERVAL):
            self._logs_at = now
            for stream in ("stdout", "stderr"):
                texts = {r: getattr(ar, stream) or "" for r, ar in enumerate(self.ars)}
                changed = {r: text for r, text in texts.items() if self._logged.get((stream, r)) != len(text)}
                if changed:
                    self.store.write_logs(self.job.id, {r: self.redact(t) for r, t in changed.items()}, stream)
                    self._logged.update({(stream, r): len(t) for r, t in changed.items()})

    def cancel_requested(self):
        now = time.monotonic()
        if self.store is None or now - self._cancel_at < self.CANCEL_CHECK_INTERVAL:
            return False
        self._cancel_at = now
        return self.store.cancel_requested(self.job.id)

    def _sparkline(self):
        ys = self.state.batch_loss.points()[1]
        stride = max(1, -(-len(ys) // self.SPARKLINE_POINTS))
        return [round(y, 5) for y in ys[::stride]]


def _tell(observers, text):
    """Say what the job is doing before its first step, to observers that show it (LiveView.status)."""
    for observer in observers:
        if hasattr(observer, "status"):
            observer.status(text)


def _redacted(outcome, redact):
    """A rank's outcome with secret values taken out of its texts, and bound names holding a secret dropped."""
    if outcome is None:
        return None
    clean = {k: redact(v) if isinstance(v, str) else v for k, v in outcome.items()}
    values = clean.get("values")
    if values:
        clean["values"] = {name: (payload.Unsendable(name, "it holds a --secret value, which stays on the engines")
                                  if isinstance(blob, bytes) and redact.leaks(blob.decode("latin-1")) else blob)
                           for name, blob in values.items()}
    return clean


def _root_failure(outcomes, failed_order):
    """The rank whose failure caused the others': the first that did not only fail because a peer left."""
    return next((r for r in failed_order if not outcomes[r].get("induced")), failed_order[0])


def _error_line(outcome) -> str:
    """'Name: message', first line only, of a failed rank's outcome."""
    return f"{outcome['ename']}: {outcome['evalue']}".strip().splitlines()[0]


def _failure_summary(status, outcomes, redact) -> str:
    """One line on why an attempt failed, for the restart message."""
    status, failed_order, stalls = status
    if status == "stalled":
        return redact(f"the job stalled ({describe_stall(stalls, outcomes)})")
    root = _root_failure(outcomes, failed_order)
    first = outcomes[root]
    return redact(f"rank {root} failed ({_error_line(first)})")


def describe_stall(stalls, outcomes) -> str:
    """Which ranks waited in what, and where the others were when they were stopped."""
    waits = [f"rank {r} waited {rep['waited_s']:.0f}s in {rep['what']}" + (f" ({rep['where']})" if rep["where"] else "")
             for r, rep in sorted(stalls.items())]
    others = []
    for r, outcome in enumerate(outcomes):
        if r in stalls or outcome is None:
            continue
        if outcome.get("ok"):
            others.append(f"rank {r} had finished")
        elif outcome.get("ename") == "Killed":
            others.append(f"rank {r} did not stop and was killed")
        else:
            others.append(f"rank {r} was at {_cell_line(outcome) or _last_frame(outcome)}")
    if not others:
        return "; ".join(waits) + "; every rank was waiting, in different collectives"
    return "; ".join(waits) + ", which the others never entered (" + "; ".join(others) + ")"


def _cell_line(outcome) -> str:
    """'cell line N: <source>' of the innermost frame in the user's cell in a rank's traceback, else ''."""
    lines = outcome.get("traceback", "").splitlines()
    found = ""
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith('File "<distribute-cell') and ", line " in text:
            number = text.split(", line ", 1)[1].split(",", 1)[0]
            source = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].strip().startswith("File ") else ""
            found = f"cell line {number}" + (f": {source}" if source else "")
    return found


def _last_frame(outcome) -> str:
    """'file:line (function)' of the innermost frame in a rank's traceback, to say where it was stopped."""
    lines = [l.strip() for l in outcome.get("traceback", "").splitlines() if l.strip().startswith("File ")]
    return lines[-1].removeprefix("File ") if lines else outcome.get("ename", "?")


def _outcome_of(rank, ar):
    """The rank's structured outcome; an engine that died or a failure outside our wrapper becomes one too."""
    try:
        return ar.get()
    except Exception as exc:  # EngineError (engine died), RemoteError (failed before our wrapper ran)
        from ipyparallel.error import EngineError

        render = getattr(exc, "render_traceback", None)
        tb = "\n".join(render()) if callable(render) else str(exc)
        return {"rank": rank, "ok": False, "induced": False, "ename": getattr(exc, "ename", type(exc).__name__),
                "evalue": getattr(exc, "evalue", str(exc)), "traceback": tb,
                # ipyparallel reports a dead engine as EngineError, raised directly or wrapped in a RemoteError
                "died": isinstance(exc, EngineError) or getattr(exc, "ename", "") == "EngineError"}


def _dumps_callable(obj, fn):
    """Pickle `obj` (the function with its arguments), the function by value unless it lives in an installed
    package the engines can import too. Arguments travel with cloudpickle as well: closures and lambdas among them
    would defeat ipyparallel's plain pickle.

    Test modules and scripts are usually not importable on the engines, so reference pickling would fail there.
    """
    import sysconfig

    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = getattr(module, "__file__", "") or ""
    installed = any(path.startswith(sysconfig.get_paths()[key]) for key in ("purelib", "platlib", "stdlib"))
    if module is not None and module.__name__ != "__main__" and not installed:
        payload.cloudpickle.register_pickle_by_value(module)
        try:
            return payload.cloudpickle.dumps(obj)
        finally:
            payload.cloudpickle.unregister_pickle_by_value(module)
    return payload.cloudpickle.dumps(obj)


def _kernel_identity():
    """The notebook and kernel this job runs from, when it runs in a Jupyter kernel (for the jobs panel)."""
    identity = {"notebook": os.environ.get("JPY_SESSION_NAME") or None, "kernel_id": None}
    try:
        from ipykernel.connect import get_connection_file

        name = os.path.basename(get_connection_file())
        identity["kernel_id"] = name.removeprefix("kernel-").removesuffix(".json")
    except Exception:  # not in a kernel (scripts, tests)
        pass
    return identity
