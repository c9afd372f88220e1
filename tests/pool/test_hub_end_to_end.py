"""The hub end to end: two real system users, each with their own single-user server spawned by a real JupyterHub,
each running a `%%distribute` job from a notebook's kernel through the shared GPU pool.

JupyterHub (loopback, dummy authenticator) spawns every server as its own system user with the local process
spawner, running the venv's `jupyterhub-singleuser` (jupyter-dl's server extension on). The pool is the managed
service with a simulated inventory of 2 GPUs, so the second user's 2-rank job waits for the first one's GPUs and the
cell shows it. Everything goes over HTTP through the hub's proxy with the users' own hub tokens, as their browsers
would.

The job store is one directory for both servers (`c.JobStore.root`, as a site may configure). The kernels write each
job.json readable by its user only, so the OS alone already keeps one user's server from another's jobs; the tests
then open the store to everyone, as a store shared by servers running under one uid would be, so that what refuses
is jupyter-dl's own check of the hub user (server/handlers.py `viewer`).
"""

import contextlib
import os
import pathlib
import shutil
import sys
import tempfile
import time

import pytest
import requests
import system_users
from local_hub import running_hub, user_token
from notebook_kernel import NotebookKernel

ANN, BOB = "jdl-ann", "jdl-bob"
SUPPORT = pathlib.Path(__file__).resolve().parents[1] / "support"
REPO = pathlib.Path(__file__).resolve().parents[2]

# Hub config after the common part (local_hub.py): servers run as their users and die with the hub even when it is
# killed; their tokens may call the pool (as examples/shared-gpu-hub/jupyterhub_config.py grants).
SPAWNER = """
import sys
sys.path.insert(0, {support!r})
from jupyterhub.spawner import LocalProcessSpawner
from process_guard import die_with_pytest

class GuardedSpawner(LocalProcessSpawner):
    def make_preexec_fn(self, name):
        become = super().make_preexec_fn(name)
        def preexec():
            become()
            die_with_pytest()  # after the switch to the user, which clears a parent-death signal set before
        return preexec

c.JupyterHub.spawner_class = GuardedSpawner
c.Spawner.cmd = [{singleuser!r}]
c.Spawner.args = ["--JobStore.root={store}"]
c.Spawner.environment = {{
    "JUPYTER_DL_POOL_URL": f"http://127.0.0.1:{{c.JupyterHub.port}}/services/jupyter-dl-pool/",
}}
c.Spawner.http_timeout = 180
c.Spawner.start_timeout = 180
c.JupyterHub.load_roles.append(
    {{"name": "server", "scopes": ["users:activity!user", "access:servers!server",
                                  "access:services!service=jupyter-dl-pool"]}}
)
"""

# The same cell for both; ann's ranks hold their GPUs until the test says so, so bob's job has to wait.
CELL = """%%distribute -n 2 --name {name}
import os, time
import numpy as np
import keras
while not os.path.exists({hold!r}):
    time.sleep(0.2)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
history = model.fit(np.ones((32, 4)), np.ones((32, 1)), epochs=2, batch_size=8, verbose=0)
"""
WAIT_LINE = "[jupyter-dl] queued for 2 GPUs: position 1"


@pytest.fixture(scope="module")
def shared():
    """A directory both users reach: the shared job store, and the file that lets ann's job go on."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="jdl-hub-e2e-"))
    try:
        root.chmod(0o755)
        (root / "jobs").mkdir(mode=0o1777)
        (root / "jobs").chmod(0o1777)  # like /tmp: every user writes, none removes another's
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, shared):
    with system_users.users([ANN, BOB]) as accounts:
        uids = [a.pw_uid for a in accounts.values()]
        with system_users.reachable([sys.executable, sys.base_prefix, REPO / "jupyter_dl"], uids):
            for account in accounts.values():
                _kernel_config(account, f"c.JobStore.root = {str(shared / 'jobs')!r}\n")
            extra = SPAWNER.format(
                support=str(SUPPORT),
                singleuser=str(pathlib.Path(sys.executable).parent / "jupyterhub-singleuser"),
                store=shared / "jobs",
            )
            path = f"{pathlib.Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
            pool = ["--simulate-gpus=sim0:2", "--max-gpus=2", "--max-jobs=1"]
            with running_hub(
                tmp_path_factory.mktemp("hub-e2e"), [ANN, BOB], pool, extra, ["admin:servers"], {"PATH": path}
            ) as hub:
                with _log_on_failure(hub):
                    for user in (ANN, BOB):  # both spawn at once; the hub answers 202 while one starts
                        reply = requests.post(f"{hub['api']}/users/{user}/server", headers=hub["admin"], timeout=30)
                        assert reply.status_code in (201, 202), reply.text
                    for user in (ANN, BOB):
                        _wait_ready(hub, user)
                    tokens = {user: user_token(hub, user, [f"access:servers!user={user}"]) for user in (ANN, BOB)}
                yield {**hub, "tokens": tokens, "store": shared / "jobs", "hold": shared / "go"}


@contextlib.contextmanager
def _log_on_failure(hub):
    """The end of the hub's log (the servers write theirs there too) when what runs inside fails."""
    try:
        yield
    except BaseException:
        print(hub["log"].read_text()[-8000:])
        raise


def _kernel_config(account, text):
    """The user's own IPython kernel config (their kernels read it), written as that user's file."""
    folder = pathlib.Path(account.pw_dir) / ".ipython" / "profile_default"
    folder.mkdir(parents=True)
    (folder / "ipython_kernel_config.py").write_text(text)
    for path in (folder.parent, folder, folder / "ipython_kernel_config.py"):
        os.chown(path, account.pw_uid, account.pw_gid)


def _wait_ready(hub, user, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        server = requests.get(f"{hub['api']}/users/{user}", headers=hub["admin"], timeout=10).json()["servers"]
        if server.get("", {}).get("ready"):
            return
        assert server and time.monotonic() < deadline, f"{user}'s server did not start: {server}"
        time.sleep(0.5)


def _server(hub, user):
    return f"{hub['base']}user/{user}/"


def _api(hub, as_user, on_server, path, method="GET"):
    """A jupyter-dl REST call on `on_server`'s single-user server with `as_user`'s token, through the proxy."""
    headers = {"Authorization": f"token {hub['tokens'][as_user]}"}
    url = f"{_server(hub, on_server)}jupyter-dl/api/{path}"
    return requests.request(method, url, headers=headers, timeout=30, allow_redirects=False)


def _jobs(hub, user):
    reply = _api(hub, user, user, "jobs")
    assert reply.status_code == 200, reply.text
    return reply.json()["jobs"]


def _wait_job(hub, user, name, predicate, what, timeout=180):
    deadline = time.monotonic() + timeout
    while True:
        job = next((j for j in _jobs(hub, user) if j["name"] == name), None)
        if job is not None and predicate(job):
            return job
        assert time.monotonic() < deadline, f"{user}'s job {name} never {what}: {job}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def ran(hub):
    """Ann's job takes both GPUs and holds them; bob's job waits in the pool, the wait shown in his cell; ann's job
    ends, and bob's runs. Yields each user's finished job record and cell."""
    kernels = {}
    try:
        with _log_on_failure(hub):
            for user in (ANN, BOB):
                kernels[user] = NotebookKernel(_server(hub, user), hub["tokens"][user], f"{user}.ipynb")
            result = _run_both(hub, kernels)
        yield result
    finally:
        for kernel in kernels.values():
            kernel.close()


def _run_both(hub, kernels):
    for kernel in kernels.values():
        kernel.run("%load_ext jupyter_dl")
    cells = {ANN: kernels[ANN].execute(CELL.format(name="ann-train", hold=str(hub["hold"])))}
    running = _wait_job(hub, ANN, "ann-train", lambda j: j["state"] == "running", "ran")
    assert running["gpus"] == ["sim0:0", "sim0:1"], running

    cells[BOB] = kernels[BOB].execute(CELL.format(name="bob-train", hold=str(hub["hold"])))
    kernels[BOB].wait(cells[BOB], until=lambda cell: WAIT_LINE in cell.streams["stderr"], timeout=180)
    # What the panel shows meanwhile: bob's job queued, first in line, and why.
    queued = _wait_job(hub, BOB, "bob-train", lambda j: j["state"] == "queued", "queued", timeout=10)
    assert queued["progress"]["queue_position"] == 1, queued
    assert "waiting for 2 GPUs to be free at once (0 free now)" in queued["progress"]["reason"], queued
    assert _wait_job(hub, ANN, "ann-train", lambda j: True, "listed")["state"] == "running"

    hub["hold"].touch()
    for user in (ANN, BOB):
        cell = kernels[user].wait(cells[user], timeout=180)
        assert cell.error is None, f"{user}: {cell.error}\n{cell.text[-3000:]}"
    jobs = {user: _wait_job(hub, user, f"{user[4:]}-train", lambda j: True, "listed") for user in (ANN, BOB)}
    return {"jobs": jobs, "cells": cells}


def test_the_second_users_job_waits_for_the_first_ones_gpus_with_the_wait_shown(ran):
    ann, bob = ran["jobs"][ANN], ran["jobs"][BOB]
    assert ann["state"] == bob["state"] == "succeeded", (ann, bob)
    assert ann["user"] == ANN and bob["user"] == BOB
    assert bob["gpus"] == ["sim0:0", "sim0:1"]  # the GPUs ann's job gave back
    assert "queue_position" not in bob["progress"]  # no longer waiting
    stderr = ran["cells"][BOB].streams["stderr"]
    assert f"{WAIT_LINE} (waiting for 2 GPUs to be free at once (0 free now))" in stderr, stderr
    assert WAIT_LINE not in ran["cells"][ANN].streams["stderr"]  # ann's job had its GPUs at once
    assert ann["models"] == bob["models"] == ["model"]


def _open_to_everyone(store):
    """Every file in the store readable by all, as when every server runs under one uid."""
    for path in [store, *store.rglob("*")]:
        path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))


def test_each_user_lists_only_their_own_jobs_from_one_shared_store(hub, ran):
    ann, bob = ran["jobs"][ANN]["id"], ran["jobs"][BOB]["id"]
    assert sorted(p.name for p in hub["store"].iterdir()) == sorted([ann, bob])  # both jobs in one store
    for opened in (False, True):
        if opened:
            _open_to_everyone(hub["store"])
        assert [j["id"] for j in _jobs(hub, ANN)] == [ann], opened
        assert [j["id"] for j in _jobs(hub, BOB)] == [bob], opened
    # The panel's cluster view: each server lists its own user's clusters only, named after that user's notebook.
    clusters = {}
    for user in (ANN, BOB):
        reply = _api(hub, user, user, "cluster")
        assert reply.status_code == 200, reply.text
        clusters[user] = reply.json()["clusters"]
        assert clusters[user] and all(c["owner"]["notebook"] == f"{user}.ipynb" for c in clusters[user]), clusters
    assert not {c["cluster_id"] for c in clusters[ANN]} & {c["cluster_id"] for c in clusters[BOB]}
    # Stopping another user's cluster: unknown on one's own server, refused by the hub on theirs.
    for user, other in ((ANN, BOB), (BOB, ANN)):
        for cluster in clusters[other]:
            path = f"cluster/{cluster['cluster_id']}"
            assert _api(hub, user, user, path, "DELETE").status_code == 404
            assert _api(hub, user, other, path, "DELETE").status_code == 403


# Every jupyter-dl route that names a job (server/handlers.py), with what its owner gets for a finished job.
ROUTES = [
    ("GET", "jobs/{id}", 200),
    ("DELETE", "jobs/{id}", 409),  # cancel: refused to the owner too, but because the job has ended
    ("GET", "jobs/{id}/metrics", 200),
    ("GET", "jobs/{id}/figures", 200),
    ("GET", "jobs/{id}/logs?rank=0", 200),
    ("GET", "jobs/{id}/results/model/model", 200),
]


@pytest.mark.parametrize("owner, other", [(ANN, BOB), (BOB, ANN)])
def test_another_users_jobs_are_refused_over_http(hub, ran, owner, other):
    job, name = ran["jobs"][owner]["id"], ran["jobs"][owner]["name"]
    _open_to_everyone(hub["store"])
    for method, route, status in ROUTES:
        path = route.format(id=job)
        mine = _api(hub, owner, owner, path, method)
        assert mine.status_code == status, (method, path, mine.status_code, mine.text[:300])
        # The other user's own server has the job in its store, and answers as if it did not exist.
        theirs = _api(hub, other, other, path, method)
        assert theirs.status_code == 404, (method, path, theirs.status_code, theirs.text[:300])
        assert theirs.json() == {"code": "not_found", "message": f"no job '{job}'; list jobs at /jupyter-dl/api/jobs"}
        # The owner's server, with the other user's token: the hub's auth refuses before jupyter-dl is reached.
        through = _api(hub, other, owner, path, method)
        assert through.status_code == 403, (method, path, through.status_code, through.text[:300])
    # Comparisons: the other's own job with this one, by id or by name, is refused whole.
    for wanted in (job, name):
        path = f"compare?ids={ran['jobs'][other]['id']},{wanted}"
        mixed = _api(hub, other, other, path)
        assert mixed.status_code == 404 and f"no job '{wanted}'" in mixed.json()["message"], mixed.text
        assert _api(hub, other, owner, path).status_code == 403
    download = _api(hub, owner, owner, f"jobs/{job}/results/model/model")
    assert download.content[:2] == b"PK"  # a .keras file is a zip
    assert _api(hub, owner, owner, f"jobs/{job}").json()["state"] == "succeeded"  # the refused cancels changed nothing
