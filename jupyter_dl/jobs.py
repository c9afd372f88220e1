"""The job model: one record per distributed run, shared by the magics, the API and (later) the server and panel."""
import time
import uuid
from dataclasses import asdict, dataclass, field

STATES = ("queued", "starting", "running", "succeeded", "failed", "cancelled", "lost")
FINAL_STATES = ("succeeded", "failed", "cancelled", "lost")


@dataclass
class Job:
    name: str
    n: int
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "queued"
    created: float = field(default_factory=time.time)
    timestamps: dict = field(default_factory=dict)  # state -> when it was entered
    engine_ids: list = field(default_factory=list)
    hosts: list = field(default_factory=list)
    options: dict = field(default_factory=dict)
    error: str | None = None
    timings: dict = field(default_factory=dict)

    def __post_init__(self):
        self.timestamps.setdefault(self.state, self.created)

    def transition(self, state, error=None):
        if state not in STATES:
            raise ValueError(f"unknown job state {state!r}")
        self.state = state
        self.timestamps[state] = time.time()
        if error is not None:
            self.error = error

    @property
    def elapsed(self):
        end = next((self.timestamps[s] for s in FINAL_STATES if s in self.timestamps), time.time())
        return end - self.timestamps.get("starting", self.created)

    def to_dict(self):
        return asdict(self)


class JobRegistry:
    """This kernel's jobs, newest last."""

    def __init__(self):
        self._jobs = {}

    def add(self, job: Job) -> Job:
        self._jobs[job.id] = job
        return job

    def get(self, job_id):
        return self._jobs[job_id]

    def all(self):
        return list(self._jobs.values())
