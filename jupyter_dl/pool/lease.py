"""Kernel side: hold a job's GPUs from a pool (the hub service or the embedded one) for as long as the job runs.

Asks for the job's GPUs at once, waits in the queue (the job is `queued`, with its place and why, for the cell, the
job store and the panel), keeps the lease alive with heartbeats while the job runs (a kernel that dies stops them,
and the pool takes the GPUs back), and releases them when the job ends however it ends.
"""

import sys
import threading

from jupyter_dl.pool.access import PoolAccess


class PoolLease:
    def __init__(
        self, client: PoolAccess, gpus: int, job, owner: str, stderr=None, heartbeat_s=10.0, poll_s=1.0, allowed=()
    ):
        self.client, self.gpus, self.job, self.owner, self.allowed = client, gpus, job, owner, list(allowed)
        self.stderr = stderr or sys.stderr
        self.heartbeat_s, self.poll_s = heartbeat_s, poll_s
        self.ticket = None
        self._stop = threading.Event()
        self._thread = None
        self._shown = None

    def __enter__(self):
        self.ticket = self.client.submit(self.gpus, job=self.job.name, owner=self.owner, allowed=self.allowed)
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

    def _waiting(self, ticket):
        where = (ticket.get("position"), ticket.get("reason"))
        self.job.progress = {**self.job.progress, "queue_position": where[0], "reason": where[1]}
        self.job.changed()
        if where != self._shown:
            self._shown = where
            print(
                f"[jupyter-dl] queued for {self.gpus} GPUs: position {where[0]} ({where[1]}); "
                f"interrupt the kernel to give up",
                file=self.stderr,
                flush=True,
            )

    def _beat(self):
        while not self._stop.wait(self.heartbeat_s):
            try:
                self.client.heartbeat(self.owner)
            except Exception:  # a missed beat is retried; the lease TTL covers several
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
