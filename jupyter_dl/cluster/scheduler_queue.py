"""Kernel side: whether a scheduler (Slurm, PBS, SGE, LSF) still holds an engine set in its queue, and why."""

import subprocess


def pending(launcher_name: str, engine_set, any_engine_registered: bool) -> str:
    """Why `engine_set` (an ipyparallel engine-set launcher) waits in its scheduler's queue ('Slurm job 12 PENDING
    (Resources)'), or '' once it runs. Slurm is asked with squeue; other batch systems are taken to be queued for as
    long as no engine has registered, so only EngineCluster.queue_timeout bounds their wait."""
    job_id = getattr(engine_set, "job_id", "")
    if not job_id:
        return ""  # not a batch system (mpi, ssh): its engines start at once
    if launcher_name != "slurm":
        return "" if any_engine_registered else f"{launcher_name} job {job_id} submitted"
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", str(job_id), "-o", "%T %r"], capture_output=True, text=True, timeout=30
        ).stdout.split(maxsplit=1)
    except (OSError, subprocess.SubprocessError):
        return f"Slurm job {job_id} (squeue did not answer)"
    if out and out[0] in ("PENDING", "CONFIGURING"):  # configuring: its nodes are still booting
        return f"Slurm job {job_id} {out[0]} ({out[1].strip() if len(out) > 1 else 'no reason given'})"
    return ""


def slurm_wait(job_id) -> dict:
    """Where Slurm job `job_id` stands: {"state": "PENDING", "position": 1, "reason": "Resources", "start": "..."}
    while it waits ("position" counts from 1 in Slurm's own order: priority, then submission; "start" is
    `squeue --start`'s estimate, '' when Slurm has none yet), {"state": "RUNNING"} once it runs, and
    {"state": ""} when it is gone (ended, cancelled, refused)."""
    state, reason = (_squeue("-j", str(job_id), "-o", "%T|%r") or ["|"])[0].split("|", 1)
    if state != "PENDING":
        return {"state": state}
    waiting = [line.split("|", 1) for line in _squeue("--start", "-t", "PENDING", "--sort=-p,i", "-o", "%i|%S")]
    ids = [job for job, _ in waiting]
    start = dict(waiting).get(str(job_id), "")
    return {
        "state": state,
        "position": ids.index(str(job_id)) + 1 if str(job_id) in ids else None,
        "reason": reason,
        "start": "" if start in ("N/A", "Unknown", "") else start,
    }


def _squeue(*args) -> list:
    """squeue's lines; none when it fails (a job id Slurm has already purged is an error to it)."""
    try:
        done = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []
