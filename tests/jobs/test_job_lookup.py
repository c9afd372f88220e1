"""One resolver for every command that takes a job (jobs.lookup): a full id, a unique id prefix or a job name (its
newest job); an ambiguous prefix lists the candidates, an unknown word points to %dl_jobs. load_job reads it, says
why a job kept nothing, and a kept model downloads under the job's name."""

import json
import time

import pytest

from jupyter_dl.jobs.lookup import AmbiguousJob, UnknownJob, find_job
from jupyter_dl.jobs.model import Job
from jupyter_dl.jobs.results import NoResults, load_job, model_file_name
from jupyter_dl.jobs.store import JobStore

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


@pytest.fixture
def store(tmp_path):
    return JobStore(root=str(tmp_path / "jobs"))


def _job(store, name, job_id, state="succeeded", user=None, created=None):
    job = Job(name=name, n=2, id=job_id, **({"user": user} if user else {}))
    if created is not None:
        job.created = created
    job.transition(state)
    store.save(job)
    return job


def _keep_results(store, job):
    """What JobResults leaves for a cell job without models: the cell, its options, its environment."""
    folder = store.job_dir(job.id) / "results"
    folder.mkdir(parents=True)
    (folder / "cell.py").write_text("x = 1\n")
    (folder / "options.json").write_text(json.dumps({"n": 2}))
    (folder / "environment.json").write_text(json.dumps({"hosts": ["h"]}))


def test_a_job_is_found_by_id_unique_prefix_or_name(store):
    a = _job(store, "sized", "3470aaaa0001", created=1000.0)
    b = _job(store, "sized", "99839637b608", created=2000.0)
    assert find_job(store, a.id)["id"] == a.id
    assert find_job(store, "3470")["id"] == a.id  # a prefix of four characters is enough
    assert find_job(store, "sized")["id"] == b.id  # a name: the newest job of that name


def test_an_ambiguous_prefix_lists_the_candidates_in_one_line(store):
    _job(store, "first", "feed00000001")
    _job(store, "second", "feed00000002")
    with pytest.raises(AmbiguousJob) as info:
        find_job(store, "feed")
    message = str(info.value)
    assert message == ("'feed' starts 2 job ids: feed00000001 (first), feed00000002 (second); give more of the id"), (
        message
    )


def test_unknown_words_and_short_prefixes_say_where_to_look(store):
    _job(store, "one", "abcdef000001")
    with pytest.raises(UnknownJob, match="^no job 'nonexistent': see %dl_jobs$"):
        find_job(store, "nonexistent")
    with pytest.raises(UnknownJob, match="^'abc' is too short for an id prefix: give at least 4 characters"):
        find_job(store, "abc")
    with pytest.raises(UnknownJob, match="give a job id"):
        find_job(store, "  ")


def test_another_users_job_is_reported_as_missing(store):
    theirs = _job(store, "private", "bbbb00000001", user="bob")
    assert find_job(store, "private", viewer="bob")["id"] == theirs.id
    with pytest.raises(UnknownJob, match="no job 'private'"):
        find_job(store, "private", viewer="ann")
    with pytest.raises(UnknownJob, match="no job 'bbbb'"):
        find_job(store, "bbbb", viewer="ann")


def test_load_job_takes_a_prefix_or_a_name_and_says_why_a_job_kept_nothing(store):
    kept = _job(store, "kept", "c0ffee000001")
    _keep_results(store, kept)
    for word in (kept.id, "c0ffee", "kept"):
        saved = load_job(store, word)
        assert saved.id == kept.id and saved.source == "x = 1\n" and saved.options == {"n": 2}
    assert repr(saved) == "<SavedJob c0ffee000001 (kept): models none; histories none>"
    _job(store, "broken", "dead00000001", state="failed")
    with pytest.raises(NoResults, match=r"^job dead00000001 \(broken\) failed: only a succeeded job keeps"):
        load_job(store, "broken")
    _job(store, "busy", "beef00000001", state="running")
    with pytest.raises(NoResults, match=r"^job beef00000001 \(busy\) is still running: load it when it has succeeded$"):
        load_job(store, "beef")
    with pytest.raises(UnknownJob, match="^no job '3470': see %dl_jobs$"):
        load_job(store, "3470")


def test_the_api_load_job_reads_names_and_prefixes(store, monkeypatch):
    import jupyter_dl
    from jupyter_dl.kernel import api

    monkeypatch.setattr(api.session().store, "root", store.root)
    kept = _job(store, "via-api", "a11a00000001")
    _keep_results(store, kept)
    assert jupyter_dl.load_job("via-api").id == kept.id
    assert jupyter_dl.load_job("a11a").id == kept.id
    with pytest.raises(UnknownJob, match="no job 'nope': see %dl_jobs"):
        jupyter_dl.load_job("nope")


def test_a_kept_model_downloads_under_the_jobs_name(store):
    job = _job(store, "images cnn/v2", "99839637b608")
    assert model_file_name(store, job.id, "model") == "images-cnn-v2-model.keras"
    again = _job(store, "images cnn/v2", "1234567890ab", created=time.time() + 1)
    # Re-runs of a named cell share the name: a short id tells their files apart.
    assert model_file_name(store, job.id, "model") == "images-cnn-v2-998396-model.keras"
    assert model_file_name(store, again.id, "net") == "images-cnn-v2-123456-net.keras"
    unnamed = _job(store, "../..", "0000aaaa0000")
    assert model_file_name(store, unnamed.id, "model") == "job-0000aa-model.keras"
