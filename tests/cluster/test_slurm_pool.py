"""The GPU pool delegated to a real multi-node Slurm (tests/support/slurm_nodes.py: 2 nodes x 2 CPUs x 2 stand-in
GPUs), used by two real system users. Each user has their own Jupyter server and notebook kernel, running as that
user (as a hub's local spawner runs them), with what a hub whose GPUs are Slurm's sets for everyone
($JUPYTER_DL_POOL_SCHEDULER=slurm) and, for the user whose Slurm account the hub knows, $SBATCH_ACCOUNT. Cells go
over HTTP and the kernel's websocket, as from JupyterLab.

Each job's ranks are one sbatch allocation with --gres=gpu:2 per node, submitted by the user's own kernel, so Slurm
records it under that user. Ada's 4-rank job takes every GPU; Ben's waits in Slurm's queue with its position in his
cell and his jobs API, then runs on its own allocation. Ben cannot see or cancel Ada's job, through jupyter-dl (his
server knows no such job; his token does not open hers) or through Slurm (scancel of another user's job is refused).
Interrupting a queued job cancels its Slurm job.

Accounts: this machine has no slurmdbd (Debian's slurmdbd package and a MySQL/MariaDB are not installed), so Slurm
runs with accounting_storage/none: `--account` is recorded on the job as given (squeue's account column) and checked
against nothing; an account that exists nowhere is accepted, and no limit or QOS of it applies.
"""

import ast
import os
import pathlib
import secrets
import subprocess
import sys
import tempfile
import time

import pytest
import requests
import slurm_nodes
import system_users
from local_hub import free_port
from netns import HOSTS, KERNEL_ADDRESS
from notebook_kernel import NotebookKernel

NODES = [hostname for _, hostname, *_ in HOSTS]
ADA, BEN = "jdl-ada", "jdl-ben"
ACCOUNTS = {ADA: "", BEN: "jdl-lab"}  # Ben's hub knows his Slurm account; Ada's does not (Slurm's default then)
REPO = pathlib.Path(__file__).resolve().parents[2]
# Each user's kernel config: the controller on the bridge (the nodes' engines reach it), quick queue polls, a time
# limit so Slurm's backfill can estimate when a waiting job starts.
KERNEL_CONFIG = f"""
c.Cluster.controller_ip = {KERNEL_ADDRESS!r}
c.Cluster.controller_location = {KERNEL_ADDRESS!r}
c.SlurmPool.poll_interval = 0.3
c.SlurmPool.time_limit = "20"
"""
# Holds its allocation until the test says, then reports where each rank ran, through Horovod over gloo.
HOLD_CELL = """%%distribute -n {n} --name {name} --no-plot --timeout 240
import os, socket, time
import horovod.tensorflow as hvd
while not os.path.exists({marker!r}):
    time.sleep(0.1)
placed = hvd.allgather_object(
    (socket.gethostname(), os.environ["SLURM_JOB_ID"], os.environ.get("CUDA_VISIBLE_DEVICES"), hvd.rank())
)
"""


@pytest.fixture(scope="module")
def slurm():
    """Slurm's files where the users' commands can read its config: not under pytest's base directory, which every
    pytest that starts on this machine makes 0700 again (its chmod also voids an ACL granting others search)."""
    root = tempfile.mkdtemp(prefix="jdl-slurm-pool-")
    os.chmod(root, 0o755)
    with slurm_nodes.nodes(root) as running:
        yield running


@pytest.fixture(scope="module")
def shared():
    """A directory both users can read: the files that let their jobs go on."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="jdl-slurm-pool-"))
    root.chmod(0o755)
    yield root
    for path in root.iterdir():
        path.unlink()
    root.rmdir()


@pytest.fixture(scope="module")
def users(slurm, tmp_path_factory):
    """Ada's and Ben's Jupyter servers, each running as its user; yields {user: {"url", "token", "log"}}."""
    with system_users.users([ADA, BEN]) as accounts:
        uids = [a.pw_uid for a in accounts.values()]
        with system_users.reachable([sys.executable, sys.base_prefix, REPO / "jupyter_dl"], uids):
            servers, processes = {}, []
            try:
                for user, account in accounts.items():
                    servers[user] = _server(account, slurm["conf"], processes, tmp_path_factory.mktemp(user))
                for server in servers.values():
                    _wait_ready(server, processes)
                yield servers
            finally:
                for user in accounts:  # what Slurm still holds of theirs, before their processes go
                    subprocess.run(["scancel", "--full", f"--user={user}"], capture_output=True, timeout=30)
                for process in processes:
                    process.terminate()
                for process in processes:
                    try:
                        process.wait(20)
                    except subprocess.TimeoutExpired:
                        process.kill()


def _server(account, conf, processes, log_dir):
    """The user's Jupyter server (jupyter-dl's extension on), started as the user in their home."""
    folder = pathlib.Path(account.pw_dir) / ".ipython" / "profile_default"
    folder.mkdir(parents=True)
    (folder / "ipython_kernel_config.py").write_text(KERNEL_CONFIG)
    for path in (folder.parent, folder, folder / "ipython_kernel_config.py"):
        os.chown(path, account.pw_uid, account.pw_gid)
    port, token = free_port(), secrets.token_hex(16)
    env = {"SLURM_CONF": conf, "JUPYTER_DL_POOL_SCHEDULER": "slurm", "PATH": f"{pathlib.Path(sys.executable).parent}:"}
    env["PATH"] += os.environ.get("PATH", "")
    if ACCOUNTS[account.pw_name]:
        env["SBATCH_ACCOUNT"] = ACCOUNTS[account.pw_name]  # what a hub that knows it sets (c.Spawner.environment)
    log = open(log_dir / "server.log", "w")
    processes.append(
        subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--ip=127.0.0.1", f"--port={port}", "--no-browser"]
            + [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={account.pw_dir}"],
            cwd=account.pw_dir,
            env=system_users.environment(account, **env),
            preexec_fn=system_users.become(account),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    return {"url": f"http://127.0.0.1:{port}/", "token": token, "log": log_dir / "server.log"}


def _wait_ready(server, processes, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(server["url"] + "api/status", headers=_auth(server), timeout=5).ok:
                return
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes), server["log"].read_text()
        time.sleep(0.5)


def _auth(server):
    return {"Authorization": f"token {server['token']}"}


def _api(server, path, method="GET", token_of=None):
    """A jupyter-dl REST call on `server`, with its own token or `token_of` another server's."""
    headers = _auth(token_of or server)
    return requests.request(method, f"{server['url']}jupyter-dl/api/{path}", headers=headers, timeout=30)


def _job(server, name):
    reply = _api(server, "jobs")
    assert reply.status_code == 200, reply.text
    return next((job for job in reply.json()["jobs"] if job["name"] == name), None)


def _running(server, name):
    return (_job(server, name) or {}).get("state") == "running"


@pytest.fixture(scope="module")
def kernels(users):
    opened = {}
    try:
        for user, server in users.items():
            opened[user] = NotebookKernel(server["url"], server["token"], f"{user}.ipynb", timeout=120)
            opened[user].run("%load_ext jupyter_dl", timeout=120)  # as a user types it
        yield opened
    finally:
        for kernel in opened.values():
            kernel.close()


def _slurm_jobs():
    """{name: (job id, state, nodes or reason, gres per node, account, user)} of the jobs' allocations in Slurm."""
    out = subprocess.run(["squeue", "-h", "-o", "%j|%i|%T|%R|%b|%a|%u"], capture_output=True, text=True).stdout
    return {line.split("|")[0]: tuple(line.split("|")[1:]) for line in out.splitlines() if line.startswith("jdl-")}


def _wait(done, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not (result := done()):
        assert time.monotonic() < deadline, f"{what} within {timeout}s; squeue: {_slurm_jobs()}"
        time.sleep(0.2)
    return result


def _looked_at(name):
    """squeue's fields of the job once Slurm's scheduler has looked at it (a reason other than None), else None."""
    job = _slurm_jobs().get(name)
    return job if job and job[2] != "(None)" else None


def _values(kernel, name):
    return ast.literal_eval(kernel.run(f"print(repr({name}))").streams["stdout"].strip())


def test_two_users_jobs_one_waits_in_slurms_queue_with_its_place_shown_then_runs(users, kernels, shared, slurm):
    ada, ben = users[ADA], users[BEN]
    marker = str(shared / "release-first")
    first = kernels[ADA].execute(HOLD_CELL.format(n=4, name="first", marker=marker))
    kernels[ADA].wait(first, until=lambda cell: _running(ada, "first"), timeout=240)
    assert not first.done, first.text
    first_id, state, nodes, gres, account, user = _slurm_jobs()["jdl-first"]
    assert (state, nodes, user, account) == ("RUNNING", ",".join(NODES), ADA, "(null)"), _slurm_jobs()
    assert "gpu:2" in gres, _slurm_jobs()

    second = kernels[BEN].execute(HOLD_CELL.format(n=2, name="second", marker=marker))
    kernels[BEN].wait(second, until=lambda cell: ": Resources, " in cell.streams["stderr"] or _running(ben, "second"))
    queued, squeue = _job(ben, "second"), _slurm_jobs()
    assert queued["state"] == "queued", f"{queued}\n{second.text[-2000:]}\n{slurm_nodes.story(slurm['root'])}"
    # Ben's job waits in Slurm's own queue, for Resources, under his user and the account his hub gave, while Ada's
    # allocation still runs on both nodes (a second job started beside it would have run, not queued).
    second_id, state, reason, gres, account, user = squeue["jdl-second"]
    assert (state, reason, user, account) == ("PENDING", "(Resources)", BEN, "jdl-lab") and "gpu:2" in gres, squeue
    assert squeue["jdl-first"][:2] == (first_id, "RUNNING"), squeue
    # No slurmdbd: "jdl-lab" exists nowhere, and Slurm took it as a label (no limits, no QOS of it apply).
    sacct = subprocess.run(["sacct", "-X"], capture_output=True, text=True, timeout=30)
    assert "accounting storage is disabled" in sacct.stdout + sacct.stderr, (sacct.stdout, sacct.stderr)
    # His cell and his jobs API (the panel's source) say so.
    assert queued["state"] == "queued" and queued["user"] == BEN, queued
    assert queued["progress"]["queue_position"] == 1, queued
    assert queued["progress"]["reason"].startswith(f"Slurm job {second_id}: Resources, "), queued
    line = f"queued in Slurm for 2 ranks with GPUs: position 1 (Slurm job {second_id}: Resources"
    assert line in second.streams["stderr"], second.text
    _neither_sees_nor_cancels_the_others_job(ada, ben, first_id, slurm["conf"])
    # Slurm's backfill pass estimates when it starts: Ada's job's time limit is known.
    kernels[BEN].wait(second, until=lambda cell: "estimated start 20" in cell.streams["stderr"], timeout=60)

    pathlib.Path(marker).touch()  # Ada's job ends: its allocation is cancelled, Ben's can start
    for user, cell in ((ADA, first), (BEN, second)):
        kernels[user].wait(cell, timeout=240)
        assert cell.error is None, f"{user}: {cell.error}\n{cell.text[-3000:]}"
    assert ": Resources" not in first.streams["stderr"]  # Ada's never waited for GPUs (only for Slurm's first look)
    # Ada's job ran on its 4 engines, 2 per node, each pinned to one of its node's GPUs, all in her allocation.
    assert sorted(p[:3] for p in _values(kernels[ADA], "placed")) == sorted(
        (n, first_id, gpu) for n in NODES for gpu in "01"
    )
    # Ben's ran on his own allocation only: one node, both of its GPUs; the queue fields are gone.
    placed = _values(kernels[BEN], "placed")
    assert sorted(p[1:] for p in placed) in (
        [(second_id, "0", 0), (second_id, "1", 1)],
        [(second_id, "0", 1), (second_id, "1", 0)],
    ), placed
    assert placed[0][0] == placed[1][0] in NODES
    job = _job(ben, "second")
    assert job["state"] == "succeeded" and "queue_position" not in job["progress"] and len(job["gpus"]) == 2, job
    # Both allocations ended with their jobs.
    _wait(lambda: not _slurm_jobs(), "both allocations cancelled", 30)


def _neither_sees_nor_cancels_the_others_job(ada, ben, first_slurm_id, conf):
    """While Ada's job runs: Ben's jobs API lists his job only and answers for hers as for a job that does not
    exist, his token opens nothing on her server, and Slurm refuses his scancel of her allocation."""
    mine = _job(ada, "first")
    assert [j["name"] for j in _api(ben, "jobs").json()["jobs"]] == ["second"]
    assert [j["name"] for j in _api(ada, "jobs").json()["jobs"]] == ["first"]
    for method in ("GET", "DELETE"):
        assert _api(ben, f"jobs/{mine['id']}", method).status_code == 404
        assert _api(ada, f"jobs/{mine['id']}", method, token_of=ben).status_code == 403
    account = system_users.pwd.getpwnam(BEN)
    refused = subprocess.run(
        ["scancel", first_slurm_id],
        capture_output=True,
        text=True,
        timeout=30,
        env=system_users.environment(account, SLURM_CONF=conf),
        preexec_fn=system_users.become(account),
    )
    assert "Access/permission denied" in refused.stderr, (refused.returncode, refused.stderr)
    assert _slurm_jobs()["jdl-first"][1] == "RUNNING" and _job(ada, "first")["state"] == "running"


def test_interrupting_a_queued_job_cancels_its_slurm_job(users, kernels, slurm):
    """Both nodes are drained (as an admin drains them for maintenance), so the job's allocation waits in Slurm's queue
    whatever else runs; interrupting the kernel ends the wait and scancel removes it from the queue.
    (Not $SBATCH_HOLD set with %env, as before: sbatch 22.05 reads no such variable, so the job only waited for
    Slurm's next scheduling pass, up to ~4 s, and under load the test looked after it had started.)"""
    ben, kernel = users[BEN], kernels[BEN]
    slurm_nodes.drain(NODES)
    try:
        cell = kernel.execute(HOLD_CELL.format(n=2, name="given-up", marker="/nonexistent"))
        kernel.wait(cell, until=lambda _: (_job(ben, "given-up") or {}).get("state") == "queued")
        assert not cell.done, cell.text
        # Slurm has looked at it (its reason is no longer None) and left it waiting.
        slurm_id, state, reason, *_ = _wait(lambda: _looked_at("jdl-given-up"), "a reason in squeue")
        assert state == "PENDING", f"{reason}\n{slurm_nodes.story(slurm['root'])}"
        reply = requests.post(f"{ben['url']}api/kernels/{kernel.kernel_id}/interrupt", headers=_auth(ben), timeout=30)
        assert reply.status_code == 204, reply.text
        kernel.wait(cell, timeout=60)
        # Cancelled at once (scancel): gone from Slurm's queue while the nodes are still drained.
        _wait(lambda: "jdl-given-up" not in _slurm_jobs(), f"Slurm job {slurm_id} gone from squeue", 15)
    finally:  # after a failure above: a job still queued would start on the resumed nodes
        subprocess.run(["scancel", "--name=jdl-given-up"], capture_output=True, timeout=30)
        slurm_nodes.resume(NODES)
    assert cell.error == ("JobInterrupted", "interrupted; the notebook's names were not updated"), cell.text
    assert _job(ben, "given-up")["state"] == "cancelled"
    assert f"queued in Slurm for 2 ranks with GPUs: position 1 (Slurm job {slurm_id}: " in cell.streams["stderr"]
