"""Kernel side: hold a job's GPUs from a pool (the hub service or the embedded one) for as long as the job runs.

Asks for the job's GPUs at once, waits in the queue (the job is `queued`, with its place and why, for the cell, the
job store and the panel), keeps the lease alive with heartbeats while the job runs (a kernel that dies stops them,
and the pool takes the GPUs back), and releases them when the job ends however it ends.

An elastic job (`min_gpus` < `gpus`) starts on at least `min_gpus`; its GPUs change while it runs (the pool lends it
idle ones, and asks for some back when another job waits). The heartbeat thread then also reads the ticket every
`poll_s`, so the job's commit points read `devices()` and `shrink_request()` without a round trip, and answer with
`resize()`.
"""

import sys
import threading
import time

from jupyter_dl.pool.access import PoolAccess
from jupyter_dl.pool.gang import PoolError


class PoolLease:
    def __init__(
        self,
        client: PoolAccess,
        gpus: int,
        job,
        owner: str,
        stderr=None,
        heartbeat_s=10.0,
        poll_s=1.0,
        allowed=(),
        min_gpus=None,
    ):
        self.client, self.gpus, self.job, self.owner, self.allowed = client, gpus, job, owner, list(allowed)
        self.min_gpus = min_gpus if min_gpus is not None and min_gpus < gpus else None
        self.stderr = stderr or sys.stderr
        self.heartbeat_s, self.poll_s = heartbeat_s, poll_s
        self.ticket: dict | None = None
        self._stop = threading.Event()
        self._thread = None
        self._shown = None
        self._lock = threading.Lock()
        self._version = 0  # bumped by resize(): a refresh that began before it must not bring back its old devices

    def __enter__(self):
        self.ticket = self.client.submit(
            self.gpus, job=self.job.name, owner=self.owner, allowed=self.allowed, **self._elastic()
        )
        try:
            if self.ticket["state"] != "granted":
                self.job.transition("queued")
                self._waiting(self.ticket)
                self.ticket = self.client.wait_granted(
                    self.ticket["id"], owner=self.owner, on_wait=self._waiting, poll=self.poll_s
                )
        except BaseException:
            self._release()
            raise
        if self.job.state == "queued":
            self.job.transition("starting")
        self.job.gpus = [f"{host}:{gpu}" for host, gpu in self.ticket["devices"]]
        self.job.progress = {k: v for k, v in self.job.progress.items() if k not in ("queue_position", "reason")}
        self._thread = threading.Thread(target=self._beat, name="jdl-pool-heartbeat", daemon=True)
        self._thread.start()
        return self.ticket

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._release()
        return False

    def _elastic(self):
        return {} if self.min_gpus is None else {"min_gpus": self.min_gpus}

    # ------------------------------------------------------------------- what an elastic job's commit points read
    def devices(self) -> list:
        """The GPUs granted now, [(host, gpu index)], as of the last refresh (at most `poll_s` old)."""
        with self._lock:
            return [tuple(d) for d in (self.ticket or {}).get("devices", [])]

    def shrink_request(self):
        """(k, reason) when the pool asks the job to keep only k GPUs, else None."""
        with self._lock:
            ticket = self.ticket or {}
            if ticket.get("shrink_to") is None:
                return None
            return ticket["shrink_to"], ticket.get("shrink_reason", "")

    def resize(self, keep_devices) -> list:
        """Keep only `keep_devices` (among `devices()`, at least `min_gpus`); the others go back to the pool.
        Returns the GPUs now granted."""
        if self.ticket is None:
            raise PoolError("this lease holds no GPUs yet: resize inside its `with` block")
        ticket = self.client.resize(self.ticket["id"], [tuple(d) for d in keep_devices])
        with self._lock:
            self.ticket, self._version = ticket, self._version + 1
        return self.devices()

    def _refresh(self):
        with self._lock:
            version = self._version
        ticket = self.client.ticket(self.ticket["id"])
        with self._lock:
            if version == self._version:
                self.ticket = ticket

    # -------------------------------------------------------------------------------------------- internals
    def _waiting(self, ticket):
        where = (ticket.get("position"), ticket.get("reason"))
        self.job.progress = {**self.job.progress, "queue_position": where[0], "reason": where[1]}
        self.job.changed()
        if where != self._shown:
            self._shown = where
            asked = f"{self.gpus}" if self.min_gpus is None else f"{self.min_gpus} to {self.gpus}"
            print(
                f"[jupyter-dl] queued for {asked} GPUs: position {where[0]} ({where[1]}); "
                f"interrupt the kernel to give up",
                file=self.stderr,
                flush=True,
            )

    def _beat(self):
        # A fixed job only heartbeats; an elastic one also follows its ticket, at the poll interval.
        every = self.heartbeat_s if self.min_gpus is None else min(self.poll_s, self.heartbeat_s)
        beat_at = time.monotonic() + self.heartbeat_s - every / 2  # the first beat one heartbeat_s in, as before
        while not self._stop.wait(every):
            try:
                if self.min_gpus is not None:
                    self._refresh()
                if time.monotonic() >= beat_at:
                    beat_at = time.monotonic() + self.heartbeat_s - every / 2
                    self.client.heartbeat(self.owner)
            except Exception:  # a missed beat or refresh is retried; the lease TTL covers several
                pass

    def _release(self):
        if self.ticket is None:
            return
        for _ in range(3):
            try:
                self.client.release(self.ticket["id"])
                return
            except KeyboardInterrupt:  # a second Ctrl-C while stopping must not leave the GPUs held: try again
                continue
            except Exception as exc:  # the pool takes them back when this kernel's heartbeats or process end
                print(f"[jupyter-dl] could not release GPUs {self.ticket['id']}: {exc}", file=self.stderr)
                return
