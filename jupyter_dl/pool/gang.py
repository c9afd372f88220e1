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
    ):
        self.inventory = {host: list(gpus) for host, gpus in inventory.items()}
        self.quotas = dict(quotas or {})
        self.default_quota = default_quota or Quota()
        self.lease_ttl = lease_ttl
        self.reserve_after = reserve_after
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

    def submit(self, user, gpus, priority=0, job="", owner="", allowed=()) -> Ticket:
        """Queue a request for `gpus` GPUs (only among `allowed` ones when given: the GPUs a kernel's engines are
        pinned to) and grant what can be granted now. Refuses impossible requests."""
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
        self.tickets[ticket.id] = ticket
        self.schedule()
        return ticket

    def cancel(self, ticket_id, user, admin=False) -> Ticket:
        """Withdraw a request, or stop holding GPUs for a job that will not run."""
        return self._close(ticket_id, user, admin, "cancelled")

    def release(self, ticket_id, user, admin=False) -> Ticket:
        """The job ended (succeeded, failed or was cancelled): its GPUs go back."""
        return self._close(ticket_id, user, admin, "released")

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
        """Grant queued tickets, whole or not at all, in queue order; backfill until the head is reserved."""
        now = self.clock()
        granted = []
        reserved = False
        for ticket in self.queue():
            blocked = self._quota_block(ticket)
            if blocked:
                ticket.reason = blocked
                continue
            if reserved:
                ticket.reason = "waiting: GPUs are kept for an earlier job that has waited long"
                continue
            devices = self._place(ticket.gpus, ticket.allowed)
            if devices is None:
                free = self.free_count(ticket.allowed)
                ticket.reason = f"waiting for {ticket.gpus} GPUs to be free at once ({free} free now)"
                if now - ticket.submitted >= self.reserve_after:
                    reserved = True  # no more backfill: the next GPUs freed are this job's
                continue
            self._grant(ticket, devices, now)
            granted.append(ticket)
        return granted

    def free_count(self, allowed=()):
        return sum(len(g) for g in self._usable(allowed).values())

    def _usable(self, allowed=()):
        """Free GPUs by host, limited to `allowed` ones when given."""
        if not allowed:
            return self._free
        allowed = {tuple(d) for d in allowed}
        return {host: [g for g in free if (host, g) in allowed] for host, free in self._free.items()}

    def _quota_block(self, ticket):
        quota = self.quota(ticket.user)
        running = [t for t in self.tickets.values() if t.user == ticket.user and t.state == "granted"]
        if quota.max_jobs is not None and len(running) >= quota.max_jobs:
            return f"waiting: {ticket.user} runs {len(running)} jobs, the quota is {quota.max_jobs} at once"
        held = sum(t.gpus for t in running)
        if quota.max_gpus is not None and held + ticket.gpus > quota.max_gpus:
            return (
                f"waiting: {ticket.user} holds {held} GPUs, the quota is {quota.max_gpus} at once; it starts "
                f"when {held + ticket.gpus - quota.max_gpus} are released"
            )
        return ""

    def _place(self, count, allowed=()):
        """GPUs for a gang: on one host when one has room (the fullest such host, to keep big holes free), else
        across the hosts with most free; None when fewer than `count` are free."""
        usable = self._usable(allowed)
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
                held[ticket.user] = held.get(ticket.user, 0) + ticket.gpus
        return held

    def partial_holds(self):
        """Tickets holding GPUs while not granted: always 0 by construction; the benchmark checks it."""
        return [t for t in self.tickets.values() if t.devices and t.state != "granted"]
