"""Kernel side of an elastic job (`-n MIN:MAX`): how many ranks each group gets, when to ask the ranks to change,
and which ranks survive a loss.

The job runs as a sequence of groups. A group ends at a commit point when the kernel asks (engines came free and
are ready: grow; the GPU pool wants GPUs back for someone waiting: shrink), or when ranks are lost (their engines
died, or their host went silent): the survivors form the next group at once from the commits in their memory
(with free engines, up to MIN at least), and the job grows back as replacement engines come up. Every change is
recorded with its reason, for the cell, the job store and the panel.
"""

import time

from jupyter_dl.cluster.size_checks import counted
from jupyter_dl.kernel.job.lost_hosts import counted_ranks, silent_hosts
from jupyter_dl.kernel.job.placement import gpu_key, gpu_keys, gpu_of
from jupyter_dl.wire import remote


class ElasticGroups:
    READY_CHECK_S = 1.0  # seconds between looks for free engines that finished importing TensorFlow

    def __init__(self, cluster, min_n: int, max_n: int, lease=None, grow_wait=10.0):
        self.cluster, self.min_n, self.max_n, self.lease = cluster, min_n, max_n, lease
        self.grow_wait = grow_wait  # seconds to wait for engines still starting before growing into the ready ones
        self._ready_since: float | None = None
        self.changes: list = []  # {"t", "n", "reason"} per group, the first included
        self._checked_at = -float("inf")
        self._pending_check = None  # (engine ids, AsyncResult) of the last readiness look
        # Engines on a host cut off from the kernel: ipyparallel lists them for ~30 s more, but no group may use them
        self.unreachable: set = set()

    def _live(self) -> list:
        return [eid for eid in self.cluster.engine_ids() if eid not in self.unreachable]

    # --------------------------------------------------------------------------------------- group sizes
    def usable_engines(self) -> list:
        """Live engines a group may use: all of them, or with a pool's lease on GPU engines, those pinned to the GPUs
        it holds (CPU engines take simulated GPUs, one per rank)."""
        live = self._live()
        if self.lease is None:
            return live
        infos = self.cluster.describe(live)
        if not any(info.get("gpu") for info in infos):
            return live[: len(self.lease.devices())]
        held = gpu_keys(self.lease.devices())
        return [eid for eid, info in zip(live, infos) if gpu_of(info) in held]

    def available(self) -> int:
        """Ranks the next group can have now: usable engines, at most MAX."""
        return min(len(self.usable_engines()), self.max_n)

    def target(self) -> int:
        """The next group's size: what is available, and no more than the pool's shrink request leaves."""
        shrink = self._shrink_request()
        return min(self.available(), shrink[0]) if shrink is not None else self.available()

    def hold(self, ids) -> list:
        """Keep the GPUs of the group on `ids` and give the pool back the rest when it asked for them. Returns the
        GPUs held."""
        held = self.lease.devices()
        pinned = self.cluster.describe(ids)
        if any(info.get("gpu") for info in pinned):
            wanted = {gpu_of(info) for info in pinned}
            keep = [(host, gpu) for host, gpu in held if gpu_key(host, gpu) in wanted]
        else:  # CPU engines (GPUs simulated by the pool): any of them, one per rank
            keep = held[: len(ids)]
        if len(keep) < len(held) and self._shrink_request() is not None:
            return self.lease.resize(keep)
        return held

    def _shrink_request(self):
        return self.lease.shrink_request() if self.lease is not None else None

    def lost_with_silent_hosts(self, ids, hosts, outcomes) -> list:
        """The failed group's outcomes with the ranks of each host that stopped answering (its link or the host is
        down) marked lost, as a dead engine's are: the others go on without them. Those engines are left out of
        every later group."""
        if len(set(hosts)) < 2:
            return outcomes
        unknown = [rank for rank, eid in enumerate(ids) if eid not in self.unreachable]  # (not found by heartbeats)
        silent = silent_hosts(self.cluster.client, [ids[r] for r in unknown], [hosts[r] for r in unknown])
        marked = list(outcomes)
        for host, ranks in silent.items():
            for rank in (unknown[r] for r in ranks):
                self.unreachable.add(ids[rank])
                marked[rank] = _host_lost(f"host {host} stopped answering")
        return marked

    def lost_to_silence(self, board, ids, hosts, pending, timeout, tell_peers=True) -> dict:
        """While a group runs: {rank: outcome} for the ranks of each host whose heartbeats (elastic_board.py) stopped
        for `timeout` seconds, marked lost, as a dead engine's are: the job no longer waits for them. With
        `tell_peers`, their peers hear it from the board and end their waits for them at once, instead of after the
        collective timeout. Their engines are left out of every later group, and killed and replaced where the
        cluster can."""
        if timeout <= 0 or len(set(hosts)) < 2:
            return {}
        silent = {
            host: ranks
            for host, ranks in board.silent_hosts(hosts, pending, timeout).items()
            if not any(ids[rank] in self.unreachable for rank in ranks)  # told once
        }
        lost: dict = {}
        for host, ranks in silent.items():
            engines = [ids[rank] for rank in ranks]
            self.unreachable.update(engines)
            why = f"host {host} stopped answering (no heartbeat for {timeout:g}s)"
            lost.update({rank: _host_lost(why) for rank in ranks})
            if tell_peers:
                board.report_lost(f"host {host} ({counted_ranks(ranks)}) stopped answering")
            self.cluster.kill_and_replace(engines)
        return lost

    def record(self, n, reason):
        self.changes.append({"t": time.time(), "n": n, "reason": reason})

    # --------------------------------------------------------------------------------- while a group runs
    def wanted_change(self, ids) -> str | None:
        """Why the running group on `ids` should change now, or None. Called from the job's watch loop."""
        shrink = self._shrink_request()
        if shrink is not None and shrink[0] < len(ids):
            return f"shrank: {shrink[1]}"
        if shrink is not None:  # GPUs lent to the job that no rank uses: back at once, no change of group needed
            self.hold(ids)
            return None
        if len(ids) >= self.max_n:
            return None
        ready = self._ready_free_engines(ids)
        if ready is None:  # no new look yet
            return None
        if not ready or self.available() <= len(ids):
            self._ready_since = None
            return None
        self._ready_since = self._ready_since or time.monotonic()
        # Each change costs a commit point and a new group: grow once, into every engine that is starting, unless
        # that makes the ready ones wait too long.
        starting = self.cluster.expected - len(self.cluster.engine_ids())
        everyone = len(ready) == len([eid for eid in self._live() if eid not in ids]) and starting <= 0
        enough = len(ids) + len(ready) >= self.max_n
        if everyone or enough or time.monotonic() - self._ready_since >= self.grow_wait:
            return f"grew: {counted(min(self.available(), self.max_n) - len(ids), 'engine')} free"
        return None

    def _ready_free_engines(self, ids):
        """Engines outside the group that have TensorFlow imported (a group waiting for an import would stall the
        job for seconds), or None when there is no new answer: looked at once a second without blocking the watch
        loop."""
        if self._pending_check is not None:
            checked, ar = self._pending_check
            if not ar.ready():
                return None
            self._pending_check = None
            try:
                return [eid for eid, ready in zip(checked, ar.get()) if ready]
            except Exception:  # an engine died meanwhile: look again next time
                return None
        now = time.monotonic()
        if now - self._checked_at < self.READY_CHECK_S:
            return None
        self._checked_at = now
        free = [eid for eid in self._live() if eid not in ids]
        if not free:
            return []
        self.cluster.describe(free)  # starts their import of TensorFlow, once
        self._pending_check = (free, self.cluster.client.direct_view(free).apply_async(remote.PRELOADED))
        return None


def _host_lost(why) -> dict:
    """The outcome of a rank whose host was cut off: lost, as a dead engine's rank is (survivors() tells them apart)."""
    return {"ok": False, "ename": "HostLost", "evalue": why}


def survivors(ids, outcomes, committed=False) -> list:
    """Engines of a group that ended on lost ranks and can lead the next: their rank left the job cleanly (it only
    failed because a peer was lost), so it holds the last commit. Empty when a rank failed on its own (the cell's
    error: every group would fail the same way). Once the job has `committed`, a rank that made no commit of its own
    (an engine new to the job, lost its leader before the first epoch end) holds nothing to go on from: it would
    silently train from the first epoch again, so it does not count."""
    lost = [o for o in outcomes if o and (o.get("died") or o.get("ename") == "HostLost")]
    own = [o for o in outcomes if o and not o.get("ok") and not _left_after_a_loss(o) and o not in lost]
    if not lost or own:
        return []
    holds = [(o or {}).get("commits", 0) > 0 or not committed for o in outcomes]
    return [eid for eid, o, held in zip(ids, outcomes, holds) if o and _left_after_a_loss(o) and held]


def _left_after_a_loss(outcome) -> bool:
    """A rank that left because a peer was lost: it failed in a collective the lost rank never finished, or the kernel
    interrupted it (it was busy outside a collective); its commits are intact either way. Killed ones are gone."""
    return outcome.get("ename") != "Killed" and (outcome.get("induced") or outcome.get("ename") == "KeyboardInterrupt")
