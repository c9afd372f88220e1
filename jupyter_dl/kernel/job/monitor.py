"""Waiting for a job's ranks, and the one way every early end stops them (interrupt, repeat, then kill)."""

import math
import signal
import time
from dataclasses import dataclass, field

from jupyter_dl.host import stack_dumps


@dataclass
class Ending:
    """How a run of the ranks ended. status: ok, failed, timeout, stalled, cancelled or interrupted."""

    status: str = "ok"
    failed_order: list = field(default_factory=list)  # ranks in the order their failure was observed
    stalls: dict = field(default_factory=dict)  # rank -> its stall report


class Monitor:
    """Every way a job ends early (a rank failed, --timeout, a stall, a cancel, the stop button) goes through the
    same stop: interrupt the ranks still running, repeatedly, then kill and replace what is left after
    stop_grace. A second stop-button press while stopping only keeps the stop going."""

    def __init__(self, cluster, stop_grace, poll_interval, peer_patience, interrupt_repeat):
        self.cluster, self.stop_grace, self.poll_interval = cluster, stop_grace, poll_interval
        self.peer_patience, self.interrupt_repeat = peer_patience, interrupt_repeat

    def watch(self, ids, ars, relay, feed, timeout=None, on_poll=None, on_failure=None, given_up=None):
        """Wait for every rank, relaying output; on_poll(), when given, runs once a round while no stop is under
        way (an elastic job decides there whether to ask for a change); on_failure(rank, outcome) once per rank that
        failed, as soon as it is seen; given_up(pending ranks), every round, returns {rank: outcome} for ranks not to
        wait for any longer (their host went silent). Returns (outcome per rank, Ending)."""
        self._on_failure = on_failure
        outcomes = [None] * len(ars)
        ending = Ending()
        self._stop_at, self._signalled_at = None, -math.inf  # never signalled (not 0: uptime)
        # After ranks were given up (their host went silent) the others wait in native code for the collectives'
        # own end: an interrupt cannot reach them there, and one that lands as they fail garbles their error.
        self._quiet = False
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while True:
                try:
                    if self._poll(ids, ars, relay, feed, outcomes, ending, deadline):
                        break
                    if on_poll is not None and self._stop_at is None:
                        on_poll()
                    if given_up is not None:
                        for rank, outcome in given_up([r for r, o in enumerate(outcomes) if o is None]).items():
                            outcomes[rank] = outcome
                            ending.failed_order.append(rank)
                            self._quiet = True
                except KeyboardInterrupt:
                    if ending.status != "interrupted":
                        ending.status, self._stop_at, self._signalled_at = "interrupted", time.monotonic(), -math.inf
        finally:
            for r, ar in enumerate(ars):
                if outcomes[r] is not None and outcomes[r].get("ok"):
                    ar.wait_for_output(timeout=2)  # metrics published just before the reply may trail it
            relay.pump(final=True)
            feed.pump(final=True)
        if ending.status == "ok" and ending.failed_order:
            ending.status = "failed"
        ending.stalls = dict(feed.stalls)
        died = [ids[r] for r, o in enumerate(outcomes) if o and o.get("died")]
        if died:
            self.cluster.replace_dead(died)  # so the next cell finds as many engines as before
        return outcomes, ending

    def _poll(self, ids, ars, relay, feed, outcomes, ending, deadline) -> bool:
        """One round: collect finished ranks, relay, decide whether to stop. True when no rank is left."""
        for r, ar in enumerate(ars):
            if outcomes[r] is None and ar.ready():
                outcomes[r] = outcome_of(r, ar)
                if not outcomes[r]["ok"]:
                    ending.failed_order.append(r)
                    if self._on_failure is not None:
                        self._on_failure(r, outcomes[r])
        relay.pump()
        feed.pump()
        pending = [r for r, o in enumerate(outcomes) if o is None]
        if not pending:
            return True
        now = time.monotonic()
        if self._stop_at is None:
            if ending.failed_order:
                self._stop_at = now  # Horovod's shutdown should release the others; give it a moment
            elif deadline is not None and now > deadline:
                ending.status, self._stop_at = "timeout", now
            elif feed.stalls:
                ending.status, self._stop_at = "stalled", now
            elif feed.cancel_requested():
                ending.status, self._stop_at = "cancelled", now
        if self._stop_at is not None:
            # Ranks that reported a stall wait in native code no interrupt reaches; when only they are left,
            # nobody will release them.
            deadlocked = ending.status == "stalled" and set(pending) <= set(feed.stalls)
            if deadlocked or now - self._stop_at > self.stop_grace:
                self._kill(ids, pending, outcomes)
                return True
            # After a rank failed, Horovod's shutdown releases peers waiting in a collective; peers busy elsewhere
            # need an interrupt. Repeat it: a rank that had not started its code ignores one.
            patience = self.peer_patience if ending.status == "ok" else 0.0
            due = now - self._stop_at >= patience and now - self._signalled_at >= self.interrupt_repeat
            if due and not (self._quiet and ending.status == "ok"):  # (a stop-button press still interrupts)
                self._signalled_at = now
                self._interrupt([ids[r] for r in pending])
        ars[pending[0]].wait(self.poll_interval)
        return False

    def _interrupt(self, engine_ids):
        if engine_ids:
            self.cluster.client.send_signal(signal.SIGINT, targets=engine_ids, block=False)

    def _kill(self, ids, pending, outcomes):
        engines = [ids[r] for r in pending]
        stacks = self._dump_stacks(engines)
        for r, where in zip(pending, stacks):
            outcomes[r] = {
                "rank": r,
                "ok": False,
                "induced": True,
                "ename": "Killed",
                "evalue": f"did not stop within {self.stop_grace:.0f}s; engine {ids[r]} killed and replaced{where}",
                "traceback": "",
            }
        self.cluster.kill_and_replace(engines)

    def _dump_stacks(self, engines) -> list:
        """Ask the stuck engines for their threads' stacks (host/stack_dumps.py) before they are killed; for each,
        the words that say where the stacks are ('' where that is not known)."""
        try:
            infos = self.cluster.described(engines)  # remembered from placing the ranks: a stuck engine is not asked
            self.cluster.client.send_signal(stack_dumps.SIGNAL, targets=engines, block=False)
        except Exception:  # an engine already gone: kill what is left all the same
            return [""] * len(engines)
        time.sleep(stack_dumps.WRITE_S)
        return [
            f" (its threads' stacks: {stack_dumps.path_for(info['pid'])} on {info['hostname']})"
            if info.get("pid")
            else ""
            for info in infos
        ]


def outcome_of(rank, ar):
    """The rank's structured outcome; an engine that died or a failure outside our wrapper becomes one too."""
    try:
        return ar.get()
    except Exception as exc:  # EngineError (engine died), RemoteError (failed before our wrapper ran)
        from ipyparallel.error import EngineError

        render = getattr(exc, "render_traceback", None)
        tb = "\n".join(render()) if callable(render) else str(exc)
        return {
            "rank": rank,
            "ok": False,
            "induced": False,
            "ename": getattr(exc, "ename", type(exc).__name__),
            "evalue": getattr(exc, "evalue", str(exc)),
            "traceback": tb,
            # ipyparallel reports a dead engine as EngineError, raised directly or wrapped in a RemoteError
            "died": isinstance(exc, EngineError) or getattr(exc, "ename", "") == "EngineError",
        }
