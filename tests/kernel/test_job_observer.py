"""The observer contract between the job runner and what watches a job (kernel/job/observer.py): every observer
has the four methods, and the runner calls them without asking first."""

from types import SimpleNamespace

import pytest

from jupyter_dl.kernel.job.job_run import JobRun
from jupyter_dl.kernel.job.observer import JobObserver, QuietObserver

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

METHODS = ("status", "started", "update", "finished")


def test_the_protocol_names_what_the_runner_calls():
    assert all(callable(getattr(JobObserver, m, None)) for m in METHODS)


@pytest.mark.parametrize("name", METHODS)
def test_the_live_view_and_the_quiet_observer_have_every_method(name):
    from jupyter_dl.live.view import LiveView

    assert callable(getattr(LiveView, name)) and callable(getattr(QuietObserver, name))


def test_a_quiet_observer_hears_only_what_it_overrides():
    heard = []

    class StatusOnly(QuietObserver):
        def status(self, text):
            heard.append(text)

    observer = StatusOnly()
    observer.started(None)
    observer.update(None, force=True)
    observer.finished(None, None)
    JobRun.tell(SimpleNamespace(observers=[observer, QuietObserver()]), "2 ranks: Horovod rendezvous")
    assert heard == ["2 ranks: Horovod rendezvous"]


def test_an_observer_without_status_is_an_error_not_skipped():
    class Incomplete:  # what `hasattr(observer, "status")` used to let through silently
        pass

    with pytest.raises(AttributeError, match="status"):
        JobRun.tell(SimpleNamespace(observers=[Incomplete()]), "starting")
