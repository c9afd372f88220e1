"""What the ranks' outcomes mean for the job: its final state, and the one error the notebook sees (naming the rank
that caused a failure, not the peers that only failed because it left)."""

from jupyter_dl.cluster.size_checks import counted
from jupyter_dl.errors import HostLost, JobCancelled, JobStalled, JobTimeout, RankError
from jupyter_dl.kernel.job.lost_hosts import counted_ranks, silent_hosts
from jupyter_dl.live.durations import format_duration
from jupyter_dl.wire import payload


class JobInterrupted(KeyboardInterrupt):
    """The stop button (a kernel interrupt) stopped the job. Still a KeyboardInterrupt, so a script stops and
    "Run all" stops; a notebook shows its one line instead of a traceback through jupyter-dl's frames."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def _render_traceback_(self):
        return [f"[jupyter-dl] {self.message}"]


def rank_count(n) -> str:
    """'1 rank', '2 ranks'."""
    return counted(n, "rank")


def all_ranks_stopped(n) -> str:
    return "its rank stopped" if n == 1 else f"all {n} ranks stopped"


def stop_line(job, how) -> str:
    """One line for a job the user stopped: which job, how, after how long, how far it got."""
    progress = job.progress or {}
    reached = (
        f" at epoch {progress['epoch']}/{progress['epochs']}"
        if progress.get("epoch") is not None and progress.get("epochs")
        else ""
    )
    return (
        f"job {job.name!r} ({job.id}) was {how} after {format_duration(job.elapsed)}{reached}; "
        f"{all_ranks_stopped(job.n)}"
    )


def finish(job, ending, outcomes, timeout, store, cluster):
    """Move the job to its final state; raise the error that says why when it did not succeed."""
    status = ending.status
    if status == "interrupted":
        job.transition("cancelled", error="interrupted")
        raise JobInterrupted(stop_line(job, "interrupted"))
    if status == "cancelled":
        source = store.cancel_source(job.id) if store is not None else None
        where = source or "the jobs panel or %dl_jobs cancel"
        job.transition("cancelled", error=f"cancelled from {where}")
        raise JobCancelled(stop_line(job, f"cancelled from {where}"))
    if status == "timeout":
        job.transition("failed", error="timeout")
        where = "; ".join(f"rank {r} was in {last_frame(o)}" for r, o in enumerate(outcomes) if o and not o["ok"])
        raise JobTimeout(
            f"job {job.name!r} ran past --timeout {timeout:g}s and was stopped"
            f"{' (' + where + ')' if where else ''}; raise --timeout or make the cell shorter"
        )
    if status == "stalled":
        raise_if_host_lost(job, cluster)
        job.transition("failed", error="stalled")
        raise JobStalled(
            f"job {job.name!r} stalled: {describe_stall(ending.stalls, outcomes)}; {all_ranks_stopped(job.n)}. "
            f"Every rank must run the same collectives in the same order; if one rank "
            f"legitimately works alone this long, raise --stall-timeout"
        )
    if status == "failed":
        raise_if_host_lost(job, cluster)
        raise _rank_error(job, ending, outcomes)
    job.transition("succeeded")


def _rank_error(job, ending, outcomes) -> RankError:
    """The failed job's error: the root rank's, with one line on each other rank."""
    root = root_failure(outcomes, ending.failed_order)
    first = outcomes[root]
    others = {r: other_rank_line(o, root) for r, o in enumerate(outcomes) if r != root and o}
    job.transition("failed", error=f"rank {root}: {first['ename']}: {first['evalue']}")
    restarts = len(job.restarts)
    after = f" (after {restarts} restart{'' if restarts == 1 else 's'})" if restarts else ""
    return RankError(root, first["ename"], first["evalue"], first.get("traceback", ""), others, job.name + after)


def raise_if_host_lost(job, cluster):
    """A multi-host job that failed because a whole host went silent (link down, host frozen) says so in one
    line; the ranks' own errors (a gloo connection reset) would not name the host."""
    if len(set(job.hosts)) < 2:
        return
    lost = silent_hosts(cluster.client, job.engine_ids, job.hosts)
    if not lost:
        return
    host, ranks = next(iter(lost.items()))
    job.transition("failed", error=f"host {host} lost")
    raise HostLost(
        f"job {job.name!r}: host {host} ({counted_ranks(ranks)}) stopped answering during the job (its network "
        f"link or the host is down); the other ranks were stopped. Run on the remaining hosts' engines "
        f"(%dl_cluster status) or bring the host back"
    )


def redacted(outcome, redact):
    """A rank's outcome with secret values taken out of its texts, and bound names holding a secret dropped."""
    if outcome is None:
        return None
    clean = {k: redact(v) if isinstance(v, str) else v for k, v in outcome.items()}
    values = clean.get("values")
    if values:
        clean["values"] = {
            name: (
                payload.Unsendable(name, "it holds a --secret value, which stays on the engines")
                if isinstance(blob, bytes) and redact.leaks(blob.decode("latin-1"))
                else blob
            )
            for name, blob in values.items()
        }
    return clean


def root_failure(outcomes, failed_order):
    """The rank whose failure caused the others': the first that did not only fail because a peer left."""
    return next((r for r in failed_order if not outcomes[r].get("induced")), failed_order[0])


def other_rank_line(outcome, root) -> str:
    """What a rank other than the root did. One that only stopped because the root failed says so, not the error
    it got on the way out (Horovod shut down, an aborted collective, our interrupt, jupyter-dl's own end-of-job
    check): that error is the root's, not its own."""
    if outcome["ok"]:
        return "finished normally"
    if not (outcome.get("induced") or outcome.get("ename") == "KeyboardInterrupt"):
        return error_line(outcome)  # a failure of its own
    killed = f" ({outcome['evalue']})" if outcome.get("ename") == "Killed" else ""
    return f"stopped because rank {root} failed{killed}"


def error_line(outcome) -> str:
    """'Name: message', first line only, of a failed rank's outcome."""
    return f"{outcome['ename']}: {outcome['evalue']}".strip().splitlines()[0]


def failure_summary(ending, outcomes, redact) -> str:
    """One line on why an attempt failed, for the restart message."""
    if ending.status == "stalled":
        return redact(f"the job stalled ({describe_stall(ending.stalls, outcomes)})")
    root = root_failure(outcomes, ending.failed_order)
    return redact(f"rank {root} failed ({error_line(outcomes[root])})")


def describe_stall(stalls, outcomes) -> str:
    """Which ranks waited in what, and where the others were when they were stopped."""
    waits = [
        f"rank {r} waited {rep['waited_s']:.0f}s in {rep['what']}" + (f" ({rep['where']})" if rep["where"] else "")
        for r, rep in sorted(stalls.items())
    ]
    others = []
    for r, outcome in enumerate(outcomes):
        if r in stalls or outcome is None:
            continue
        if outcome.get("ok"):
            others.append(f"rank {r} had finished")
        elif outcome.get("ename") == "Killed":
            others.append(f"rank {r} did not stop and was killed")
        else:
            others.append(f"rank {r} was at {cell_line(outcome) or last_frame(outcome)}")
    if len(outcomes) == 1:
        return "; ".join(waits)  # the only rank: no one else to wait for or to compare with
    if not others:
        return "; ".join(waits) + "; every rank was waiting, in different collectives"
    return "; ".join(waits) + ", which the others never entered (" + "; ".join(others) + ")"


def cell_line(outcome) -> str:
    """'cell line N: <source>' of the innermost frame in the user's cell in a rank's traceback, else ''."""
    lines = outcome.get("traceback", "").splitlines()
    found = ""
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith('File "<distribute-cell') and ", line " in text:
            number = text.split(", line ", 1)[1].split(",", 1)[0]
            source = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].strip().startswith("File ") else ""
            found = f"cell line {number}" + (f": {source}" if source else "")
    return found


def last_frame(outcome) -> str:
    """'file:line (function)' of the innermost frame in a rank's traceback, to say where it was stopped."""
    lines = [l.strip() for l in outcome.get("traceback", "").splitlines() if l.strip().startswith("File ")]
    return lines[-1].removeprefix("File ") if lines else outcome.get("ename", "?")
