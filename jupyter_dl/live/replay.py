"""A TrainingState fed from one job's metrics.jsonl as the job appends to it: each refresh reads only the bytes
written since the last one, so a panel polling a long job every 2 s does not re-parse the whole file each time.

The file is append-only while the job runs; when it shrinks or is replaced (another inode: the job store was
pruned and the id reused, or a test rewrote it), the state starts over from the top.
"""

import json
import os

from jupyter_dl.live.state import TrainingState


class MetricsReplay:
    def __init__(self, path, budget=2000, smoothing=0.9):
        self.path = path
        self.budget = budget
        self.smoothing = smoothing
        self.generation = 0  # bumped on every start-over, so a client's version never matches across one
        self._reset(None)

    def _reset(self, identity):
        # No latency bookkeeping: that is the kernel's benchmark, and a server may hold many jobs' states.
        self.state = TrainingState(budget=self.budget, smoothing=self.smoothing, latency_window=0)
        self.offset = 0  # bytes consumed: always just past a newline
        self._identity = identity
        self.generation += 1

    def refresh(self) -> bool:
        """Consume what was appended since the last call; True when the state changed (or started over)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            stat = None
        identity = (stat.st_dev, stat.st_ino) if stat else None
        size = stat.st_size if stat else 0
        restarted = identity != self._identity or size < self.offset
        if restarted:
            self._reset(identity)
        if size <= self.offset:
            return restarted
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(size - self.offset)
        end = chunk.rfind(b"\n") + 1  # a last line still being written waits for the next refresh
        if not end:
            return restarted
        self.offset += end
        self.state.consume(_records(chunk[:end]))
        self.state.take_undrawn()  # nobody draws them batch by batch here
        return True


def _records(chunk: bytes) -> list:
    records = []
    for line in chunk.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # blank
        if isinstance(record, dict):
            records.append(record)
    return records


class ReplayCache:
    """The replays of the jobs most recently asked for (a server holds one per job a panel tab watches); the least
    recently used goes when more than `max_jobs` are held."""

    def __init__(self, max_jobs=32, budget=2000, smoothing=0.9) -> None:
        self.max_jobs, self.budget, self.smoothing = max_jobs, budget, smoothing
        self._replays: dict = {}  # job id -> MetricsReplay, least recently used first

    def get(self, job_id, path) -> MetricsReplay:
        replay = self._replays.pop(job_id, None)
        if replay is None or replay.path != path:
            replay = MetricsReplay(path, self.budget, self.smoothing)
        self._replays[job_id] = replay
        while len(self._replays) > self.max_jobs:
            self._replays.pop(next(iter(self._replays)))
        return replay
