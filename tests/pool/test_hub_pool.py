"""The GPU pool as a JupyterHub managed service, on a real JupyterHub on loopback with two users.

JupyterHub (dummy authenticator, local process spawner) starts `jupyter-dl-pool` itself as a managed service, with a
simulated inventory of 4 GPUs (this machine has none: the pool only counts GPUs, so a simulated inventory exercises
the same code). The users' jobs here are pool tickets requested with each user's own hub token through the hub's
proxy, as a kernel's client does; no single-user servers are spawned.
"""

import json
import time

import pytest
import requests
from local_hub import SERVICE, running_hub, user_token

from jupyter_dl.pool.client import PoolClient
from jupyter_dl.pool.gang import PoolError


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    pool = ["--simulate-gpus=sim0:4", "--max-gpus=4", "--max-jobs=1"]
    with running_hub(tmp_path_factory.mktemp("hub"), {"ann", "bob"}, pool) as hub:
        scopes = [f"access:services!service={SERVICE}"]
        yield {**hub, "tokens": {user: user_token(hub, user, scopes) for user in ("ann", "bob", "root")}}


def _client(hub, user):
    return PoolClient(hub["url"], hub["tokens"][user])


def test_two_users_share_the_pool_through_the_hub(hub):
    ann, bob, root = _client(hub, "ann"), _client(hub, "bob"), _client(hub, "root")
    first = ann.submit(1, job="ann-train", owner="kernel-ann")
    assert first["state"] == "granted" and first["user"] == "ann"

    # Gang admission: 4 GPUs asked, 3 free: bob waits, holding nothing, first in the queue.
    big = bob.submit(4, job="bob-big", owner="kernel-bob")
    assert big["state"] == "queued" and big["devices"] == [] and big["position"] == 1
    assert "waiting for 4 GPUs to be free at once (3 free now)" in big["reason"]
    assert ann.summary() == {"gpus": 4, "free": 3, "queued": 1}

    # Each sees only their own jobs; an admin sees all.
    assert [t["job"] for t in ann.tickets()] == ["ann-train"]
    assert [t["job"] for t in bob.tickets()] == ["bob-big"]
    assert sorted(t["job"] for t in root.tickets()) == ["ann-train", "bob-big"]

    # A cross-user cancel is refused, and reads like an unknown id.
    with pytest.raises(PoolError, match=f"no job '{first['id']}' of yours in the pool.*HTTP 404"):
        bob.release(first["id"])
    assert ann.ticket(first["id"])["state"] == "granted"

    # Quota breaches: too many GPUs is refused outright; a second job over max-jobs waits with a reason and place.
    with pytest.raises(PoolError, match="the pool has 4 in all: ask for at most 4.*HTTP 409"):
        ann.submit(8)
    second = ann.submit(1, job="ann-second")
    assert second["state"] == "queued" and second["position"] == 2
    assert "ann runs 1 jobs, the quota is 1 at once" in second["reason"]

    # Ann's first job ends: bob's 4-GPU job starts whole; ann's second still waits (no GPU free).
    ann.release(first["id"])
    granted = bob.wait_granted(big["id"], owner="kernel-bob", timeout=10, poll=0.1)
    assert len(granted["devices"]) == 4
    assert ann.ticket(second["id"])["state"] == "queued"
    bob.release(big["id"])
    assert ann.wait_granted(second["id"], timeout=10, poll=0.1)["state"] == "granted"
    ann.release(second["id"])


def test_the_pool_refuses_requests_without_a_valid_hub_token_or_scope(hub):
    url = hub["url"] + "api/tickets"
    assert requests.get(url, timeout=10).status_code in (401, 403)
    assert requests.post(
        url, json={"gpus": 1}, timeout=10, headers={"Authorization": "token not-a-token"}
    ).status_code in (401, 403)
    # A real token of a real user, but without the scope for this service.
    reply = requests.post(
        f"{hub['api']}/users/ann/tokens",
        headers=hub["admin"],
        timeout=10,
        json={"scopes": ["read:users:name!user=ann"], "note": "no pool scope"},
    )
    assert reply.status_code == 201, reply.text
    unscoped = {"Authorization": f"token {reply.json()['token']}"}
    assert requests.get(url, headers=unscoped, timeout=10).status_code == 403
    body = requests.post(url, headers={"Authorization": f"token {hub['tokens']['ann']}"}, data="{", timeout=10)
    assert body.status_code == 400 and json.loads(body.text)["code"] == "http_400"


def _two():
    return 2


def test_a_distributed_job_waits_for_its_gpus_in_the_pool_then_runs_and_gives_them_back(
    hub, dl_session, monkeypatch, capsys
):
    """A real 2-rank job from ann's kernel: bob holds the whole pool, so it queues (state and place recorded),
    runs once bob's job ends, and its GPUs go back when it finishes."""
    import threading

    import jupyter_dl

    bob = _client(hub, "bob")
    held = bob.submit(4, job="bob-everything", owner="kernel-bob")
    assert held["state"] == "granted"
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub["tokens"]["ann"])
    monkeypatch.setattr(dl_session.runner, "pool_url", hub["url"])
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(value=jupyter_dl.distribute(_two, n=2, name="pooled")))
    runner.start()
    deadline = time.monotonic() + 30
    while not any(
        j.name == "pooled" and j.state == "queued" and j.progress.get("queue_position") == 1
        for j in dl_session.jobs.all()
    ):
        assert time.monotonic() < deadline and runner.is_alive(), "the job never queued"
        time.sleep(0.05)
    job = next(j for j in dl_session.jobs.all() if j.name == "pooled")
    assert dl_session.store.load(job.id).progress["queue_position"] == 1  # what the panel reads
    bob.release(held["id"])
    runner.join(120)
    assert outcome.get("value") == 2 and job.state == "succeeded"
    assert len(job.gpus) == 2 and all(g.startswith("sim0:") for g in job.gpus)
    assert "queued for 2 GPUs: position 1" in capsys.readouterr().err
    assert _client(hub, "ann").summary()["free"] == 4  # released when the job ended
