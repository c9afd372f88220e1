"""Kernel side: the embedded pool, the default for one user on one machine.

Each of the user's kernels runs its own local cluster with one engine per GPU, so without a pool two notebooks'
jobs would train on the same GPUs at once. The kernels share one small state file instead of a server: every
request takes an exclusive lock on it, rebuilds the gang pool from it, ends the tickets of kernels that are gone
(their process has exited: a dead kernel leaks nothing), applies the request and writes the state back. Same
gang admission and queue as the hub service (`GangPool`), and the same calls as its client, so a job's lease
holds GPUs from either. For several users on one host, run the `jupyter-dl-pool` service instead.
"""

import contextlib
import fcntl
import getpass
import json
import os
import pathlib
import socket
import time

import psutil
from traitlets import Float, Integer, Unicode
from traitlets.config import Configurable

from jupyter_dl.host import gpus
from jupyter_dl.host.processes import pid_running
from jupyter_dl.pool.access import PoolAccess
from jupyter_dl.pool.gang import GangPool, PoolError


def _process_identity(pid=None) -> str:
    """host:pid:start time; the start time tells a live kernel from a later process that reused its pid."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{psutil.Process(pid).create_time():.2f}"


def _alive(identity: str) -> bool:
    host, _, rest = identity.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # not ours to judge
    return pid_running(int(pid), float(started or 0))


# Tickets this process has asked for and not given back, by state file. A ticket of this process that is not in it
# was left behind by an interrupted request (a second Ctrl-C while releasing): it is ended, since liveness alone
# would keep it until the kernel exits.
_OPEN_HERE: dict = {}


class LocalPool(Configurable, PoolAccess):
    state_file = Unicode(
        "",
        help="File the embedded pool's state lives in, shared by this user's kernels on this host. Empty: "
        "jupyter-dl-pool-<host>.json in Jupyter's runtime directory (per host: the runtime directory may be "
        "shared between hosts through a shared home).",
    ).tag(config=True)
    simulate_gpus = Integer(
        0,
        help="Pretend this host has this many GPUs (demos and tests on machines without any): jobs are admitted "
        "against them, while ranks still run on the CPU engines. 0: the GPUs nvidia-smi lists.",
    ).tag(config=True)
    reserve_after = Float(
        3600.0,
        help="Seconds a job may wait while smaller jobs start ahead of it; after that, freed GPUs are kept for it.",
    ).tag(config=True)
    shrink_grace = Float(
        60.0,
        help="Seconds an elastic job may take to give back GPUs another job waits for; one that takes longer keeps "
        "what it holds (its ranks run on them) but borrows no more GPUs for the rest of its run.",
    ).tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.user = getpass.getuser()
        self.owner = _process_identity()

    @property
    def inventory(self) -> dict:
        return {socket.gethostname(): list(range(self.simulate_gpus)) if self.simulate_gpus else gpus.discover()}

    @property
    def active(self) -> bool:
        """A pool only matters where there are GPUs to share."""
        return any(self.inventory.values())

    def path(self) -> pathlib.Path:
        if self.state_file:
            return pathlib.Path(self.state_file).expanduser()
        from jupyter_core.paths import jupyter_runtime_dir

        return pathlib.Path(jupyter_runtime_dir()) / f"jupyter-dl-pool-{socket.gethostname()}.json"

    @contextlib.contextmanager
    def _locked(self):
        """The pool, rebuilt from the state file, for one request, and the ids of the tickets this process holds in
        it; written back when the request succeeds.
        A separate lock file serialises the kernels, so the state can be replaced whole (a kernel killed while
        writing leaves the previous state, never half of one)."""
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            pool = GangPool.load(
                self.inventory,
                self._read(path),
                reserve_after=self.reserve_after,
                shrink_grace=self.shrink_grace,
                clock=time.time,
            )
            for owner in {t.owner for t in pool.tickets.values() if t.state in ("queued", "granted")}:
                if not _alive(owner):
                    pool.drop_owner(owner)
            mine = _OPEN_HERE.setdefault(str(path), set())
            for ticket in list(pool.tickets.values()):
                if ticket.owner == self.owner and ticket.state in ("queued", "granted") and ticket.id not in mine:
                    pool.release(ticket.id, ticket.user, admin=True)
            yield pool, mine
            partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            partial.write_text(json.dumps(pool.dump(keep_ended=50)))
            os.replace(partial, path)

    @staticmethod
    def _read(path) -> dict:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return {}
        try:
            return json.loads(text)
        except ValueError:
            raise PoolError(
                f"the GPU pool's state file {path} is not valid JSON; delete it when no notebook is "
                f"running a job (it is rebuilt empty)"
            ) from None

    @staticmethod
    def _json(pool, ticket):
        """The ticket exactly as the service's client would see it (JSON: devices are lists)."""
        return json.loads(json.dumps(pool.view(ticket)))

    # The same calls as PoolClient. The owner is always this process: liveness is judged by it, not by heartbeats.
    def submit(self, gpus, job="", owner="", allowed=(), min_gpus=None):
        with self._locked() as (pool, mine):
            ticket = pool.submit(self.user, gpus, job=job, owner=self.owner, allowed=allowed, min_gpus=min_gpus)
            mine.add(ticket.id)
            return self._json(pool, ticket)

    def ticket(self, ticket_id):
        with self._locked() as (pool, _):
            pool.schedule()
            return self._json(pool, pool.owned(ticket_id, self.user))

    def tickets(self):
        with self._locked() as (pool, _):
            return [self._json(pool, t) for t in pool.visible(self.user)]

    def release(self, ticket_id):
        with self._locked() as (pool, mine):
            ticket = pool.release(ticket_id, self.user)
            mine.discard(ticket_id)
            return self._json(pool, ticket)

    def resize(self, ticket_id, keep_devices):
        with self._locked() as (pool, _):
            return self._json(pool, pool.resize(ticket_id, self.user, keep_devices))

    def heartbeat(self, owner=""):
        return {"ok": True}

    def summary(self):
        with self._locked() as (pool, _):
            return {"gpus": pool.size, "free": pool.free_count(), "queued": len(pool.queue())}
