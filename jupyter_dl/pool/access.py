"""What a job's lease needs from a pool, the hub service's (`PoolClient`) or the embedded one (`LocalPool`)."""

import time

from jupyter_dl.pool.gang import PoolError


class PoolAccess:
    """What a job's lease needs from a pool, the service's or the embedded one: submit (with `min_gpus` for an
    elastic job), ticket, heartbeat, release, resize (an elastic job keeps only the GPUs it names; each returning
    the ticket as a dict with its queue position, devices and any shrink request), and waiting for a grant built
    on them."""

    def wait_granted(self, ticket_id, owner="", on_wait=None, poll=1.0, timeout=None):
        """Block until the ticket is granted (heartbeating meanwhile); on_wait(ticket) is called on each poll."""
        end = time.monotonic() + timeout if timeout else None
        while True:
            ticket = self.ticket(ticket_id)
            if ticket["state"] == "granted":
                return ticket
            if ticket["state"] != "queued":
                raise PoolError(f"pool: ticket {ticket_id} ended while queued ({ticket['state']})")
            if on_wait is not None:
                on_wait(ticket)
            if end is not None and time.monotonic() > end:
                raise PoolError(
                    f"pool: still queued after {timeout:.0f}s (position {ticket['position']}): {ticket['reason']}"
                )
            if owner:
                self.heartbeat(owner)
            time.sleep(poll)

    # Each pool implements these (the hub service's client and the embedded pool).
    def submit(self, gpus, job="", owner="", allowed=(), min_gpus=None) -> dict:
        raise NotImplementedError

    def ticket(self, ticket_id) -> dict:
        raise NotImplementedError

    def heartbeat(self, owner) -> dict:
        raise NotImplementedError

    def release(self, ticket_id) -> dict:
        raise NotImplementedError

    def resize(self, ticket_id, keep_devices) -> dict:
        raise NotImplementedError
