"""What a running job tells those who watch it: the cell's live view (live/view.py LiveView), or a test's recorder.

The job runner calls, in this order: `status(text)` at each phase before the first step (starting engines,
importing TensorFlow, the rendezvous), `started(job)` once the ranks run (not again on a --restarts restart: it goes
on in the same view), `update(state, force)` whenever metrics arrive (force on the last call, so a throttled view
draws the end), and `finished(job, state)` at the end, whatever the outcome.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only
    from jupyter_dl.jobs.model import Job
    from jupyter_dl.live.state import TrainingState


class JobObserver(Protocol):
    def status(self, text: str) -> None:
        """What the job is doing before its first step."""

    def started(self, job: Job) -> None:
        """The ranks run (the job is in state 'running')."""

    def update(self, state: TrainingState, force: bool = False) -> None:
        """New metrics are in `state`; `force`: draw now, this is the last update."""

    def finished(self, job: Job, state: TrainingState) -> None:
        """The job ended (job.state says how)."""


class QuietObserver:
    """A JobObserver that ignores everything: subclass it and override only what you want to hear."""

    def status(self, text: str) -> None:
        pass

    def started(self, job: Job) -> None:
        pass

    def update(self, state: TrainingState, force: bool = False) -> None:
        pass

    def finished(self, job: Job, state: TrainingState) -> None:
        pass
