"""`%dl_jobs` through a real IPython shell, over a job store of its own (no cluster: it only reads the store): the
newest 20 jobs first with a start time and a last line about the rest, filters, probe jobs hidden unless asked, the
table as a value, and every subcommand naming a job the way load_job and %dl_compare do."""

import os

import pytest

from jupyter_dl.jobs.model import Job

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


@pytest.fixture
def jobs_shell(tmp_path):
    """An IPython shell with the extension loaded, its session's job store in tmp_path (put back afterwards)."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_dl.kernel import api

    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext jupyter_dl", store_history=False)
    store = api.session().store
    before = store.root
    store.root = str(tmp_path / "jobs")
    yield ip
    store.root = before
    ip.user_ns.pop("table", None)


def _store():
    from jupyter_dl.kernel import api

    return api.session().store


def _job(name, job_id, state="succeeded", created=0.0, options=None):
    job = Job(name=name, n=2, id=job_id, options=options or {"n": 2})
    job.created = created
    job.timestamps = {"starting": created, state: created + 5.0}
    job.state = state
    _store().save(job)
    return job


def _many():
    """30 jobs of the user's (job-00 oldest) and the 3 kinds of probe jobs jupyter-dl runs for itself."""
    base = 1.7e9
    jobs = [_job(f"job-{i:02d}", f"{i:04d}aaaaaaaa", created=base + i * 60) for i in range(30)]
    _job("sized-probe", "9000bbbbbbb1", created=base + 10, options={"probe": True})
    _job("interconnect-probe", "9000bbbbbbb2", created=base + 20, options={"manual": True, "pooled": False})
    _job("recommend-probe", "9000bbbbbbb3", created=base + 30, options={"manual": True})
    _job("failed-one", "7777cccccccc", state="failed", created=base + 5)
    return jobs


def _run(jobs_shell, line, capsys):
    result = jobs_shell.run_cell(line, store_history=False)
    captured = capsys.readouterr()
    return result, captured.out, captured.err


def test_the_default_listing_shows_the_20_newest_and_says_how_to_see_the_rest(jobs_shell, capsys):
    _many()
    result, _, _ = _run(jobs_shell, "table = %dl_jobs", capsys)
    assert result.success, result.error_in_exec
    table = jobs_shell.user_ns["table"]
    assert [row["name"] for row in table] == [f"job-{i:02d}" for i in range(29, 9, -1)]  # newest first
    assert table.footer == (
        "11 older jobs not shown: %dl_jobs --limit 31 or --all; "
        "3 probe jobs (jupyter-dl's own measurements) hidden: --probes"
    )
    lines = table.as_text().splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATE", "RANKS", "PROGRESS", "STARTED", "ELAPSED", "NOTEBOOK"]
    assert len(lines) == 1 + 20 + 1 and lines[-1] == table.footer
    assert lines[1].split()[:3] == ["0029aaaaaaaa", "job-29", "succeeded"]


def test_filters_limit_probes_and_all(jobs_shell, capsys):
    _many()

    def names(line):
        result, _, _ = _run(jobs_shell, f"table = {line}", capsys)
        assert result.success, result.error_in_exec
        return [row["name"] for row in jobs_shell.user_ns["table"]]

    assert len(names("%dl_jobs --all")) == 34  # every job, probes included
    assert names("%dl_jobs --state failed") == ["failed-one"]
    assert names("%dl_jobs list --state failed,succeeded --limit 2") == ["job-29", "job-28"]
    assert names("%dl_jobs --name 'job-0*' --limit 3") == ["job-09", "job-08", "job-07"]
    assert set(names("%dl_jobs --probes --name '*probe'")) == {"sized-probe", "interconnect-probe", "recommend-probe"}
    result, _, _ = _run(jobs_shell, "table = %dl_jobs --name nothing-like-this", capsys)
    assert (
        jobs_shell.user_ns["table"].footer == "no jobs match --name nothing-like-this; %dl_jobs --all lists every job"
    )
    result, out, err = _run(jobs_shell, "%dl_jobs --state sleeping", capsys)
    assert not result.success
    assert [line for line in (out + err).splitlines() if line.strip()] == [
        "UsageError: %dl_jobs: unknown job state 'sleeping'; use any of queued, starting, running, succeeded, "
        "failed, cancelled, lost"
    ]


def test_the_table_shows_itself_and_is_a_value(jobs_shell, capsys):
    import pandas as pd

    _job("only", "0123456789ab", created=1.7e9)
    result, out, _ = _run(jobs_shell, "%dl_jobs", capsys)  # shown once, as the cell's value: no second printed copy
    assert result.success
    assert out.count("0123456789ab") == 1 and "STARTED" in out
    jobs_shell.run_cell("table = %dl_jobs", store_history=False)
    assert capsys.readouterr().out == ""  # bound, not shown
    table = jobs_shell.user_ns["table"]
    formats, _ = jobs_shell.display_formatter.format(table)
    assert "<table>" in formats["text/html"] and "0123456789ab" in formats["text/html"]
    assert formats["text/plain"] == table.as_text()
    assert table[0]["id"] == "0123456789ab" and table[0]["ranks"] == 2 and table[0]["elapsed_s"] == 5.0
    frame = table.to_dataframe()
    assert isinstance(frame, pd.DataFrame) and list(frame["name"]) == ["only"]
    assert list(frame.columns) == ["id", "name", "state", "ranks", "progress", "started", "elapsed_s", "notebook"]


def test_an_empty_store_says_how_to_start_a_job(jobs_shell, capsys):
    jobs_shell.run_cell("table = %dl_jobs", store_history=False)
    assert (
        jobs_shell.user_ns["table"].as_text()
        == "no jobs yet; put %%distribute -n 2 on top of a Keras cell to start one"
    )


def test_every_subcommand_names_a_job_as_load_job_does(jobs_shell, capsys):
    running = Job(name="long-run", n=2, id="5151aaaaaaaa")  # this process is its kernel: alive
    running.transition("running")
    _store().save(running)
    _store().write_logs(running.id, {0: "hello from rank 0\n"})
    result, out, _ = _run(jobs_shell, "%dl_jobs logs 5151", capsys)
    assert result.success and out == "hello from rank 0\n"
    result, out, _ = _run(jobs_shell, "%dl_jobs cancel long-run", capsys)
    assert result.success and out == "job 5151aaaaaaaa (long-run): cancelling\n"
    assert _store().cancel_requested(running.id)

    result, out, err = _run(jobs_shell, "%dl_jobs cancel nonexistent", capsys)
    assert not result.success
    assert [line for line in (out + err).splitlines() if line.strip()] == [
        "UsageError: %dl_jobs: no job 'nonexistent': see %dl_jobs"
    ]
    _job("a", "abab00000001"), _job("b", "abab00000002")
    result, out, err = _run(jobs_shell, "%dl_jobs logs abab", capsys)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and "abab00000001 (a), abab00000002 (b); give more of the id" in lines[0]


def test_dl_jobs_load_gives_back_what_a_job_kept(jobs_shell, capsys):
    import json

    job = _job("kept", "f00d00000001", created=1.7e9)
    folder = _store().job_dir(job.id) / "results"
    folder.mkdir(parents=True)
    (folder / "cell.py").write_text("y = 2\n")
    (folder / "options.json").write_text(json.dumps({"n": 2}))
    (folder / "environment.json").write_text("{}")
    result, _, _ = _run(jobs_shell, "saved = %dl_jobs load kept", capsys)
    assert result.success, result.error_in_exec
    assert jobs_shell.user_ns.pop("saved").source == "y = 2\n"
    result, out, err = _run(jobs_shell, "%dl_jobs load f00d00000002", capsys)
    assert not result.success and "no job 'f00d00000002': see %dl_jobs" in out + err
    assert os.path.isdir(folder)
