"""A GPU pool with gang (all-or-nothing) admission, fair queueing across users, quotas and leases that expire.

Pure logic with an injected clock, so the same code runs embedded in a kernel, inside the `jupyter-dl-pool`
service, and in bench/pool_trace.py's simulation:
- A job asks for N GPUs. It gets all N at once or none: nothing is ever held while waiting.
- The queue is ordered by priority, then by how many GPUs the user already holds (fair share), then by arrival.
- Smaller jobs may start ahead of a waiting head job (backfill) while GPUs would otherwise idle, until the head has
  waited `reserve_after` seconds; from then on GPUs are kept for it, so no job starves.
- Quotas per user: most GPUs held at once, most jobs running at once. A request larger than the user's GPU quota,
  or the whole pool, is refused at once with what to do; one that only has to wait says why and where it stands.
- A lease lives while its owner (a kernel) sends heartbeats; when they stop for `lease_ttl` seconds the GPUs return.
- Elastic jobs (`min_gpus` < `gpus`, issue 27) are admitted like any gang on their minimum, then borrow idle GPUs up
  to their maximum; when another job waits and the borrowed GPUs would let it start, the pool asks elastic jobs to
  give them back (`shrink_to`), and the job does so at its next commit point (`resize`). See `schedule`. A job
  that ignores a request for `shrink_grace` seconds is still asked, never robbed (its ranks run on those GPUs), but
  borrows no more; a dead kernel's lease expires as any other.
"""

import time
from dataclasses import asdict, dataclass, field

from jupyter_dl.errors import UsageError


@dataclass
class Quota:
    max_gpus: int | None = None  # GPUs one user may hold at once (None: no limit)
    max_jobs: int | None = None  # jobs one user may run at once


@dataclass
class Ticket:
    id: str
    user: str
    gpus: int
    priority: int = 0
    job: str = ""
    owner: str = ""  # who heartbeats for it (a kernel id)
    submitted: float = 0.0
    state: str = "queued"  # queued | granted | released | cancelled | expired
    granted: float | None = None
    ended: float | None = None
    devices: list = field(default_factory=list)  # [(host, gpu index)] while granted
    reason: str = ""  # why it waits
    last_seen: float = 0.0
    allowed: list = field(default_factory=list)  # [(host, gpu index)] it may be placed on; empty: any
    # Elastic tickets only (min_gpus set; `gpus` is then the most it grows to).
    min_gpus: int | None = None
    shrink_to: int | None = None  # the pool asks the job to keep only this many GPUs (None: no request)
    shrink_reason: str = ""  # whose wait the request is for
    shrink_since: float | None = None  # when the current request was first made
    shrink_overdue: bool = False  # ignored a request for `shrink_grace` seconds: it borrows no more GPUs

    @property
    def elastic(self) -> bool:
        return self.min_gpus is not None

    @property
    def need(self) -> int:
        """GPUs it must have at once to start: all of them, or an elastic job's minimum."""
        return self.min_gpus if self.min_gpus is not None else self.gpus

    @property
    def held(self) -> int:
        if self.state != "granted":
            return 0
        return len(self.devices) if self.elastic else self.gpus

    @property
    def surplus(self) -> int:
        """GPUs above its minimum that an elastic job holds: what the pool may ask back."""
        return self.held - self.need if self.elastic else 0

    def as_dict(self):
        return asdict(self)


class PoolError(UsageError):
    """A request the pool refuses; the message says what to do."""


class UnknownTicket(PoolError):
    """No such ticket for this user (another user's tickets are reported the same way)."""


class GangPool:
    def __init__(
        self,
        inventory: dict,
        quotas: dict | None = None,
        default_quota: Quota | None = None,
        lease_ttl=60.0,
        reserve_after=3600.0,
        clock=time.monotonic,
        first_id=1,
        shrink_grace=60.0,
    ):
        self.inventory = {host: list(gpus) for host, gpus in inventory.items()}
        self.quotas = dict(quotas or {})
        self.default_quota = default_quota or Quota()
        self.lease_ttl = lease_ttl
        self.reserve_after = reserve_after
        self.shrink_grace = shrink_grace
        self.clock = clock
        self.tickets: dict = {}
        self._free = {host: list(gpus) for host, gpus in self.inventory.items()}
        self._next_id = first_id

    # ------------------------------------------------------------------------------------------- requests
    @property
    def size(self):
        return sum(len(g) for g in self.inventory.values())

    def quota(self, user) -> Quota:
        return self.quotas.get(user, self.default_quota)

    def submit(self, user, gpus, priority=0, job="", owner="", allowed=(), min_gpus=None) -> Ticket:
        """Queue a request for `gpus` GPUs (only among `allowed` ones when given: the GPUs a kernel's engines are
        pinned to) and grant what can be granted now. Refuses impossible requests. With `min_gpus` < `gpus` the
        job is elastic: it starts on `min_gpus` and grows toward `gpus` (both checked like a fixed job's size)."""
        if min_gpus is not None and not 1 <= min_gpus <= gpus:
            raise PoolError(f"an elastic job needs 1 <= MIN <= MAX GPUs (asked for {min_gpus}:{gpus})")
        if min_gpus == gpus:
            min_gpus = None  # n:n is a fixed job
        allowed = sorted({tuple(d) for d in allowed})
        if allowed:
            allowed = [(host, gpu) for host, gpu in allowed if gpu in self.inventory.get(host, [])]
            if not allowed:
                raise PoolError(
                    "none of the GPUs this job may use are in the pool: start the cluster's engines on the pool's GPUs"
                )
        size = len(allowed) if allowed else self.size
        if gpus < 1:
            raise PoolError(f"a job needs at least 1 GPU (asked for {gpus})")
        if gpus > size:
            raise PoolError(
                f"asked for {gpus} GPUs; the pool has {size} in all"
                f"{' for this cluster' if allowed else ''}: ask for at most {size}"
            )
        quota = self.quota(user)
        if quota.max_gpus is not None and gpus > quota.max_gpus:
            raise PoolError(
                f"asked for {gpus} GPUs; {user}'s quota is {quota.max_gpus} at once: ask for at most "
                f"{quota.max_gpus}, or ask an admin to raise the quota"
            )
        now = self.clock()
        ticket_id, self._next_id = f"t{self._next_id}", self._next_id + 1
        ticket = Ticket(ticket_id, user, gpus, priority, job, owner, submitted=now, last_seen=now, allowed=allowed)
        ticket.min_gpus = min_gpus
        self.tickets[ticket.id] = ticket
        self.schedule()
        return ticket

    def cancel(self, ticket_id, user, admin=False) -> Ticket:
        """Withdraw a request, or stop holding GPUs for a job that will not run."""
        return self._close(ticket_id, user, admin, "cancelled")

    def release(self, ticket_id, user, admin=False) -> Ticket:
        """The job ended (succeeded, failed or was cancelled): its GPUs go back."""
        return self._close(ticket_id, user, admin, "released")

    def resize(self, ticket_id, user, keep_devices, admin=False) -> Ticket:
        """An elastic job now runs on `keep_devices` only (a subset of what it holds, at least its minimum): the
        others go back to the pool, to the job that waits for them first."""
        ticket = self.owned(ticket_id, user, admin)
        if ticket.state != "granted":
            raise PoolError(f"job {ticket_id!r} holds no GPUs ({ticket.state}): there is nothing to resize")
        if not ticket.elastic:
            raise PoolError(
                f"job {ticket_id!r} has a fixed size of {ticket.gpus} GPUs: only an elastic job (-n MIN:MAX) "
                f"can be resized; release it instead"
            )
        keep = list(dict.fromkeys(tuple(d) for d in keep_devices))
        foreign = [d for d in keep if d not in ticket.devices]
        if foreign:
            raise PoolError(
                f"job {ticket_id!r} does not hold {foreign}: keep only GPUs among the {len(ticket.devices)} it holds"
            )
        if len(keep) < ticket.need:
            raise PoolError(
                f"job {ticket_id!r} must keep at least {ticket.need} GPUs (its minimum), not {len(keep)}: "
                f"to stop, release it"
            )
        for host, gpu in ticket.devices:
            if (host, gpu) not in keep:
                self._free[host].append(gpu)
                self._free[host].sort()
        ticket.devices = [d for d in ticket.devices if d in keep]
        self.schedule()  # also withdraws the request when it is met, or asks for the rest
        return ticket

    def tick(self):
        """The service's periodic call: expire silent leases, and keep elastic requests current (their grace is
        measured in time, not only on requests)."""
        self.expire()
        if any(t.elastic and t.state == "granted" for t in self.tickets.values()):
            self.schedule()

    def _close(self, ticket_id, user, admin, state):
        ticket = self.owned(ticket_id, user, admin)
        if ticket.state in ("queued", "granted"):
            self._end(ticket, state)
            self.schedule()
        return ticket

    def heartbeat(self, owner, user=None):
        """The owner (a kernel) is alive: its tickets are kept. With `user`, only that user's: an owner id is not a
        credential."""
        now = self.clock()
        for ticket in self.tickets.values():
            if ticket.owner == owner and ticket.state in ("queued", "granted") and user in (None, ticket.user):
                ticket.last_seen = now

    def drop_owner(self, owner, state="expired"):
        """End every open ticket of an owner known to be gone (a kernel whose process has exited)."""
        dropped = [t for t in self.tickets.values() if t.owner == owner and t.state in ("queued", "granted")]
        for ticket in dropped:
            self._end(ticket, state)
        if dropped:
            self.schedule()
        return dropped

    def expire(self):
        """End the tickets whose owner stopped sending heartbeats (its kernel died): nothing leaks."""
        now = self.clock()
        expired = [
            t
            for t in self.tickets.values()
            if t.state in ("queued", "granted") and t.owner and now - t.last_seen > self.lease_ttl
        ]
        for ticket in expired:
            self._end(ticket, "expired")
        if expired:
            self.schedule()
        return expired

    # ------------------------------------------------------------------------------------------ scheduling
    def queue(self):
        """Queued tickets in the order they will be served."""
        held = self._held_by_user()
        waiting = [t for t in self.tickets.values() if t.state == "queued"]
        return sorted(waiting, key=lambda t: (-t.priority, held.get(t.user, 0), t.submitted, t.id))

    def position(self, ticket_id) -> int | None:
        """1-based place in the queue, or None when not queued."""
        for i, ticket in enumerate(self.queue(), 1):
            if ticket.id == ticket_id:
                return i
        return None

    def schedule(self):
        """Grant queued tickets, whole (an elastic one: its minimum) or not at all, in queue order; backfill until
        the head is reserved. A ticket that cannot start on the free GPUs, but could with what elastic jobs hold
        above their minimum, has those asked back (`_reclaim`) and keeps the free ones meanwhile. Last, elastic
        jobs borrow the GPUs still free (`_grow`). Without elastic tickets this is the fixed-size pool unchanged."""
        now = self.clock()
        granted = []
        reserved = False
        kept: set = set()  # free GPUs kept for jobs that elastic jobs are shrinking for
        asks: dict = {}  # elastic ticket id -> [GPUs asked back, why]
        lenders = self._elastic_granted()  # those admitted below hold their minimum: nothing to give
        for ticket in self.queue():
            blocked = self._quota_block(ticket)
            if blocked:
                if not (lenders and self._reclaim_own(ticket, lenders, kept, asks)):
                    ticket.reason = blocked
                continue
            if reserved:
                ticket.reason = "waiting: GPUs are kept for an earlier job that has waited long"
                continue
            devices = self._place(ticket.need, ticket.allowed, kept)
            if devices is None:
                if lenders and self._reclaim(ticket, lenders, kept, asks):
                    continue
                free = self.free_count(ticket.allowed)
                ticket.reason = f"waiting for {ticket.need} GPUs to be free at once ({free} free now)"
                if now - ticket.submitted >= self.reserve_after:
                    reserved = True  # no more backfill: the next GPUs freed are this job's
                continue
            self._grant(ticket, devices, now)
            granted.append(ticket)
        self._ask(lenders, asks, now)
        self._grow(kept)
        return granted

    # ------------------------------------------------------------------------------------------- elastic
    def _elastic_granted(self):
        return [t for t in self.tickets.values() if t.elastic and t.state == "granted"]

    def _reclaim(self, waiter, lenders, kept, asks) -> bool:
        """Ask elastic jobs to give back what `waiter` lacks, lowest priority first, then largest surplus, when
        their surplus covers it; keep the free GPUs for it meanwhile. False (nothing asked) when even all the
        surplus would not let it start: a job is never shrunk for nothing."""
        allowed = set(waiter.allowed)
        free = [(h, g) for h, gpus in self._usable(waiter.allowed).items() for g in gpus if (h, g) not in kept]
        short = waiter.need - len(free)
        donors = []
        for ticket in lenders:
            surplus = ticket.surplus - asks.get(ticket.id, [0])[0]
            if allowed:  # only GPUs the waiter may run on help it
                surplus = min(surplus, sum(d in allowed for d in ticket.devices) - asks.get(ticket.id, [0])[0])
            if surplus > 0:
                donors.append((ticket.priority, -surplus, ticket.id, surplus))
        if sum(d[-1] for d in donors) < short:
            return False
        why = f"job {waiter.job or waiter.id} of {waiter.user} waits for {waiter.need} GPUs"
        for _, _, ticket_id, surplus in sorted(donors):
            give = min(surplus, short)
            ask = asks.setdefault(ticket_id, [0, why])
            ask[0] += give
            short -= give
            if not short:
                break
        kept.update(free)
        waiter.reason = (
            f"waiting for {waiter.need} GPUs ({len(free)} free now): elastic jobs are asked to give back "
            f"{waiter.need - len(free)}"
        )
        return True

    def _reclaim_own(self, waiter, lenders, kept, asks) -> bool:
        """A job held back only by its user's GPU quota, while that user's own elastic jobs borrow GPUs above their
        minimum: ask those back (they count against the quota only while held), as much as the quota is exceeded,
        and keep free GPUs for the job meanwhile. False when that would not let it start (its job count is over the
        quota, or the GPUs it frees plus the free ones are still too few)."""
        quota = self.quota(waiter.user)
        running = [t for t in self.tickets.values() if t.user == waiter.user and t.state == "granted"]
        if quota.max_gpus is None or (quota.max_jobs is not None and len(running) >= quota.max_jobs):
            return False
        over = sum(t.held for t in running) + waiter.need - quota.max_gpus
        allowed = set(waiter.allowed)
        free = [(h, g) for h, gpus in self._usable(waiter.allowed).items() for g in gpus if (h, g) not in kept]
        donors = []
        for ticket in lenders:
            if ticket.user != waiter.user:
                continue
            surplus = ticket.surplus - asks.get(ticket.id, [0])[0]
            freed_here = surplus if not allowed else min(surplus, sum(d in allowed for d in ticket.devices))
            if surplus > 0:
                donors.append((ticket.priority, -surplus, ticket.id, surplus, freed_here))
        if sum(d[3] for d in donors) < over:
            return False
        plan, short = [], over
        for _, _, ticket_id, surplus, freed_here in sorted(donors):
            give = min(surplus, short)
            plan.append((ticket_id, give, min(give, freed_here)))
            short -= give
            if not short:
                break
        if len(free) + sum(usable for _, _, usable in plan) < waiter.need:
            return False  # within the quota then, but still without GPUs enough: shrink nobody for nothing
        why = f"job {waiter.job or waiter.id} of {waiter.user} waits within {waiter.user}'s quota"
        for ticket_id, give, _ in plan:
            ask = asks.setdefault(ticket_id, [0, why])
            ask[0] += give
        kept.update(free[: waiter.need])
        waiter.reason = (
            f"waiting: {waiter.user} holds GPUs lent to their elastic jobs over the quota of {quota.max_gpus}; "
            f"they are asked to give back {over}"
        )
        return True

    def _ask(self, lenders, asks, now):
        """Set (or withdraw) each elastic job's shrink request. A request keeps its start time while it stands; one
        ignored past `shrink_grace` marks the job overdue: it borrows no more. The pool never takes GPUs back from a
        live lease itself: its ranks would still be running on them, two jobs on one GPU."""
        for ticket in lenders:
            give, why = asks.get(ticket.id, (0, ""))
            if not give:
                ticket.shrink_to, ticket.shrink_reason, ticket.shrink_since = None, "", None
                continue
            if ticket.shrink_to is None:
                ticket.shrink_since = now
            ticket.shrink_to, ticket.shrink_reason = ticket.held - give, why
            if ticket.shrink_since is not None and now - ticket.shrink_since >= self.shrink_grace:
                ticket.shrink_overdue = True

    def _grow(self, kept):
        """Lend the GPUs still free to elastic jobs below their maximum, one at a time to the job served first
        (priority, then the user holding fewer, then the job holding fewer), within quotas. Not to a job asked to
        shrink, nor to one that ignored a request."""
        growers = [
            t for t in self._elastic_granted() if t.held < t.gpus and t.shrink_to is None and not t.shrink_overdue
        ]
        held = self._held_by_user()
        while growers:
            order = sorted(growers, key=lambda t: (-t.priority, held.get(t.user, 0), t.held, t.id))
            for ticket in order:
                device = self._quota_room(ticket, held) and self._borrowable(ticket, kept)
                if device:
                    host, gpu = device
                    self._free[host].remove(gpu)
                    ticket.devices.append(device)
                    held[ticket.user] = held.get(ticket.user, 0) + 1
                    if ticket.held >= ticket.gpus:
                        growers.remove(ticket)
                    break
            else:
                return

    def _quota_room(self, ticket, held) -> bool:
        limit = self.quota(ticket.user).max_gpus
        return limit is None or held.get(ticket.user, 0) < limit

    def _borrowable(self, ticket, kept):
        """A free GPU for `ticket` to grow into: on a host it already uses when one has room (local ranks talk
        faster), else on the fullest host (big holes stay whole for gangs); None when none is free."""
        usable = {h: [g for g in gpus if (h, g) not in kept] for h, gpus in self._usable(ticket.allowed).items()}
        usable = {h: gpus for h, gpus in usable.items() if gpus}
        if not usable:
            return None
        mine = {h for h, _ in ticket.devices}
        host = min(usable, key=lambda h: (h not in mine, len(usable[h]), h))
        return (host, usable[host][0])

    def free_count(self, allowed=()):
        return sum(len(g) for g in self._usable(allowed).values())

    def _usable(self, allowed=(), kept=()):
        """Free GPUs by host, limited to `allowed` ones when given, less those `kept` for another job."""
        if not allowed and not kept:
            return self._free
        allowed = {tuple(d) for d in allowed}
        return {
            host: [g for g in free if (not allowed or (host, g) in allowed) and (host, g) not in kept]
            for host, free in self._free.items()
        }

    def _quota_block(self, ticket):
        quota = self.quota(ticket.user)
        running = [t for t in self.tickets.values() if t.user == ticket.user and t.state == "granted"]
        if quota.max_jobs is not None and len(running) >= quota.max_jobs:
            return f"waiting: {ticket.user} runs {len(running)} jobs, the quota is {quota.max_jobs} at once"
        held = sum(t.held for t in running)  # an elastic job's borrowed GPUs count while held
        if quota.max_gpus is not None and held + ticket.need > quota.max_gpus:
            return (
                f"waiting: {ticket.user} holds {held} GPUs, the quota is {quota.max_gpus} at once; it starts "
                f"when {held + ticket.need - quota.max_gpus} are released"
            )
        return ""

    def _place(self, count, allowed=(), kept=()):
        """GPUs for a gang: on one host when one has room (the fullest such host, to keep big holes free), else
        across the hosts with most free; None when fewer than `count` are free."""
        usable = self._usable(allowed, kept)
        if sum(len(g) for g in usable.values()) < count:
            return None
        fitting = [h for h, free in usable.items() if len(free) >= count]
        if fitting:
            host = min(fitting, key=lambda h: (len(usable[h]), h))
            return [(host, g) for g in usable[host][:count]]
        devices = []
        for host in sorted(usable, key=lambda h: -len(usable[h])):
            take = usable[host][: count - len(devices)]
            devices += [(host, g) for g in take]
            if len(devices) == count:
                return devices
        return None

    def _grant(self, ticket, devices, now):
        for host, gpu in devices:
            self._free[host].remove(gpu)
        ticket.devices = devices
        ticket.state = "granted"
        ticket.granted = now
        ticket.reason = ""

    def _end(self, ticket, state):
        for host, gpu in ticket.devices:
            self._free[host].append(gpu)
            self._free[host].sort()
        ticket.devices = []
        ticket.state = state
        ticket.ended = self.clock()
        ticket.shrink_to, ticket.shrink_reason, ticket.shrink_since = None, "", None

    # ------------------------------------------------------------------------------------------- persisting
    def dump(self, keep_ended=200) -> dict:
        """The pool's state as JSON-able data (open tickets, and the latest ended ones for the record)."""
        open_ = [t for t in self.tickets.values() if t.state in ("queued", "granted")]
        ended = sorted((t for t in self.tickets.values() if t not in open_), key=lambda t: t.ended or 0)
        return {"next_id": self._next_id, "tickets": [t.as_dict() for t in open_ + ended[-keep_ended:]]}

    @classmethod
    def load(cls, inventory: dict, state: dict, **kwargs):
        """A pool over `inventory` continuing from `dump()`'s data; GPUs held by granted tickets are not free."""
        known = set(Ticket.__dataclass_fields__)
        tickets = state.get("tickets", [])
        # Never below a stored id: a reused id would let one kernel's release end another's grant.
        stored = [int(t["id"][1:]) for t in tickets if str(t.get("id", "")).startswith("t") and t["id"][1:].isdigit()]
        pool = cls(inventory, first_id=max([state.get("next_id", 1)] + [i + 1 for i in stored]), **kwargs)
        for data in tickets:
            data = {k: v for k, v in data.items() if k in known}  # fields of other versions are dropped
            ticket = Ticket(
                **{
                    **data,
                    "devices": [tuple(d) for d in data.get("devices", [])],
                    "allowed": [tuple(d) for d in data.get("allowed", [])],
                }
            )
            pool.tickets[ticket.id] = ticket
            for host, gpu in ticket.devices:
                if gpu in pool._free.get(host, []):
                    pool._free[host].remove(gpu)
        return pool

    # -------------------------------------------------------------------------------------------- access
    def owned(self, ticket_id, user, admin=False):
        ticket = self.tickets.get(ticket_id)
        if ticket is None or (ticket.user != user and not admin):
            # Another user's ticket is reported exactly like a missing one: ids reveal nothing.
            raise UnknownTicket(f"no job {ticket_id!r} of yours in the pool")
        return ticket

    def view(self, ticket) -> dict:
        """A ticket as its owner sees it: its fields and its place in the queue."""
        return {**ticket.as_dict(), "position": self.position(ticket.id)}

    def visible(self, user, admin=False):
        """What `user` may see: their own tickets, or everything for an admin."""
        return [t for t in self.tickets.values() if admin or t.user == user]

    def _held_by_user(self):
        held = {}
        for ticket in self.tickets.values():
            if ticket.state == "granted":
                held[ticket.user] = held.get(ticket.user, 0) + ticket.held
        return held

    def partial_holds(self):
        """Tickets holding GPUs while not granted: always 0 by construction; the benchmark checks it."""
        return [t for t in self.tickets.values() if t.devices and t.state != "granted"]
