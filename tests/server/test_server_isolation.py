"""On a JupyterHub the jobs API shows the signed-in user's jobs only, even from a shared store.

A real jupyter_server whose identity provider says who is signed in, as JupyterHub's does for a single-user server
(jupyter_server's default names an anonymous user anew on every token request, so a name cannot be compared)."""

import asyncio
import json
import os
import stat
import subprocess
import sys
import time

import pytest
from jupyter_server.auth.identity import IdentityProvider, User
from tornado.httpclient import HTTPClientError

from jupyter_dl.jobs import Job
from jupyter_dl.jobs.store import JobStore

pytest_plugins = ["pytest_jupyter.jupyter_server"]


class SignedInAsAnn(IdentityProvider):
    def get_user(self, handler):
        return User("ann")

    def is_token_authenticated(self, handler):
        return True  # like a hub token: API calls without cookies need no XSRF token


@pytest.fixture
def store(tmp_path):
    return JobStore(root=str(tmp_path / "jobs"))


@pytest.fixture
def jp_server_config(store):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_dl": True}, "identity_provider_class": SignedInAsAnn},
        "JobStore": {"root": store.root},
    }


def _add(store, name, user):
    job = Job(name=name, n=2, user=user)
    job.transition("running")
    store.save(job)
    return job


async def test_users_see_and_cancel_only_their_own_jobs(jp_fetch, store, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "ann")  # what the hub's spawner sets for ann's server
    mine, theirs = _add(store, "mine", "ann"), _add(store, "theirs", "mallory")
    body = json.loads((await jp_fetch("jupyter-dl", "api", "jobs")).body)
    assert [j["name"] for j in body["jobs"]] == ["mine"]
    for path, method in (
        ((theirs.id,), "GET"),
        ((theirs.id,), "DELETE"),
        ((theirs.id, "logs"), "GET"),
        ((theirs.id, "metrics"), "GET"),
    ):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("jupyter-dl", "api", "jobs", *path, method=method)
        assert err.value.code == 404 and json.loads(err.value.response.body)["code"] == "not_found"
    assert not store.cancel_requested(theirs.id)
    assert json.loads((await jp_fetch("jupyter-dl", "api", "jobs", mine.id)).body)["user"] == "ann"
    monkeypatch.delenv("JUPYTERHUB_USER")  # a plain single-user server: everything in its store is the owner's
    body = json.loads((await jp_fetch("jupyter-dl", "api", "jobs")).body)
    assert sorted(j["name"] for j in body["jobs"]) == ["mine", "theirs"]


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _controller_file(ipython_dir, cluster_id, controller_pid):
    """A running cluster's file as ipyparallel writes it for a local controller (no engines yet)."""
    profile_dir = ipython_dir / "profile_default"
    (profile_dir / "security").mkdir(parents=True, exist_ok=True)
    state = {"cluster_id": cluster_id, "pid": controller_pid, "profile_dir": str(profile_dir), "state": "running"}
    data = {
        "cluster": {"cluster_id": cluster_id, "n": 0, "profile_dir": str(profile_dir), "class": "ipyparallel.Cluster"},
        "controller": {"class": "local", "state": state},
        "engines": {"class": "local", "sets": {}},
    }
    (profile_dir / "security" / f"cluster-{cluster_id}.json").write_text(json.dumps(data))


async def test_users_stop_only_clusters_their_own_kernels_started(jp_fetch, store, tmp_path, monkeypatch):
    """Servers of one uid share their cluster files: ann's server lists mallory's cluster too, but stopping it is
    refused like stopping one that does not exist; her own (a kernel that ran her job) stops."""
    monkeypatch.setenv("JUPYTERHUB_USER", "ann")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    controllers = {"ann": _sleeper(), "mallory": _sleeper()}
    try:
        clusters = {}
        for user, kernel_pid in (("ann", 999_991), ("mallory", 999_992)):
            clusters[user] = f"jupyter-dl-{kernel_pid}-1"
            _controller_file(tmp_path / "ipython", clusters[user], controllers[user].pid)
            job = _add(store, f"{user}-job", user)
            job.kernel_pid = kernel_pid
            store.save(job)
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch("jupyter-dl", "api", "cluster", clusters["mallory"], method="DELETE")
        assert refused.value.code == 404, refused.value
        said = json.loads(refused.value.response.body)["message"]
        assert said.startswith(f"no running cluster '{clusters['mallory']}'"), said
        reply = await jp_fetch("jupyter-dl", "api", "cluster", clusters["ann"], method="DELETE")
        assert reply.code == 202
        deadline = time.monotonic() + 30
        while controllers["ann"].poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert controllers["ann"].poll() is not None  # ann's stopped
        assert controllers["mallory"].poll() is None  # mallory's still runs
    finally:
        for process in controllers.values():
            process.kill()
            process.wait()


def test_job_files_are_readable_by_their_user_only(store):
    """A shared store (c.JobStore.root on a directory every user writes) must not show one user's job to another:
    the job's directory and every file the store writes in it are the user's alone, whatever the umask."""
    old = os.umask(0o022)
    try:
        job = _add(store, "private", "ann")
        store.append_metrics(job.id, [{"kind": "epoch", "rank": 0, "epoch": 0, "logs": {"loss": 1.0}}])
        store.write_logs(job.id, {0: "hello\n"})
        store.request_cancel(job.id, "the jobs panel")
    finally:
        os.umask(old)
    directory = store.job_dir(job.id)
    modes = {p.relative_to(directory).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in directory.rglob("*")}
    assert set(modes) == {"job.json", "metrics.jsonl", "logs", "logs/rank0.stdout.log", "cancel"}, modes
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert {name: mode & 0o077 for name, mode in modes.items()} == dict.fromkeys(modes, 0), modes
