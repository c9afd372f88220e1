"""The job model: one record per distributed run, shared by the magics, the API, the live view and the job store
(and, through the store's files, by the server and the panel)."""

import getpass
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field, fields

STATES = ("queued", "starting", "running", "succeeded", "failed", "cancelled", "lost")
FINAL_STATES = ("succeeded", "failed", "cancelled", "lost")


@dataclass
class Job:
    name: str
    n: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    # On a JupyterHub the hub user (the spawner sets JUPYTERHUB_USER for the server and its kernels), else the OS user.
    user: str = field(default_factory=lambda: os.environ.get("JUPYTERHUB_USER") or getpass.getuser())
    notebook: str | None = None
    kernel_id: str | None = None
    kernel_pid: int = field(default_factory=os.getpid)
    kernel_host: str = field(default_factory=socket.gethostname)
    state: str = "queued"
    created: float = field(default_factory=time.time)
    timestamps: dict = field(default_factory=dict)  # state -> when it was entered
    engine_ids: list = field(default_factory=list)
    hosts: list = field(default_factory=list)
    gpus: list = field(default_factory=list)
    options: dict = field(default_factory=dict)
    error: str | None = None
    progress: dict = field(default_factory=dict)  # epoch, epochs, step, steps, fraction, samples_per_s, eta_s
    timings: dict = field(default_factory=dict)
    restarts: list = field(default_factory=list)  # one {"attempt", "reason", "t"} per restart after a failure
    # An elastic job's groups: one {"t", "n", "reason"} each, the first ("started") included.
    membership: list = field(default_factory=list)

    def __post_init__(self):
        self.timestamps.setdefault(self.state, self.created)
        self._listeners = []

    def on_change(self, callback):
        self._listeners.append(callback)

    def changed(self):
        for callback in self._listeners:
            callback(self)

    def transition(self, state, error=None):
        if state not in STATES:
            raise ValueError(f"unknown job state {state!r}")
        self.state = state
        self.timestamps[state] = time.time()
        if error is not None:
            self.error = error
        self.changed()

    @property
    def finished(self):
        return self.state in FINAL_STATES

    @property
    def elapsed(self):
        end = next((self.timestamps[s] for s in FINAL_STATES if s in self.timestamps), time.time())
        return end - self.timestamps.get("starting", self.created)

    def to_dict(self):
        data = asdict(self)
        data["elapsed"] = self.elapsed
        return data

    @classmethod
    def from_dict(cls, data):
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class JobRegistry:
    """This process's jobs, newest last; every change is written to the store when there is one."""

    def __init__(self, store=None):
        self._jobs = {}
        self.store = store

    def add(self, job: Job) -> Job:
        self._jobs[job.id] = job
        if self.store is not None:
            job.on_change(self.store.save)
            self.store.save(job)
        return job

    def get(self, job_id):
        return self._jobs[job_id]

    def all(self):
        return list(self._jobs.values())
