"""Kernel side: run one job on the cluster's engines and bring back its outcome.

Order matters: everything that can fail on bad input (syntax, unsendable variables, bad options) is checked before
any engine is started or touched. A failing rank leaves Horovod, which unblocks its peers; peers that are still
stuck after a grace period (native code does not see signals) are killed and replaced, so the next cell works.
"""

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Sequence

from traitlets import Bool, Float, Integer, Unicode
from traitlets.config import Configurable

from jupyter_dl import backends
from jupyter_dl.cluster.size_checks import counted
from jupyter_dl.jobs import Job, JobRegistry
from jupyter_dl.jobs.results import JobResults
from jupyter_dl.kernel import secrets as secretsmod
from jupyter_dl.kernel.job import elastic, placement
from jupyter_dl.kernel.job import outcomes as outcomesmod
from jupyter_dl.kernel.job.elastic import ElasticGroups
from jupyter_dl.kernel.job.elastic_board import ElasticBoard
from jupyter_dl.kernel.job.feed import MetricsFeed
from jupyter_dl.kernel.job.job_run import JobRun, notebook_dtype_policy
from jupyter_dl.kernel.job.lost_hosts import counted_ranks
from jupyter_dl.kernel.job.monitor import Monitor
from jupyter_dl.kernel.job.observer import JobObserver
from jupyter_dl.kernel.job.route import route
from jupyter_dl.kernel.job.work import CellWork, RunResult, prepare
from jupyter_dl.kernel.output import OutputRelay
from jupyter_dl.kernel.tf_logs import native_stderr_muted
from jupyter_dl.live.collector import MetricsCollector
from jupyter_dl.live.state import TrainingState
from jupyter_dl.pool.choice import PoolChoice
from jupyter_dl.pool.local import LocalPool
from jupyter_dl.wire import held_keras, object_state, payload, random_state, remote
from jupyter_dl.wire.options import RunOptions
from jupyter_dl.wire.spec import OUT_NAME


class JobRunner(Configurable):
    """Runs one job at a time on the cluster's engines. Its settings were `c.Launcher.*` before it was renamed (a
    name users mistook for one of ipyparallel's launchers); those are still read, with a deprecation message."""

    rendezvous_address = Unicode(
        "",
        help="Address ranks use to reach the kernel's rendezvous server. Empty: 127.0.0.1 when every engine runs "
        "on this host, else the first of this host's addresses that every rank's host can reach (probed "
        "before each job).",
    ).tag(config=True)
    network_interface = Unicode(
        "",
        help="Network interface gloo uses between ranks (the same name on every host). Empty: 'lo' when all "
        "ranks are local, else on each host the interface its route to this kernel leaves through.",
    ).tag(config=True)
    collective_timeout = Float(
        120.0, help="Seconds a rank waits for its peers in rendezvous and collectives (HOROVOD_GLOO_TIMEOUT_SECONDS)."
    ).tag(config=True)
    stall_timeout = Float(
        120.0,
        help="Seconds a rank may wait in one collective (or one compiled training step) before the job is "
        "stopped as stalled and the error says where every rank was. 0 turns the check off; "
        "%%distribute --stall-timeout overrides it per job.",
    ).tag(config=True)
    stop_grace = Float(
        5.0,
        help="Seconds the other ranks get to leave after one fails or the job is interrupted, before their "
        "engines are killed and replaced.",
    ).tag(config=True)
    secrets_file = Unicode(
        "~/.jupyter/jupyter_dl_secrets.json",
        help="JSON file of {name: value} that --secret NAME reads when NAME is not in the kernel's environment.",
    ).tag(config=True)
    pool_url = Unicode(
        "",
        help="URL of a jupyter-dl-pool service (e.g. https://hub/services/jupyter-dl-pool/): each job first gets "
        "its GPUs from it, all at once, and gives them back when it ends. Empty: $JUPYTER_DL_POOL_URL, and "
        "without that, the embedded pool (see use_local_pool).",
    ).tag(config=True)
    use_local_pool = Bool(
        True,
        help="Without a pool service, jobs on this host's own engines take their GPUs from the embedded pool "
        "that this user's kernels share (one job per GPU at a time, all of a job's GPUs at once). Off: "
        "jobs use the engines' GPUs regardless of other notebooks. No effect on a host without GPUs.",
    ).tag(config=True)
    poll_interval = Float(
        0.2,
        help="Seconds between polls for rank output, metrics and other ranks' completion "
        "(the first pending rank's completion is seen at once). Shorter polls cost the "
        "ranks CPU: at 0.05 s a --manual loop ran at 0.88x horovodrun on 2 cores, at "
        "0.2 s at 1.0x (bench/horovod_compat.py).",
    ).tag(config=True)
    INTERRUPT_REPEAT = 0.5  # seconds between interrupts while ranks are being stopped
    PEER_PATIENCE = 1.0  # seconds after a rank failed before its peers are interrupted
    PROBE_TIMEOUT = 10.0  # seconds for ranks on other hosts to say which of this host's addresses they reach
    ELASTIC_FUTILE_LOSSES = 3  # an elastic job that loses ranks this often in a row, no commit between, has failed

    resource_interval = Float(
        0.25,
        help="Seconds between a rank's samples of its CPU %, resident memory and (where "
        "it has one) GPU utilisation and memory, streamed beside the metrics; 0 "
        "turns sampling off (bench/resource_overhead.py measures the cost).",
    ).tag(config=True)
    max_tf_contexts = Integer(
        16,
        help="Replace an engine (on a cluster started here) after it has formed this many groups for TensorFlow's "
        "collectives: a new group (other ranks, a new size, a switch from Horovod) makes a new TensorFlow context "
        "whose server cannot be stopped, about 100 threads and 40 MB each. 0 never replaces.",
    ).tag(config=True)
    elastic_grow_wait = Float(
        10.0,
        help="Seconds an elastic job (-n MIN:MAX) waits for engines that are still starting before it grows into "
        "the ones ready: each change costs a commit point and a new group, so growing once into all is cheaper.",
    ).tag(config=True)
    elastic_commit_seconds = Float(
        2.0,
        help="An elastic job's fit over in-memory arrays commits about every this many seconds of training inside "
        "an epoch too (rank 0 measures the steps' pace), where the group may change and a lost rank's survivors go "
        "on from (the rest of the epoch is split over the new group). Each commit copies the model and optimizer "
        "state in every rank's memory and asks the kernel once. 0 (with elastic_commit_steps 0): epoch ends only, "
        "as for other inputs.",
    ).tag(config=True)
    elastic_host_timeout = Float(
        10.0,
        help="Seconds without a heartbeat from any rank of a host (each rank of an elastic job sends one four times a "
        "second) before the job counts that host as cut off and its ranks on the other hosts go on without it from "
        "their last commit, instead of waiting collective_timeout for it. Multi-host elastic jobs only; a host the "
        "kernel still hears from is never counted lost this way. 0: wait for the collectives to give up.",
    ).tag(config=True)
    elastic_commit_steps = Integer(
        0,
        help="Commit inside an epoch every this many steps instead of by time (elastic_commit_seconds): the same "
        "steps on every run, for reproducible change points. 0: by time.",
    ).tag(config=True)
    point_budget = Integer(
        2000, help="Most points per trace kept for the live figure (the full series goes to the job's metrics.jsonl)."
    ).tag(config=True)

    def __init__(self, cluster, registry=None, **kwargs):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.registry = registry or JobRegistry()
        self.local_pool = LocalPool(parent=self)
        self.results = JobResults(parent=self)
        self._backend_checked = False
        self._told_backend = False

    # -------------------------------------------------------------------------------------------------- run
    def warm_up(self):
        """Import Horovod's TensorFlow side in the background (TensorFlow takes seconds to import), so that the
        first job after `%dl_cluster start` does not pay for it; run() checks again and reports any problem."""
        import threading

        def check_quietly():
            try:
                backends.resolve(backends.AUTO, manual=False)
                self._backend_checked = True
                import ipywidgets  # noqa: F401  (the live view's, about a second between them)
                import plotly.graph_objects  # noqa: F401
            except Exception:
                pass
            finally:
                if builtins.__import__ is waiting:
                    builtins.__import__ = plain

        if not self._backend_checked:
            import builtins

            thread = threading.Thread(target=check_quietly, daemon=True, name="jdl-warm-up")
            plain = builtins.__import__
            waiting = _imports_wait_for(thread, plain)
            builtins.__import__ = waiting
            thread.start()

    def run(
        self, work, options: RunOptions, stdout=None, stderr=None, observers: Sequence[JobObserver] = ()
    ) -> RunResult:
        """Run the work on the cluster, telling the observers each phase, the start, each update and the end
        (whatever the outcome; see kernel/job/observer.py)."""
        options.validate()
        shipment = prepare(work)  # raises on bad input, before any engine is touched (or TensorFlow imported)
        options = self._with_backend(options, stderr)
        secret_values = secretsmod.resolve(options.secrets, self.secrets_file)
        n = options.n or (len(self.cluster.engine_ids()) if self.cluster.client else self.cluster.default_size())
        self.cluster.check_size(n)
        jr = JobRun(
            job=self._new_job(options, n),
            work=work,
            shipment=shipment,
            options=options,
            state=TrainingState(budget=self.point_budget),
            redact=secretsmod.Redactor(secret_values),
            secrets=secret_values,
            stdout=stdout,
            stderr=stderr,
            observers=observers,
        )
        job = jr.job
        t0 = time.perf_counter()
        try:
            holder = (
                self.pools.lease(job, n, stderr, options.device_kind, min_n=options.elastic_min)
                if options.pooled
                else contextlib.nullcontext()
            )
            with holder as ticket:
                jr.granted = ticket["devices"] if ticket else None
                lease = holder if ticket else None  # an elastic job's group follows the GPUs its lease holds
                outcomes, ars, ending = self._elastic_groups(jr, lease) if options.elastic else self._attempts(jr)
        except BaseException as exc:
            job.transition("cancelled" if isinstance(exc, KeyboardInterrupt) else "failed", error=str(exc))
            raise
        job.timings = jr.timings(t0, outcomes)
        result = RunResult(job=job, stdout=[jr.redact(ar.stdout or "") for ar in ars], state=jr.state)
        if jr.redact:
            outcomes = [outcomesmod.redacted(o, jr.redact) for o in outcomes]
        try:
            outcomesmod.finish(job, ending, outcomes, options.timeout, self.registry.store, self.cluster)
        finally:
            for observer in observers:
                observer.finished(job, jr.state)
            self._replace_worn_engines(jr, outcomes)
        with native_stderr_muted():  # rebuilding what came back may be this kernel's first TensorFlow use
            self._bring_back(jr, outcomes, result)
        return result

    def _replace_worn_engines(self, jr, outcomes):
        """Engines of this job that have made max_tf_contexts TensorFlow collective contexts are replaced now that
        the job is over (each context leaves a server TensorFlow cannot stop); the next job waits for the new ones."""
        if not self.max_tf_contexts or not self.cluster.owned:
            return
        worn = [
            eid
            for eid, outcome in zip(jr.job.engine_ids, outcomes)
            if (outcome or {}).get("tf_contexts", 0) >= self.max_tf_contexts
        ]
        if worn:
            print(
                f"[jupyter-dl] replacing engine{'' if len(worn) == 1 else 's'} {', '.join(map(str, worn))}: "
                f"{self.max_tf_contexts} TensorFlow collective groups formed there (each leaves threads and memory "
                "TensorFlow cannot free); the next job waits for the fresh ones",
                file=jr.stderr or sys.stderr,
                flush=True,
            )
            self.cluster.kill_and_replace(worn)

    def _new_job(self, options, n) -> Job:
        job = self.registry.add(
            Job(
                name=options.name or f"job-{len(self.registry.all()) + 1}",
                n=n,
                options={k: v for k, v in vars(options).items() if k != "name"},
                **_kernel_identity(),
            )
        )
        job.transition("starting")
        return job

    def _bring_back(self, jr, outcomes, result):
        """Fill the result of a job that succeeded from its ranks' outcomes."""
        result.probe = outcomes[0].get("probe")
        result.diverged = outcomes[0].get("diverged")
        if result.diverged:
            print(f"[jupyter-dl] warning: {result.diverged}", file=jr.stderr or sys.stderr, flush=True)
        if isinstance(jr.work, CellWork):
            trained_in_place = set(jr.shipment.names_in) - set(jr.shipment.names_out)
            trained_in_place |= set(outcomes[0].get("rebound_to_itself", []))  # `model = train_model(model)`
            held = outcomes[0].get("held", [])  # models and optimizers a notebook class's object holds
            receiver = jr.work.namespace
            if held:
                receiver = {**receiver, **held_keras.notebook_objects(receiver, held)}
                trained_in_place |= {entry[0] for entry in held}
            result.values, result.problems = payload.unpack(
                outcomes[0].get("values", {}), receiver, in_place=trained_in_place
            )
            for line in held_keras.put_back(result.values, result.problems, jr.work.namespace, held):
                print(f"[jupyter-dl] {line}", file=jr.stderr or sys.stderr, flush=True)
            result.deleted = list(jr.shipment.deletes)
            self._keep_results(jr.job, jr.work, result.values, outcomes[0].get("environment", {}), jr.stderr)
            _take_dtype_policy(outcomes[0].get("dtype_policy"))
            if outcomes[0].get("random_state") is not None and "keras" in sys.modules:  # seeded: go on from rank 0's
                random_state.restore(outcomes[0]["random_state"])
            for name, index, state in outcomes[0].get("object_states", []):  # callbacks and metrics it used
                try:
                    object_state.restore(
                        object_state.at(jr.work.namespace, name, index), state, _notebook_object(jr.work, result)
                    )
                except Exception as exc:  # the notebook's object changed shape meanwhile: say so, keep going
                    result.problems[name] = f"its state did not come back ({type(exc).__name__}: {exc})"
        else:
            picked = outcomes if jr.work.all_ranks else outcomes[:1]
            result.results = [payload.cloudpickle.loads(o["result"]) for o in picked]

    def _with_backend(self, options: RunOptions, stderr) -> RunOptions:
        """The options with the backend this job runs on (what `auto` resolves to, kept in the job's record); the
        first job on TensorFlow's collectives because Horovod is missing says so, once."""
        with native_stderr_muted():  # a Horovod build not checked before imports TensorFlow into the kernel
            name, note = backends.resolve(options.backend, options.manual)
        if note and not self._told_backend:
            print(note, file=stderr or sys.stderr, flush=True)
            self._told_backend = True
        return dataclasses.replace(options, backend=name)

    @staticmethod
    def _phase_text(n, backend_name, cold) -> str:
        library = "Horovod" if backend_name == "horovod" else "TensorFlow's collectives"
        importing = f"importing TensorFlow{' and Horovod' if backend_name == 'horovod' else ''}, " if cold else ""
        return f"{outcomesmod.rank_count(n)}: {importing}{library} rendezvous"

    def _attempts(self, jr: JobRun):
        """Run the job, and again after a failure while --restarts allows. Returns the last attempt's (outcomes,
        async results, Ending); its timings are left on `jr`."""
        job, n = jr.job, jr.job.n
        jr.attempt = 0
        while True:
            cold = self.cluster.client is None
            if cold:
                engines = max(n, self.cluster.default_size())
                jr.tell(f"starting the cluster: {engines} engine{'' if engines == 1 else 's'}")
            # After a failure this waits for the replacements of dead or killed engines; with GPUs granted, for all
            # of them, since the granted GPUs' engines may be among the replacements.
            self.cluster.ensure(max(n, self.cluster.expected) if jr.granted else n, progress=jr.tell if cold else None)
            ids = self._place(n, jr.granted, jr.options.device_kind)
            job.engine_ids = ids
            job.hosts = [info["hostname"] for info in self.cluster.describe(ids)]
            jr.cluster_ready_at = time.perf_counter()
            jr.shipped = placement.ship(self.cluster.client, ids, jr.shipment)
            jr.shipped_at = time.perf_counter()
            jr.tell(self._phase_text(n, jr.options.backend, cold))
            outcomes, ars, ending = self._execute(jr, ids)
            if ending.status not in ("failed", "stalled") or jr.attempt >= jr.options.restarts:
                return outcomes, ars, ending
            jr.attempt += 1
            self._restarting(jr, outcomesmod.failure_summary(ending, outcomes, jr.redact))

    def _elastic_groups(self, jr: JobRun, lease=None):
        """An elastic job (-n MIN:MAX): one group after another, each as large as the engines (and GPUs) free allow,
        until a group ends the cell. A group ends at a commit point when the kernel asks (engines came free, the pool
        wants GPUs back), or on lost ranks: the survivors go on from their commits in memory, joined by free engines
        up to MIN. Ranks lost ELASTIC_FUTILE_LOSSES times in a row without a commit between end the job (a cell that
        kills its rank every time would otherwise loop). Returns the last group's (outcomes, async
        results, Ending)."""
        job, options = jr.job, jr.options
        assert isinstance(options.n, int) and options.elastic_min is not None  # validate() made MIN:MAX these
        low, high = options.elastic_min, options.n
        groups = ElasticGroups(self.cluster, low, high, lease, self.elastic_grow_wait)
        survivors: list = []
        reason, at = "started", ""  # why the next group forms, and where the last one left ("after epoch 2")
        futile, commits_before = 0, 0  # losses in a row without a commit between them
        committed = False  # any rank of any group so far committed: survivors must hold a commit to go on
        while True:
            cold = self.cluster.client is None
            if cold:
                jr.tell(f"starting the cluster: {counted(high, 'engine')}, training begins with {low}")
            self.cluster.ensure_at_least(low, high, progress=jr.tell if cold else None)
            n = max(low, groups.target())
            ids = self._elastic_place(n, survivors, groups)
            previous = job.n
            job.engine_ids, job.n = ids, n
            job.hosts = [info["hostname"] for info in self.cluster.describe(ids)]
            if lease is not None:
                job.gpus = [f"{host}:{gpu}" for host, gpu in groups.hold(ids)]
            groups.record(n, reason)
            if jr.segment:
                self._regrouped(jr, previous, n, reason, at)
            job.membership = list(groups.changes)
            jr.cluster_ready_at = time.perf_counter()
            jr.shipped = placement.ship(self.cluster.client, ids, jr.shipment)
            jr.shipped_at = time.perf_counter()
            jr.tell(self._phase_text(n, options.backend, cold))
            outcomes, ars, ending = self._execute(jr, ids, groups)
            change = outcomes[0].get("membership_change") if ending.status == "ok" and outcomes[0] else None
            committed = committed or any((o or {}).get("commits", 0) for o in outcomes)
            if ending.status == "failed":  # ranks on a host cut off from the kernel are lost too, not just stopped
                outcomes = groups.lost_with_silent_hosts(ids, job.hosts, outcomes)
            left = elastic.survivors(ids, outcomes, committed) if ending.status == "failed" else []
            if change:
                survivors, reason, at = list(ids), change, outcomes[0].get("membership_at", "")
            elif left:
                commits = max(o.get("commits") or 0 for o in outcomes if o)
                futile = futile + 1 if commits <= commits_before else 1
                commits_before = max(commits, commits_before)
                if futile >= self.ELASTIC_FUTILE_LOSSES:
                    return outcomes, ars, ending
                # Fewer survivors than MIN wait for free engines (replacements are starting) to make up MIN.
                survivors, at = left, ""  # the survivors' last commit: the kernel does not know where it was
                reason = f"lost {_lost_ranks_text(job.hosts, outcomes)}"
            else:
                if ending.status == "failed" and elastic.survivors(ids, outcomes):  # only engines new to the job left
                    print(
                        f"[jupyter-dl] job {job.name!r}: lost {_lost_ranks_text(job.hosts, outcomes)}, the only "
                        "ranks holding the last commit; the others joined too late to hold it, so the job ends here",
                        file=jr.stderr or sys.stderr,
                        flush=True,
                    )
                return outcomes, ars, ending
            jr.segment += 1

    def _elastic_place(self, n, survivors, groups):
        """n engines for the next group: the survivors first (rank 0 holds the commit the others receive), their
        host's engines together (Horovod's local ranks); with GPUs from a pool, engines pinned to those."""
        live = groups.usable_engines()
        chosen = [eid for eid in survivors if eid in live] + [eid for eid in live if eid not in survivors]
        chosen = chosen[:n]
        hosts = [info["hostname"] for info in self.cluster.describe(chosen)]
        order = {}
        for host in hosts:
            order.setdefault(host, len(order))
        return [eid for _, eid in sorted(zip((order[h] for h in hosts), chosen), key=lambda pair: pair[0])]

    def _regrouped(self, jr: JobRun, before, after, reason, at=""):
        """Say where the cell, the job store and the live plot will show it: the job goes on with another group
        (from the commit `at`, "after epoch 2", where the ranks left together; from their last one after a loss)."""
        job = jr.job
        label = counted(after, "rank")
        record = {"kind": "restart", "attempt": jr.segment, "reason": reason, "label": label, "t": time.time()}
        jr.state.restarted(jr.segment, reason, label)
        if self.registry.store is not None:
            self.registry.store.append_metrics(job.id, [record])
        job.changed()
        print(
            f"[jupyter-dl] job {job.name!r}: {reason}; going on with {label} (was {before}) from the "
            + (f"commit {at}" if at else "last commit"),
            file=jr.stderr or sys.stderr,
            flush=True,
        )

    def _execute(self, jr: JobRun, ids, groups=None):
        """One attempt: rendezvous, start every rank, watch them until they end. Returns (outcomes, ars, Ending)."""
        client = self.cluster.client
        rendezvous = backends.named(jr.options.backend).Rendezvous(jr.job.hosts, self.collective_timeout, client, ids)
        try:
            address, interfaces = route(
                self.cluster, ids, rendezvous.port, self.rendezvous_address, self.network_interface, self.PROBE_TIMEOUT
            )
        except BaseException:
            rendezvous.stop()
            raise
        base = jr.rank_spec(len(ids), self.stall_timeout, self.resource_interval)
        board = ElasticBoard(address) if groups is not None else None  # ("": every address)
        if board is not None and not address:  # TensorFlow's collectives on several hosts: no server in the kernel,
            # so nothing has found the kernel's address the ranks reach yet; the board's own port finds it
            try:
                address = route(self.cluster, ids, board.port, self.rendezvous_address, "", self.PROBE_TIMEOUT)[0]
            except BaseException:
                board.stop()
                rendezvous.stop()
                raise
        if board is not None:
            base.elastic_board, base.segment = board.url(address), jr.segment
            base.commit_pace = (self.elastic_commit_steps, self.elastic_commit_seconds)
        try:
            environments = rendezvous.environments(address, interfaces)
            ars = [
                client[eid].apply_async(remote.RUN_RANK, dataclasses.replace(base, rank=r, env=environments[r]))
                for r, eid in enumerate(ids)
            ]
            jr.job.transition("running")
            if jr.attempt == 0 and jr.segment == 0:  # a restart, or an elastic job's next group, goes on in the view
                for observer in jr.observers:
                    observer.started(jr.job)
            relay = OutputRelay(dict(enumerate(ars)), jr.options.output, jr.stdout, jr.stderr, jr.redact)
            feed = MetricsFeed(
                jr.job,
                MetricsCollector(dict(enumerate(ars))),
                jr.state,
                jr.observers,
                self.registry.store,
                ars,
                jr.redact,
            )
            # An elastic job's survivors must leave by themselves to keep their commits: not killed before they
            # can see that a peer is gone.
            grace = self.stop_grace + (rendezvous.peer_loss_s if groups is not None else 0.0)
            monitor = Monitor(self.cluster, grace, self.poll_interval, self.PEER_PATIENCE, self.INTERRUPT_REPEAT)
            on_poll = on_failure = given_up = None
            if board is not None:

                def on_failure(rank, outcome):
                    if outcome.get("died"):  # its peers may be far from a collective that would show it
                        board.report_lost(f"rank {rank}'s engine died")

                def on_poll():
                    if board.requested is None:
                        try:
                            board.request(groups.wanted_change(ids))
                        except Exception:  # a free engine that died while we looked: the group runs on; look again
                            pass

                tell = backends.named(jr.options.backend).RELEASED_FROM_SILENT_HOSTS

                def given_up(pending):
                    return groups.lost_to_silence(board, ids, jr.job.hosts, pending, self.elastic_host_timeout, tell)

            outcomes, ending = monitor.watch(ids, ars, relay, feed, jr.options.timeout, on_poll, on_failure, given_up)
        finally:
            rendezvous.stop()
            if board is not None:
                board.stop()
        return outcomes, ars, ending

    def _place(self, n, granted=None, kind=None):
        """Choose n engines for the job's ranks (see launch.placement.place)."""
        return placement.place(self.cluster, n, granted, kind)

    @property
    def pools(self) -> PoolChoice:
        """Which GPU pool jobs started here take their GPUs from (pool/choice.py)."""
        url = self.pool_url or os.environ.get("JUPYTER_DL_POOL_URL", "")
        return PoolChoice(url, self.use_local_pool, self.cluster, self.local_pool)

    def _restarting(self, jr: JobRun, reason):
        """Record a restart where the notebook, the job store and the live plot will show it."""
        job, attempt = jr.job, jr.attempt
        record = {"kind": "restart", "attempt": attempt, "reason": reason, "t": time.time()}
        job.restarts.append({k: record[k] for k in ("attempt", "reason", "t")})
        jr.state.restarted(attempt, reason)
        if self.registry.store is not None:
            self.registry.store.append_metrics(job.id, [record])
        job.changed()
        print(
            f"[jupyter-dl] {reason}; restart {attempt} of {jr.options.restarts}, from the last checkpoint in "
            f"{jr.options.checkpoint_dir}",
            file=jr.stderr or sys.stderr,
            flush=True,
        )

    def _keep_results(self, job, work, values, environment, stderr):
        """Save what the job produced with it (jobs.results); a failure to save never fails the cell."""
        if self.registry.store is None:
            return
        t0 = time.perf_counter()
        try:
            notes = self.results.save(
                self.registry.store.job_dir(job.id),
                {name: value for name, value in values.items() if name != OUT_NAME},  # names the notebook binds
                work.code,
                job.options,
                {**environment, "hosts": job.hosts},
                work.namespace,
            )
        except Exception as exc:
            notes = [f"results not kept ({type(exc).__name__}: {exc})"]
        job.timings["results_s"] = time.perf_counter() - t0
        for note in notes:
            print(f"[jupyter-dl] job {job.name!r}: {note}", file=stderr or sys.stderr)


def _imports_wait_for(thread, plain_import):
    """`import` for while the warm-up thread imports TensorFlow: the notebook's own `import keras` (or TensorFlow,
    Horovod) waits for that thread first, since two threads importing TensorFlow at once see half-initialised modules
    (AttributeError: ... has no attribute 'DatasetV2'). Before the import machinery takes any module lock, so the
    thread never waits for one the notebook holds."""
    import threading

    heavy = ("tensorflow", "keras", "tf_keras", "horovod")

    def waiting(name, *args, **kwargs):
        if name.partition(".")[0] in heavy and thread.is_alive() and threading.current_thread() is not thread:
            thread.join()
        return plain_import(name, *args, **kwargs)

    return waiting


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


def _notebook_object(work, result):
    """resolve(name) for a callback's model: what the cell bound and brought back, else the notebook's object."""
    return lambda name: result.values[name] if name in result.values else work.namespace[name]


def _take_dtype_policy(name):
    """The global Keras dtype policy the cell ended with on rank 0 becomes the notebook's (a cell that sets
    mixed_float16 leaves it set in one process)."""
    if name is None or name == notebook_dtype_policy():
        return
    if name == "float32" and "keras" not in sys.modules:
        return  # the default: nothing to set, and no reason to load Keras here
    import keras

    keras.config.set_dtype_policy(name)


def _lost_ranks_text(hosts, outcomes) -> str:
    """'rank 1 on host-b', 'host host-b (ranks 2, 3)': the ranks an elastic group lost (a dead engine cannot be asked
    where it was)."""
    silent: dict = {}
    for rank, (host, outcome) in enumerate(zip(hosts, outcomes)):
        if outcome and outcome.get("ename") == "HostLost":
            silent.setdefault(host, []).append(rank)
    lost = [f"host {host} ({counted_ranks(ranks)})" for host, ranks in silent.items()]
    lost += [
        f"rank {r} on {host}"
        for r, (host, o) in enumerate(zip(hosts, outcomes))
        if o and not o.get("induced") and host not in silent
    ]
    return ", ".join(lost) or "a rank"
