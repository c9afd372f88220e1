"""Kernel side of an elastic job (`-n MIN:MAX`): how many ranks each group gets, when to ask the ranks to change,
and which ranks survive a loss.

The job runs as a sequence of groups. A group ends at a commit point when the kernel asks (engines came free and
are ready: grow; the GPU pool wants GPUs back for someone waiting: shrink), or when ranks are lost (their engines
died, or their host went silent): the survivors, if at least MIN, form the next group at once from the commits in
their memory, and the job grows back as replacement engines come up. Every change is recorded with its reason, for
the cell, the job store and the panel.
"""

import time

from jupyter_dl.cluster.size_checks import counted
from jupyter_dl.wire import remote


class ElasticGroups:
    READY_CHECK_S = 1.0  # seconds between looks for free engines that finished importing TensorFlow

    def __init__(self, cluster, min_n: int, max_n: int, lease=None):
        self.cluster, self.min_n, self.max_n, self.lease = cluster, min_n, max_n, lease
        self.changes: list = []  # {"t", "n", "reason"} per group, the first included
        self._checked_at = -float("inf")
        self._pending_check = None  # (engine ids, AsyncResult) of the last readiness look

    # --------------------------------------------------------------------------------------- group sizes
    def available(self) -> int:
        """Ranks the next group can have now: free engines (and, with a pool, granted GPUs), at most MAX."""
        engines = len(self.cluster.engine_ids())
        if self.lease is not None and hasattr(self.lease, "devices"):
            engines = min(engines, len(self.lease.devices()))
        return min(engines, self.max_n)

    def order(self, ids, survivors):
        """The engines of the next group with a survivor first: rank 0 broadcasts the commit it holds."""
        kept = [eid for eid in ids if eid in survivors]
        return kept + [eid for eid in ids if eid not in survivors]

    def record(self, n, reason):
        self.changes.append({"t": time.time(), "n": n, "reason": reason})

    # --------------------------------------------------------------------------------- while a group runs
    def wanted_change(self, ids) -> str | None:
        """Why the running group on `ids` should change now, or None. Called from the job's watch loop."""
        shrink = (
            self.lease.shrink_request() if self.lease is not None and hasattr(self.lease, "shrink_request") else None
        )
        if shrink is not None and shrink[0] < len(ids):
            return f"shrank: {shrink[1]}"
        if len(ids) >= self.max_n:
            return None
        ready = self._ready_free_engines(ids)
        if ready and self.available() > len(ids):
            more = self.available() - len(ids)
            return f"grew: {counted(more, 'engine')} free"
        return None

    def _ready_free_engines(self, ids):
        """Engines outside the group that have TensorFlow imported (a group waiting for an import would stall the
        job for seconds); looked at once a second without blocking the watch loop."""
        if self._pending_check is not None:
            checked, ar = self._pending_check
            if not ar.ready():
                return []
            self._pending_check = None
            try:
                return [eid for eid, ready in zip(checked, ar.get()) if ready]
            except Exception:  # an engine died meanwhile: look again next time
                return []
        now = time.monotonic()
        if now - self._checked_at < self.READY_CHECK_S:
            return []
        self._checked_at = now
        free = [eid for eid in self.cluster.engine_ids() if eid not in ids]
        if free:
            self.cluster.describe(free)  # starts their import of TensorFlow, once
            self._pending_check = (free, self.cluster.client.direct_view(free).apply_async(remote.PRELOADED))
        return []


def survivors(ids, outcomes) -> list:
    """Engines of a group that ended on lost ranks and can lead the next: their rank left the job cleanly (it only
    failed because a peer was lost), so it holds the last commit. Empty when a rank failed on its own (the cell's
    error: every group would fail the same way)."""
    lost = [o for o in outcomes if o and (o.get("died") or o.get("ename") == "HostLost")]
    own = [o for o in outcomes if o and not o.get("ok") and not o.get("induced") and o not in lost]
    if not lost or own:
        return []
    return [eid for eid, o in zip(ids, outcomes) if o and o.get("induced") and o.get("ename") != "Killed"]
