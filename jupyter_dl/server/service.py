"""What the REST API does, without tornado: list, read, cancel jobs; metrics, figures and logs; kept models;
comparisons; cluster and GPUs.

Handlers stay thin; everything here is plain Python that tests and other front ends can call directly.
"""

import json
import os
import re
import socket
import time

from jupyter_dl.jobs import FINAL_STATES, STATES, Job
from jupyter_dl.jobs.results import RESULTS
from jupyter_dl.live.replay import ReplayCache

THEMES = ("light", "dark", "auto")  # the panel says which JupyterLab theme it shows; figures are drawn to match

# What a kept model's file may be called: the Python name the cell bound it to (never a path).
_MODEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    exactly like a missing one), or None for a single-user server, where every job in the store is the owner's.

    `root_dir` is the Jupyter server's root: jobs store the notebook's absolute path (what the kernel knows), and
    the REST payload gives it relative to that root in `notebook` (what JupyterLab's document manager opens), with
    the stored path in `notebook_file`. A notebook outside the root has `notebook: null`. Without a root_dir (the
    magics) records are returned as stored."""

    FINAL_METRICS_TAIL = 65536  # bytes read from the end of metrics.jsonl to find the last epoch's logs

    def __init__(self, store, root_dir=None):
        self.store = store
        self.root_dir = root_dir
        self._finals = {}  # job id -> (metrics.jsonl size, last epoch logs): finished jobs are listed every poll
        self._replays = ReplayCache()  # job id -> its metrics replayed so far: a tab polls every 2 s

    def _present(self, record):
        if record.get("state") in FINAL_STATES:
            record = {**record, "final_metrics": self._final_metrics(record["id"])}
        if record.get("state") == "succeeded":
            record = {**record, "models": self._kept_models(record["id"])}
        stored = record.get("notebook")
        if self.root_dir is None or not stored:
            return record
        return {**record, "notebook": notebook_path(stored, self.root_dir), "notebook_file": stored}

    def _final_metrics(self, job_id):
        """The logs of the job's last epoch (what its history ends with), or None when it recorded no epoch."""
        path = self.store.job_dir(job_id) / "metrics.jsonl"
        try:
            size = path.stat().st_size
        except OSError:
            return None
        cached = self._finals.get(job_id)
        if cached is not None and cached[0] == size:
            return cached[1]
        with open(path, "rb") as f:
            f.seek(max(0, size - self.FINAL_METRICS_TAIL))
            tail = f.read().decode("utf-8", errors="replace")
        found = None
        for line in reversed(tail.splitlines()):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # blank, or cut by the seek
            if isinstance(record, dict) and record.get("kind") == "epoch" and record.get("rank", 0) == 0:
                found = record.get("logs") or None
                break
        self._finals[job_id] = (size, found)
        return found

    def _models_dir(self, job_id):
        return self.store.job_dir(job_id) / RESULTS / "models"

    def _kept_models(self, job_id):
        """Names of the models a succeeded job kept (what the panel offers to load or download)."""
        try:
            return sorted(
                e.name[: -len(".keras")]
                for e in os.scandir(self._models_dir(job_id))
                if e.name.endswith(".keras") and e.is_file()
            )
        except OSError:
            return []

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
                out.append(
                    self._present(
                        record
                        if "elapsed" in record and record["state"] in FINAL_STATES
                        else {**record, "elapsed": _elapsed(record, now)}
                    )
                )
        return out

    def get(self, job_id, viewer=None):
        job = self._job(job_id, viewer)
        self.store.reap_lost([job])
        return self._present(job.to_dict())

    def cancel(self, job_id, viewer=None, source=None):
        """Ask the job's kernel to stop it. `source` says where the cancel came from (the kernel tells the user)."""
        job = self._job(job_id, viewer)
        if job.finished:
            raise NotRunning(f"job {job_id} already {job.state}")
        job = self.store.request_cancel(job_id, source)
        return {"id": job_id, "state": job.state if job.finished else "cancelling"}

    def metrics(self, job_id, since=0, viewer=None, limit=None):
        """Records from line `since` on (at most `limit` of them), the `next` line to ask from, and `more`: whether
        a limited page came back full, so there may be more written already (ask again at once rather than next
        tick; a page that ends exactly at the last record costs one empty request)."""
        self._job(job_id, viewer)
        since = _non_negative_int(since, "since")
        limit = None if limit in (None, "") else _non_negative_int(limit, "limit") or None
        records, next_line = self.store.metrics(job_id, since, limit)
        return {"records": records, "next": next_line, "more": limit is not None and len(records) >= limit}

    def figures(self, job_id, viewer=None, theme="auto", version=None):
        """The loss tab's figures, epoch rows and status (live/job_figures.py), from a per-job state that reads only
        what metrics.jsonl gained since the last call. `version` is what the last reply said: when nothing changed
        since, the reply is just {"version", "unchanged": True} (a finished job's tab costs nothing to keep open)."""
        from jupyter_dl.live.job_figures import job_figures
        from jupyter_dl.live.theme import template_for

        if theme not in THEMES:
            raise BadRequest(f"theme must be one of {', '.join(THEMES)}")
        job = self._job(job_id, viewer)
        self.store.reap_lost([job])
        replay = self._replays.get(job_id, self.store.job_dir(job_id) / "metrics.jsonl")
        replay.refresh()
        template = template_for(theme)
        current = f"{replay.generation}.{replay.offset}.{job.state}.{template}"
        if version == current:
            return {"version": current, "unchanged": True}
        return {"version": current, **job_figures(job, replay.state, template)}

    def logs(self, job_id, rank=0, tail=None, stream="stdout", viewer=None):
        self._job(job_id, viewer)
        if stream not in ("stdout", "stderr"):
            raise BadRequest("stream must be stdout or stderr")
        rank = _non_negative_int(rank, "rank")
        tail = None if tail in (None, "") else _non_negative_int(tail, "tail")
        ranks = self.store.log_ranks(job_id)
        # A rank with no log yet (job starting) is not an error: empty text, and the ranks that have logs.
        return {"rank": rank, "ranks": ranks, "stream": stream, "text": self.store.logs(job_id, rank, stream, tail)}

    def model_file(self, job_id, name, viewer=None):
        """The path of the `.keras` file a job kept for model `name`; NotFound when it kept none by that name."""
        self._job(job_id, viewer)
        path = self._models_dir(job_id) / f"{name}.keras"
        if not _MODEL_NAME.match(name or "") or not path.is_file():
            kept = self._kept_models(job_id)
            raise NotFound(
                f"job {job_id} kept no model {name!r}"
                + (f"; it kept {', '.join(kept)}" if kept else "; it kept no models")
            )
        return path

    def compare(self, ids, x="step", viewer=None, theme="auto"):
        """`comparison.compare_jobs` of the comma-separated `ids` (ids, unique id prefixes or job names), with the
        figure %dl_compare draws of it under "figure" (plotly JSON)."""
        from jupyter_dl.errors import UsageError
        from jupyter_dl.jobs.comparison import CompareSettings, UnknownJob, compare_jobs
        from jupyter_dl.live.compare_figure import figure
        from jupyter_dl.live.theme import template_for

        if theme not in THEMES:
            raise BadRequest(f"theme must be one of {', '.join(THEMES)}")
        try:
            data = compare_jobs(
                self.store,
                (ids or "").replace(",", " ").split(),
                x=x or "step",
                viewer=viewer,
                settings=CompareSettings(config=self.store.config),
            )
        except UnknownJob as exc:
            raise NotFound(_first_line(exc)) from None
        except UsageError as exc:
            raise BadRequest(_first_line(exc)) from None
        return {**data, "figure": figure(data, template_for(theme)).to_plotly_json()}

    def cluster(self, notebooks_by_pid=None, viewer=None):
        """Running clusters with the notebook that owns each (from the server's own kernels, else from the jobs its
        kernel ran), engines per host, and the GPUs."""
        from jupyter_dl.server.cluster_info import clusters, gpu_stats

        notebooks_by_pid = notebooks_by_pid or {}
        found = []
        for cluster in clusters():
            pid = cluster.pop("owner_pid")
            cluster.pop("cluster_file")
            notebook = notebooks_by_pid.get(pid) if pid else None
            if pid and notebook is None:
                notebook = self._notebook_of_kernel(pid, viewer)
            found.append({**cluster, "owner": {"kernel_pid": pid, "notebook": notebook} if pid else None})
        return {"clusters": found, "gpus": gpu_stats()}

    def _notebook_of_kernel(self, pid, viewer=None):
        """The notebook of the newest job run by the kernel with this pid on this host, or None."""
        host = socket.gethostname()
        for record in reversed(self.store.records()):
            if (
                record.get("kernel_pid") == pid
                and record.get("kernel_host") in (None, host)
                and (viewer is None or record.get("user") == viewer)
            ):
                return self._present(record).get("notebook")
        return None

    def cluster_file(self, cluster_id, viewer=None, kernel_pids=()):
        """The cluster file of a running cluster, to stop it; NotFound when no such cluster runs. With a `viewer`
        (a hub's user), only a cluster that user's kernels started: one of this server's kernels (`kernel_pids`) or
        a kernel that ran one of the viewer's jobs here. Servers of one uid share cluster files, so the file being
        readable says nothing; another user's cluster is reported exactly like a missing one."""
        from jupyter_dl.server.cluster_info import clusters

        found = next((c for c in clusters() if c["cluster_id"] == cluster_id), None)
        if found is not None and (viewer is None or self._started_by(found, viewer, kernel_pids)):
            return found["cluster_file"]
        raise NotFound(f"no running cluster {cluster_id!r}; list yours at /jupyter-dl/api/cluster")

    def _started_by(self, cluster, viewer, kernel_pids) -> bool:
        pid, host = cluster["owner_pid"], socket.gethostname()
        if pid is None:  # not started by a jupyter-dl kernel: no owner to check
            return False
        return pid in kernel_pids or any(
            r.get("kernel_pid") == pid and r.get("kernel_host") in (None, host) and r.get("user") == viewer
            for r in self.store.records()
        )


def notebook_path(path, root_dir):
    """`path` (absolute, as a kernel's JPY_SESSION_NAME gives it) relative to `root_dir`, '/'-separated, or None
    when it lies outside the root. A relative path is already relative to the root and is returned as it is."""
    if not os.path.isabs(path):
        return path.replace(os.sep, "/")
    root = os.path.abspath(os.path.expanduser(root_dir))
    for base, target in ((root, os.path.abspath(path)), (os.path.realpath(root), os.path.realpath(path))):
        relative = os.path.relpath(target, base)
        if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
            return relative.replace(os.sep, "/")
    return None


def _elapsed(record, now):
    stamps = record.get("timestamps", {})
    end = next((stamps[s] for s in FINAL_STATES if s in stamps), now)
    return end - stamps.get("starting", record.get("created", now))


def _first_line(exc):
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _non_negative_int(value, name):
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"{name} must be a whole number, got {value!r}") from None
    if number < 0:
        raise BadRequest(f"{name} must not be negative")
    return number
