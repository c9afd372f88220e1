"""The job store: one directory per job with job.json, metrics.jsonl and per-rank logs, written as the job runs.

Files, not a database: the kernel writes, the server (and anything else) reads, and both survive restarts.
job.json is replaced atomically (write to a temp file, then rename) so a reader never sees half a record.
"""

import json
import os
import pathlib
import socket
import tempfile
import time
from collections import deque

from traitlets import Float, Integer, Unicode
from traitlets.config import Configurable

from jupyter_dl.host.processes import pid_running
from jupyter_dl.jobs.model import Job

CANCEL_FILE = "cancel"


def _default_root():
    from jupyter_core.paths import jupyter_data_dir

    return str(pathlib.Path(jupyter_data_dir()) / "jupyter_dl" / "jobs")


class JobStore(Configurable):
    root = Unicode(
        help="Directory holding one sub-directory per job (default: <jupyter data dir>/jupyter_dl/jobs)."
    ).tag(config=True)
    retention_days = Float(30.0, help="Finished jobs older than this many days are deleted when a job starts.").tag(
        config=True
    )
    max_jobs = Integer(1000, help="At most this many finished jobs are kept; the oldest go first.").tag(config=True)
    save_interval = Float(1.0, help="Seconds between progress-only rewrites of job.json while a job runs.").tag(
        config=True
    )

    def _root_default(self):
        return _default_root()

    def __init__(self, clock=time.monotonic, **kwargs):
        super().__init__(**kwargs)
        # Injected so tests can place "now" anywhere: monotonic time starts near 0 on a freshly booted machine.
        self._clock = clock
        self._last_save = {}  # job id -> clock reading of its last write; a job never written is never held back
        self._records = {}  # job id -> (mtime_ns, size, parsed job.json): a poller re-reads only what changed

    def job_dir(self, job_id) -> pathlib.Path:
        return pathlib.Path(self.root) / job_id

    # ------------------------------------------------------------------------------------------------ write
    def _private_dir(self, job_id) -> pathlib.Path:
        """The job's directory, searchable by its user only: a store may be shared by every user (c.JobStore.root),
        and what a job writes (metrics, logs, its cell's source, models) is that user's alone. Files in it are
        0600 too (mkstemp's mode, or the mode given), for a directory someone opened later."""
        directory = self.job_dir(job_id)
        directory.mkdir(parents=True, exist_ok=True)
        if directory.stat().st_mode & 0o077:
            directory.chmod(0o700)
        return directory

    def save(self, job: Job, progress_only=False):
        """Write job.json atomically. Progress-only updates are rate-limited; state changes always land."""
        now = self._clock()
        last = self._last_save.get(job.id)
        if progress_only and last is not None and now - last < self.save_interval:
            return
        self._last_save[job.id] = now
        directory = self._private_dir(job.id)
        _atomic_write(directory / "job.json", json.dumps(job.to_dict(), default=str))

    def append_metrics(self, job_id, records):
        if not records:
            return
        path = self._private_dir(job_id) / "metrics.jsonl"
        with open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r, default=float) + "\n" for r in records))

    def write_logs(self, job_id, texts_by_rank, stream="stdout"):
        directory = self._private_dir(job_id) / "logs"
        directory.mkdir(mode=0o700, exist_ok=True)
        for rank, text in texts_by_rank.items():
            # Native lines (TensorFlow/absl, gloo) arrive tagged from the ranks; the log keeps them as plain lines.
            _atomic_write(directory / f"rank{rank}.{stream}.log", untag_native(text))

    def request_cancel(self, job_id, source=None):
        """Ask the kernel running the job to stop it; the kernel polls for this file while the job runs. `source`
        (one short line: "the jobs panel", "%dl_jobs cancel") is kept in the file so the notebook can say it."""
        job = self.load(job_id)
        if job.finished:
            return job
        if not _kernel_alive(job):
            job.transition("lost", error="its kernel is gone")
            self.save(job)
            return job
        _atomic_write(self.job_dir(job_id) / CANCEL_FILE, _one_line(source or ""))
        return job

    def cancel_requested(self, job_id) -> bool:
        return (self.job_dir(job_id) / CANCEL_FILE).exists()

    def cancel_source(self, job_id):
        """Where a cancel came from, as request_cancel recorded it, or None (no cancel, or no source given)."""
        try:
            text = (self.job_dir(job_id) / CANCEL_FILE).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return _one_line(text) or None

    def reap_lost(self, jobs=None):
        """Mark jobs whose kernel died as lost, so nothing stays 'running' forever. Returns those marked."""
        lost = []
        for job in jobs if jobs is not None else self.list():
            if not job.finished and not _kernel_alive(job):
                job.transition("lost", error="its kernel stopped while the job ran")
                self.save(job)
                lost.append(job)
        return lost

    # ------------------------------------------------------------------------------------------------- read
    def load(self, job_id) -> Job:
        with open(self.job_dir(job_id) / "job.json", encoding="utf-8") as f:
            return Job.from_dict(json.load(f))

    def metrics(self, job_id, since=0, limit=None):
        """(records from line `since` on, the line number to ask from next time). A last line still being
        written (no newline yet) is left for the next call. With `limit`, at most that many records: the next
        line number then points just past the last one returned (ask again from there for the rest)."""
        path = self.job_dir(job_id) / "metrics.jsonl"
        if not path.exists():
            return [], since
        records, line_no = [], 0
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.endswith("\n"):
                    line_no -= 1
                    break
                if line_no > since and line.strip():
                    records.append(json.loads(line))
                    if limit is not None and len(records) >= limit:
                        break
        return records, max(since, line_no)

    def logs(self, job_id, rank=0, stream="stdout", tail=None):
        path = self.job_dir(job_id) / "logs" / f"rank{rank}.{stream}.log"
        if not path.exists():
            return ""
        # newline="\n": a progress bar's carriage returns reach the reader as written (the panel collapses them).
        with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
            if tail is None:
                return f.read()
            return "".join(deque(f, maxlen=tail))

    def log_ranks(self, job_id):
        directory = self.job_dir(job_id) / "logs"
        if not directory.exists():
            return []
        return sorted({int(p.name[4:].split(".")[0]) for p in directory.glob("rank*.log")})

    def records(self):
        """Every job.json as a dict, oldest first; unchanged files come from memory (one stat per job)."""
        out, seen = [], set()
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for entry in entries:
            path = os.path.join(entry.path, "job.json")
            try:
                st = os.stat(path)
            except OSError:
                continue  # a job being created or removed right now
            seen.add(entry.name)
            cached = self._records.get(entry.name)
            # The inode too: every save replaces the file (_atomic_write), and a same-size rewrite within one
            # timestamp tick (coarse clocks, e.g. 1 s on some NFS) keeps mtime and size.
            version = (st.st_ino, st.st_mtime_ns, st.st_size)
            if cached is None or cached[0] != version:
                try:
                    with open(path, encoding="utf-8") as f:
                        cached = (version, json.load(f))
                except (OSError, ValueError):
                    continue
                self._records[entry.name] = cached
            out.append(cached[1])
        for gone in set(self._records) - seen:
            del self._records[gone]
        return sorted(out, key=lambda r: r["created"])

    def list(self):
        return [Job.from_dict(r) for r in self.records()]

    def prune(self):
        """Apply the retention settings to finished jobs."""
        import shutil

        finished = [j for j in self.list() if j.finished]
        cutoff = time.time() - self.retention_days * 86400
        doomed = [j for j in finished if j.created < cutoff]
        keep = [j for j in finished if j.created >= cutoff]
        doomed += keep[: max(0, len(keep) - self.max_jobs)]
        for job in doomed:
            shutil.rmtree(self.job_dir(job.id), ignore_errors=True)
        return len(doomed)


def _kernel_alive(job) -> bool:
    """Whether the kernel that runs the job still exists. Only decidable on the kernel's own host."""
    if job.kernel_host != socket.gethostname():
        return True  # cannot tell from here; its own host will reap it
    return pid_running(job.kernel_pid)


def _one_line(text: str, limit: int = 120) -> str:
    line = (text.strip().splitlines() or [""])[0].strip()
    return line[:limit]


def untag_native(text: str) -> str:
    from jupyter_dl.wire.native_tags import untag

    return untag(text)


def _atomic_write(path: pathlib.Path, text: str):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
