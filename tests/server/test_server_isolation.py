"""On a JupyterHub the jobs API shows the signed-in user's jobs only, even from a shared store.

A real jupyter_server whose identity provider says who is signed in, as JupyterHub's does for a single-user server
(jupyter_server's default names an anonymous user anew on every token request, so a name cannot be compared)."""

import json

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
