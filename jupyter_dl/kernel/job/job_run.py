"""One job's run state, carried through its attempts in one object instead of a dozen parameters."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jupyter_dl.kernel import notebook_env
from jupyter_dl.kernel.cell import numbered_from
from jupyter_dl.kernel.job.work import CellWork, FunctionWork
from jupyter_dl.wire import keras_objects, random_state
from jupyter_dl.wire.spec import RankSpec

if TYPE_CHECKING:  # annotations only: the live view's state imports nothing heavy, but keep this module light
    from jupyter_dl.jobs.model import Job
    from jupyter_dl.kernel.job.observer import JobObserver
    from jupyter_dl.kernel.job.work import Shipment
    from jupyter_dl.kernel.secrets import Redactor
    from jupyter_dl.live.state import TrainingState
    from jupyter_dl.wire.options import RunOptions


@dataclass
class JobRun:
    job: Job  # the jobs.Job the panel and the store show
    work: CellWork | FunctionWork
    shipment: Shipment  # what travels to the engines
    options: RunOptions
    state: TrainingState  # built from the streamed metrics
    redact: Redactor  # takes secret values out of everything that leaves the engines
    secrets: dict = field(default_factory=dict)  # --secret values, set on the ranks for this job only
    stdout: Any = None  # where rank output is relayed (None: this process's)
    stderr: Any = None
    observers: Sequence[JobObserver] = ()  # the live view, told each phase, start, update and the end
    granted: list | None = None  # the GPUs the pool granted, as (host, gpu) pairs
    attempt: int = 0  # 0 the first run, then one more per --restarts restart
    segment: int = 0  # an elastic job's group: 0 the first, then one more per membership change
    # The last attempt's timings (time.perf_counter()) and the names it shipped, for job.timings.
    cluster_ready_at: float = 0.0
    shipped_at: float = 0.0
    shipped: list = field(default_factory=list)
    # Taken when the job is made, before the kernel starts its part (Horovod's rendezvous draws a random port).
    notebook_random_state: dict | None = field(default_factory=random_state.capture)

    def tell(self, text):
        """Say what the job is doing before its first step, to the observers (JobObserver.status)."""
        for observer in self.observers:
            observer.status(text)

    def timings(self, started_at, outcomes) -> dict:
        """Where the job's time went, kernel side (from `started_at`, a perf_counter) and per rank."""
        return {
            "cluster_s": self.cluster_ready_at - started_at,
            "ship_s": self.shipped_at - self.cluster_ready_at,
            "run_s": time.perf_counter() - self.shipped_at,
            "shipped": self.shipped,
            "ranks": [o.get("timings") for o in outcomes],
        }

    def rank_spec(self, size, stall_s, resource_interval) -> RankSpec:
        """What every rank of this attempt gets; each rank's copy adds its rank and rendezvous environment."""
        options, job = self.options, self.job
        spec = RankSpec(
            size=size,
            names_in=self.shipment.names_in,
            names_out=self.shipment.names_out,
            job_name=job.name,
            options=options,
            secret_values=self.secrets,
            kernel_pid=job.kernel_pid,
            kernel_host=job.kernel_host,
            stall_s=stall_s if options.stall_timeout is None else options.stall_timeout,
            attempt=self.attempt,
            # Same-host ranks share one kind of device here; across hosts speeds may differ (--balance auto).
            balance_batches=options.balance == "on" or (options.balance == "auto" and len(set(job.hosts)) > 1),
            resource_interval=resource_interval,
            dtype_policy=notebook_dtype_policy(),
            random_state=self.notebook_random_state,
            notebook_env=notebook_env.changed(),
            keras_registrations=self.shipment.keras_registrations,
            kernel_cwd=os.getcwd(),
            kernel_sys_path=[entry for entry in sys.path if entry],
            job_id=job.id,
        )
        if isinstance(self.work, CellWork):
            # Numbered as the notebook shows the cell, so a rank's traceback and a stall report name its lines.
            spec.mode, spec.code = "cell", numbered_from(self.work.code, self.work.first_line)
        else:
            spec.mode, spec.fn, spec.all_ranks = "fn", self.shipment.fn, self.work.all_ranks
        return spec


def notebook_dtype_policy() -> str | None:
    """The kernel's global Keras dtype policy, when Keras is loaded here (not imported for this)."""
    return keras_objects.global_dtype_policy()
