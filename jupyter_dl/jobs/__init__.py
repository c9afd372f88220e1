"""Jobs: the model every view shares, and the on-disk store that outlives kernels."""

from jupyter_dl.jobs.model import FINAL_STATES, STATES, Job, JobRegistry

__all__ = ["FINAL_STATES", "STATES", "Job", "JobRegistry"]
