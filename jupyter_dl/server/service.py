"""What the REST API does, without tornado: list, read, cancel jobs; metrics and logs; cluster and GPUs.

Handlers stay thin; everything here is plain Python that tests and other front ends can call directly.
"""
import time

from ..jobs import FINAL_STATES, STATES, Job


class ServiceError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class NotRunning(ServiceError):
    status = 409
    code = "not_running"


class BadRequest(ServiceError):
    status = 400
    code = "bad_request"


class JobService:
    """Every method takes `viewer`: a user name to restrict to that user's jobs (another user's job is reported
    exactly like a missing one), or None for a single-user server, where every job in the store is the owner's."""

    def __init__(self, store):
        self.store = store

    def _job(self, job_id, viewer=None):
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise NotFound(f"no job {job_id!r}")
        try:
            job = self.store.load(job_id)
        except (OSError, ValueError):
            job = None
        if job is None or (viewer is not None and job.user != viewer):
            raise NotFound(f"no job {job_id!r}; list jobs at /jupyter-dl/api/jobs")
        return job

    def list_jobs(self, states=None, viewer=None):
        wanted = None
        if states:
            wanted = {s.strip() for s in states.split(",") if s.strip()}
            unknown = wanted - set(STATES)
            if unknown:
                raise BadRequest(f"unknown state(s) {sorted(unknown)}; use any of {', '.join(STATES)}")
        records = [r for r in self.store.records() if viewer is None or r.get("user") == viewer]
        # Only unfinished jobs can have lost their kernel; finished ones are served as stored.
        unfinished = [Job.from_dict(r) for r in records if r["state"] not in FINAL_STATES]
        lost = {job.id: job.to_dict() for job in self.store.reap_lost(unfinished)}
        now = time.time()
        out = []
        for record in reversed(records):  # newest first
            record = lost.get(record["id"], record)
            if wanted is None or record["state"] in wanted:
                out.append(record if "elapsed" in record and record["state"] in FINAL_STATES
                           else {**record, "elapsed": _elapsed(record, now)})
        return out

    def get(self, job_id, viewer=None):
        job = self._job(job_id, viewer)
        self.store.reap_lost([job])
        return job.to_dict()

    def cancel(self, job_id, viewer=None):
        job = self._job(job_id, viewer)
        if job.finished:
            raise NotRunning(f"job {job_id} already {job.state}")
        job = self.store.request_cancel(job_id)
        return {"id": job_id, "state": job.state if job.finished else "cancelling"}

    def metrics(self, job_id, since=0, viewer=None):
        self._job(job_id, viewer)
        since = _non_negative_int(since, "since")
        records, next_line = self.store.metrics(job_id, since)
        return {"records": records, "next": next_line}

    def logs(self, job_id, rank=0, tail=None, stream="stdout", viewer=None):
        self._job(job_id, viewer)
        if stream not in ("stdout", "stderr"):
            raise BadRequest("stream must be stdout or stderr")
        rank = _non_negative_int(rank, "rank")
        tail = None if tail in (None, "") else _non_negative_int(tail, "tail")
        ranks = self.store.log_ranks(job_id)
        # A rank with no log yet (job starting) is not an error: empty text, and the ranks that have logs.
        return {"rank": rank, "ranks": ranks, "stream": stream,
                "text": self.store.logs(job_id, rank, stream, tail)}

    def cluster(self):
        from .cluster_info import clusters, gpu_stats

        return {"clusters": clusters(), "gpus": gpu_stats()}


def _elapsed(record, now):
    stamps = record.get("timestamps", {})
    end = next((stamps[s] for s in FINAL_STATES if s in stamps), now)
    return end - stamps.get("starting", record.get("created", now))


def _non_negative_int(value, name):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{name} must be a whole number, got {value!r}") from None
    if number < 0:
        raise BadRequest(f"{name} must not be negative")
    return number
