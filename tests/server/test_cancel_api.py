"""A cancel sent to the REST API (as the panel does) reaches a job running in a kernel and stops all its ranks."""

import threading
import time

import pytest

import jupyter_dl
from jupyter_dl.errors import JobCancelled

pytest_plugins = ["pytest_jupyter.jupyter_server"]

ENDLESS = "import time\nwhile True:\n    time.sleep(0.05)\n"


@pytest.fixture
def jp_server_config(dl_session):
    # The server reads the same store the kernel-side session writes, as in a real deployment.
    return {"ServerApp": {"jpserver_extensions": {"jupyter_dl": True}}, "JobStore": {"root": dl_session.store.root}}


def _start(name):
    outcome = {}

    def run():
        try:
            jupyter_dl.distribute(ENDLESS, n=2, namespace={}, manual=True, name=name)
        except BaseException as exc:  # what the notebook cell would have raised
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _wait_running(session, name, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = next((j for j in session.jobs.all() if j.name == name and j.state == "running"), None)
        if job is not None:
            return job
        time.sleep(0.05)
    raise AssertionError(f"{name} never started running")


async def test_delete_stops_every_rank_within_3s(jp_fetch, dl_session):
    assert jupyter_dl.distribute(_seven, n=2) == 7  # warm engines: the 3 s budget is for stopping, not starting
    thread, outcome = _start("endless-api")
    job = _wait_running(dl_session, "endless-api")
    started = time.monotonic()
    response = await jp_fetch("jupyter-dl", "api", "jobs", job.id, method="DELETE")
    assert response.code == 202
    thread.join(30)
    took = time.monotonic() - started
    assert isinstance(outcome.get("error"), JobCancelled), outcome
    assert dl_session.store.load(job.id).state == "cancelled"
    assert took < 3.0, f"cancel took {took:.2f}s"
    print(f"time to cancel via REST: {took:.2f}s")
    assert jupyter_dl.distribute(_seven, n=2) == 7  # the engines are idle and reusable


def _seven():
    return 7


def test_a_cancelled_cell_says_one_line_and_no_traceback(shell, dl_session, capsys):
    """Through a real IPython shell: a cancel the user asked for (%dl_jobs cancel here; the panel's goes through the
    same store) ends the cell with one line saying what, from where and after how long, and no traceback."""
    from jupyter_dl.server.service import JobService

    def cancel_when_running():
        job = _wait_running(dl_session, "cancel-one-line")
        time.sleep(0.5)
        JobService(dl_session.store).cancel(job.id, source="%dl_jobs cancel")

    canceller = threading.Thread(target=cancel_when_running, daemon=True)
    canceller.start()
    result = shell.run_cell("%%distribute -n 2 --manual --name cancel-one-line\n" + ENDLESS, store_history=False)
    canceller.join(10)
    shown = capsys.readouterr()
    assert isinstance(result.error_in_exec, JobCancelled)  # still an error: "Run all" stops here
    lines = [line for line in (shown.out + shown.err).splitlines() if line.strip()]
    error_lines = [line for line in lines if "was cancelled" in line]
    assert len(error_lines) == 1, lines
    line = error_lines[0]
    assert "'cancel-one-line'" in line and "from %dl_jobs cancel" in line and "all 2 ranks stopped" in line, line
    assert " after " in line and line.rstrip().split(" after ")[1][0].isdigit(), line
    text = shown.out + shown.err
    assert "Traceback" not in text and "launcher.py" not in text and "api.py" not in text, text
    job = next(j for j in reversed(dl_session.jobs.all()) if j.name == "cancel-one-line")
    assert job.id in line and dl_session.store.load(job.id).state == "cancelled"
