"""Typed errors users see. Each message is one line that says what to do next."""


class DistributeError(Exception):
    """Base class for jupyter-dl errors."""


class UsageError(DistributeError):
    """Bad arguments or input; raised before anything is started."""


class ShipError(UsageError):
    """A notebook variable the cell reads cannot be sent to the engines."""

    def __init__(
        self, name: str, reason: str, advice="create it inside the %%distribute cell or convert it to a picklable value"
    ):
        self.name = name
        super().__init__(f"cannot send variable '{name}' to the engines ({reason}); {advice}")


class BackendMissing(UsageError):
    """Horovod is absent or built without what we need."""


class RankError(DistributeError):
    """A rank raised. Renders like a notebook error: the failing rank's own traceback, then what others said."""

    def __init__(
        self, rank: int, ename: str, evalue: str, traceback_text: str, others: dict | None = None, job_name: str = ""
    ):
        self.rank = rank
        self.ename = ename
        self.evalue = evalue
        self.traceback_text = traceback_text
        self.others = others or {}
        self.job_name = job_name
        super().__init__(f"rank {rank} raised {ename}: {evalue}")

    def _render_traceback_(self):
        # IPython calls this instead of showing our kernel-side frames, which would only hide the real error.
        lines = [f"RankError: job {self.job_name!r}: rank {self.rank} raised {self.ename}: {self.evalue}", ""]
        lines += self.traceback_text.rstrip().splitlines()
        if self.others:
            lines.append("")
            lines.append("Other ranks:")
            for rank, summary in sorted(self.others.items()):
                lines.append(f"  rank {rank}: {summary}")
        return lines


class JobTimeout(DistributeError):
    """The job ran past --timeout."""


class JobStalled(DistributeError):
    """A rank waited in a collective that the others never entered; the job was stopped."""


class HostLost(DistributeError):
    """A host stopped answering during a job (its link or the host went down); the other ranks were stopped."""


class JobCancelled(DistributeError):
    """The job was interrupted or cancelled by the user."""
