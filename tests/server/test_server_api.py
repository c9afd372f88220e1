"""The REST API through a real jupyter_server (pytest-jupyter's jp_fetch), over a real job store on disk."""

import json
import subprocess
import sys

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_dl.jobs import Job
from jupyter_dl.jobs.store import JobStore

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture
def store(tmp_path):
    return JobStore(root=str(tmp_path / "jobs"))


@pytest.fixture
def jp_server_config(store):
    return {"ServerApp": {"jpserver_extensions": {"jupyter_dl": True}}, "JobStore": {"root": store.root}}


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _add(store, name, state="running", **kwargs):
    job = Job(name=name, n=2, **kwargs)
    job.transition(state)
    store.save(job)
    return job


async def _json(response):
    return json.loads(response.body.decode())


async def test_list_filter_and_get(jp_fetch, store):
    done = _add(store, "done", "succeeded")
    running = _add(store, "live", "running")
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs"))
    assert [j["name"] for j in body["jobs"]] == ["live", "done"]  # newest first
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", params={"state": "running"}))
    assert [j["id"] for j in body["jobs"]] == [running.id]
    job = await _json(await jp_fetch("jupyter-dl", "api", "jobs", done.id))
    assert job["state"] == "succeeded" and job["n"] == 2 and "elapsed" in job


async def test_errors_are_json_with_code_and_status(jp_fetch, store):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", "nosuchjob")
    assert err.value.code == 404
    assert json.loads(err.value.response.body)["code"] == "not_found"
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", params={"state": "sleeping"})
    assert err.value.code == 400 and "unknown state" in json.loads(err.value.response.body)["message"]
    done = _add(store, "done", "succeeded")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", done.id, method="DELETE")
    assert err.value.code == 409 and json.loads(err.value.response.body)["code"] == "not_running"


@pytest.mark.parametrize(
    "path",
    [
        ("jobs",),
        ("jobs", "abc"),
        ("jobs", "abc", "metrics"),
        ("jobs", "abc", "figures"),
        ("jobs", "abc", "logs"),
        ("cluster",),
    ],
)
async def test_unauthenticated_requests_are_refused(jp_fetch, path):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", *path, headers={"Authorization": "token wrong"})
    assert err.value.code == 403
    assert json.loads(err.value.response.body)["code"] == "forbidden"


async def test_unauthenticated_cancel_is_refused_and_changes_nothing(jp_fetch, store):
    job = _add(store, "live", "running")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", job.id, method="DELETE", headers={"Authorization": "token no"})
    assert err.value.code == 403
    assert not store.cancel_requested(job.id)


async def test_a_job_whose_kernel_died_is_lost_not_running(jp_fetch, store):
    job = _add(store, "orphan", "running", kernel_pid=_dead_pid())
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id))
    assert body["state"] == "lost"
    assert store.load(job.id).state == "lost"  # persisted, survives a server restart


async def test_metrics_since_and_logs_tail(jp_fetch, store):
    job = _add(store, "m", "running")
    store.append_metrics(job.id, [{"kind": "batch", "step": i} for i in range(5)])
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "metrics", params={"since": 3}))
    assert [r["step"] for r in body["records"]] == [3, 4] and body["next"] == 5
    store.write_logs(job.id, {0: "a\nb\nc\n", 1: "x\n"})
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "logs", params={"rank": 0, "tail": 2}))
    assert body["text"] == "b\nc\n" and body["ranks"] == [0, 1]
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "logs", params={"rank": 7}))
    assert body["text"] == "" and body["ranks"] == [0, 1]  # no log (yet) for that rank: not an error


async def test_metrics_paging_survives_blank_and_half_written_lines(jp_fetch, store):
    job = _add(store, "m", "running")
    path = store.job_dir(job.id) / "metrics.jsonl"
    path.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3')  # a blank line, and a record mid-write
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "metrics"))
    assert [r["step"] for r in body["records"]] == [1, 2] and body["next"] == 3
    with open(path, "a") as f:
        f.write("}\n")
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "metrics", params={"since": body["next"]}))
    assert [r["step"] for r in body["records"]] == [3] and body["next"] == 4


async def test_cluster_endpoint(jp_fetch):
    body = await _json(await jp_fetch("jupyter-dl", "api", "cluster"))
    assert isinstance(body["clusters"], list) and body["gpus"] == []  # no GPU on this machine


async def test_notebook_path_is_relative_to_the_server_root(jp_fetch, store, jp_root_dir):
    """The kernel records the notebook's absolute path; the panel opens it by the path under the server's root."""
    inside = _add(store, "inside", "succeeded", notebook=str(jp_root_dir / "sub dir" / "demo.ipynb"))
    outside = _add(store, "outside", "succeeded", notebook="/elsewhere/other.ipynb")
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs"))
    by_name = {j["name"]: j for j in body["jobs"]}
    assert by_name["inside"]["notebook"] == "sub dir/demo.ipynb"
    assert by_name["inside"]["notebook_file"] == str(jp_root_dir / "sub dir" / "demo.ipynb")
    assert by_name["outside"]["notebook"] is None and by_name["outside"]["notebook_file"] == "/elsewhere/other.ipynb"
    job = await _json(await jp_fetch("jupyter-dl", "api", "jobs", inside.id))
    assert job["notebook"] == "sub dir/demo.ipynb"
    # The contents API (what docmanager:open asks) finds it by that path.
    (jp_root_dir / "sub dir").mkdir()
    (jp_root_dir / "sub dir" / "demo.ipynb").write_text(
        '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    contents = await _json(await jp_fetch("api", "contents", "sub dir", "demo.ipynb"))
    assert contents["type"] == "notebook"
    assert store.load(outside.id).notebook == "/elsewhere/other.ipynb"  # the store keeps what the kernel wrote


def test_dl_jobs_prints_the_notebook_relative_to_the_kernel_folder(tmp_path):
    from jupyter_dl.kernel.job_listing import shown_path as _shown_path

    assert _shown_path(str(tmp_path / "demo.ipynb"), cwd=str(tmp_path)) == "demo.ipynb"
    assert _shown_path(str(tmp_path / "a" / "b.ipynb"), cwd=str(tmp_path)) == "a/b.ipynb"
    assert _shown_path("/elsewhere/x.ipynb", cwd=str(tmp_path)) == "/elsewhere/x.ipynb"
    assert _shown_path(None) == "-"


async def test_metrics_pages_stop_at_the_limit_and_say_there_is_more(jp_fetch, store):
    job = _add(store, "m", "running")
    store.append_metrics(job.id, [{"kind": "batch", "step": i} for i in range(12)])
    pages, since = [], 0
    while True:
        body = await _json(
            await jp_fetch("jupyter-dl", "api", "jobs", job.id, "metrics", params={"since": since, "limit": 5})
        )
        pages.append([r["step"] for r in body["records"]])
        since = body["next"]
        if not body["more"]:
            break
    assert pages == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "metrics"))
    assert len(body["records"]) == 12 and body["more"] is False  # no limit: everything, as before


async def test_cancel_records_where_it_came_from(jp_fetch, store):
    job = _add(store, "live", "running")
    response = await jp_fetch("jupyter-dl", "api", "jobs", job.id, method="DELETE")
    assert response.code == 202
    assert store.cancel_requested(job.id) and store.cancel_source(job.id) == "the jobs panel"


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _cluster_file(ipython_dir, cluster_id, controller_pid, engine_pids):
    """A cluster file as ipyparallel writes it for a local cluster (controller and one engine set)."""
    profile_dir = ipython_dir / "profile_default"
    (profile_dir / "security").mkdir(parents=True, exist_ok=True)
    engines = {
        str(i): {"cluster_id": cluster_id, "n": 1, "pid": pid, "profile_dir": str(profile_dir), "state": "running"}
        for i, pid in enumerate(engine_pids)
    }
    data = {
        "cluster": {
            "cluster_id": cluster_id,
            "n": len(engine_pids),
            "profile_dir": str(profile_dir),
            "class": "ipyparallel.cluster.cluster.Cluster",
        },
        "controller": {
            "class": "local",
            "state": {
                "cluster_id": cluster_id,
                "pid": controller_pid,
                "profile_dir": str(profile_dir),
                "state": "running",
            },
        },
        "engines": {
            "class": "local",
            "sets": {
                "1": {
                    "cluster_id": cluster_id,
                    "n": len(engine_pids),
                    "pid": -1,
                    "profile_dir": str(profile_dir),
                    "state": "running",
                    "engines": engines,
                }
            },
        },
    }
    path = profile_dir / "security" / f"cluster-{cluster_id}.json"
    path.write_text(json.dumps(data))
    return path


async def test_cluster_rows_name_their_notebook_and_hosts_and_can_be_stopped(
    jp_fetch, store, tmp_path, monkeypatch, jp_root_dir
):
    """A cluster a jupyter-dl kernel started is named after the kernel's pid: the panel shows that kernel's notebook
    and the engines per host, and stops it on request (its processes end; the list no longer shows it)."""
    import asyncio
    import socket
    import time

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    controller, engines = _sleeper(), [_sleeper(), _sleeper()]
    kernel_pid = 999_999
    cluster_id = f"jupyter-dl-{kernel_pid}-1"
    try:
        _cluster_file(tmp_path / "ipython", cluster_id, controller.pid, [e.pid for e in engines])
        _add(store, "owner-job", "succeeded", notebook=str(jp_root_dir / "train.ipynb"), kernel_pid=kernel_pid)
        body = await _json(await jp_fetch("jupyter-dl", "api", "cluster"))
        [row] = [c for c in body["clusters"] if c["cluster_id"] == cluster_id]
        assert row["engines"] == 2 and row["engines_by_host"] == {socket.gethostname(): 2}
        assert row["owner"] == {"kernel_pid": kernel_pid, "notebook": "train.ipynb"}

        reply = await jp_fetch("jupyter-dl", "api", "cluster", cluster_id, method="DELETE")
        assert reply.code == 202 and (await _json(reply))["state"] == "stopping"
        deadline = time.monotonic() + 30
        while any(p.poll() is None for p in [controller, *engines]) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert all(p.poll() is not None for p in [controller, *engines])
        body = await _json(await jp_fetch("jupyter-dl", "api", "cluster"))
        assert cluster_id not in [c["cluster_id"] for c in body["clusters"]]
        with pytest.raises(HTTPClientError) as missing:
            await jp_fetch("jupyter-dl", "api", "cluster", cluster_id, method="DELETE")
        assert missing.value.code == 404
    finally:
        for p in [controller, *engines]:
            p.kill()
            p.wait()


async def test_finished_jobs_carry_their_final_metrics(jp_fetch, store):
    """The panel shows a finished row's final metrics: the last epoch's logs, read from the end of its metrics."""
    done = _add(store, "done", "succeeded")
    store.append_metrics(
        done.id,
        [{"kind": "batch", "rank": 0, "t": 1.0, "epoch": 0, "step": 1, "logs": {"loss": 9.0}}]
        + [
            {
                "kind": "epoch",
                "rank": 0,
                "t": 2.0 + e,
                "epoch": e,
                "logs": {"loss": 1.0 / (e + 1), "accuracy": 0.5 + e / 10},
            }
            for e in range(3)
        ]
        + [{"kind": "end", "rank": 0, "t": 9.0}],
    )
    _add(store, "running", "running")
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs"))
    by_name = {j["name"]: j for j in body["jobs"]}
    assert by_name["done"]["final_metrics"] == {"loss": pytest.approx(1 / 3), "accuracy": pytest.approx(0.7)}
    assert "final_metrics" not in by_name["running"]
    assert (await _json(await jp_fetch("jupyter-dl", "api", "jobs", done.id)))["final_metrics"][
        "loss"
    ] == pytest.approx(1 / 3)
    assert (
        _add(store, "no-epochs", "failed")
        and {j["name"]: j for j in (await _json(await jp_fetch("jupyter-dl", "api", "jobs")))["jobs"]}["no-epochs"][
            "final_metrics"
        ]
        is None
    )


def _trained(store, name, n, user=None, losses=(1.0, 0.5), steps=5):
    """A succeeded job as the launcher leaves it: begin/batch/epoch/throughput records and the kept cell source."""
    job = Job(name=name, n=n, user=user, options={"n": n, "lr_scale": "linear"})
    job.transition("starting")
    records = [
        {
            "kind": "begin",
            "rank": r,
            "t": 100.0,
            "epochs": len(losses),
            "steps": steps,
            "batch_size": 32,
            "samples_per_epoch": steps * 32,
            "initial_epoch": 0,
        }
        for r in range(n)
    ]
    t = 100.0
    for epoch, loss in enumerate(losses):
        for step in range(1, steps + 1):
            t += 0.1
            records.append(
                {"kind": "batch", "t": t, "epoch": epoch, "step": step, "steps": steps, "logs": {"loss": loss}}
            )
        records.append({"kind": "epoch", "rank": 0, "t": t, "epoch": epoch, "logs": {"loss": loss}})
    records += [
        {"kind": "throughput", "rank": r, "t": t, "epoch": len(losses) - 1, "samples": 1000, "seconds": 10}
        for r in range(n)
    ]
    store.append_metrics(job.id, records)
    (store.job_dir(job.id) / "results").mkdir(parents=True)
    (store.job_dir(job.id) / "results" / "cell.py").write_text("model.fit(x, y)\n")
    job.transition("succeeded")
    store.save(job)
    return job


async def test_compare_gives_both_runs_curves_and_the_table(jp_fetch, store):
    one, two = _trained(store, "cmp", 1), _trained(store, "cmp", 2, losses=(0.9, 0.4))
    body = await _json(
        await jp_fetch("jupyter-dl", "api", "compare", params={"ids": f"{one.id},{two.id}", "x": "epoch"})
    )
    assert body["x"] == "epoch" and [r["id"] for r in body["runs"]] == [one.id, two.id]
    assert {(c["run"], c["metric"]) for c in body["curves"]} >= {(one.id, "loss"), (two.id, "loss")}
    loss = next(c for c in body["curves"] if c["run"] == two.id and c["metric"] == "loss")
    assert loss["epoch"] == [1, 2] and loss["y"] == [0.9, 0.4]
    sections = {row["section"] for row in body["table"]}
    assert {"settings", "final metrics", "performance"} <= sections


@pytest.mark.parametrize(
    "params, status, needle",
    [
        ({"ids": "nosuchjob,other"}, 404, "no job 'nosuchjob'"),
        ({"ids": "JOB"}, 400, "two or more job ids"),
        ({"ids": ""}, 400, "two or more job ids"),
        ({"ids": "JOB,JOB2", "x": "furlongs"}, 400, "x must be one of"),
    ],
)
async def test_compare_bad_input_is_a_one_line_error(jp_fetch, store, params, status, needle):
    one, two = _trained(store, "a", 1), _trained(store, "b", 2)
    params = {k: v.replace("JOB2", two.id).replace("JOB", one.id) for k, v in params.items()}
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "compare", params=params)
    body = json.loads(err.value.response.body)
    assert err.value.code == status and needle in body["message"] and "\n" not in body["message"]


def test_compare_and_models_show_nobody_else_s_jobs(store):
    """Viewer isolation (what the handlers pass on a hub): another user's job is reported like a missing one."""
    from jupyter_dl.server.service import JobService, NotFound

    service = JobService(store)
    ann, bob = _trained(store, "a", 1, user="ann"), _trained(store, "b", 2, user="bob")
    _keep_model_file(store, bob.id, "model")
    with pytest.raises(NotFound, match="no job"):
        service.compare(f"{ann.id},{bob.id}", viewer="ann")
    with pytest.raises(NotFound, match="no job"):
        service.model_file(bob.id, "model", viewer="ann")
    assert service.model_file(bob.id, "model", viewer="bob").name == "model.keras"


def _keep_model_file(store, job_id, name, data=b"not really a model"):
    folder = store.job_dir(job_id) / "results" / "models"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.keras").write_bytes(data)


@pytest.fixture(scope="module")
def kept_model_bytes(tmp_path_factory):
    """A real `.keras` file, written by Keras as JobResults does (in a subprocess: TensorFlow stays out of this
    one), or None where Keras is not installed."""
    path = tmp_path_factory.mktemp("model") / "model.keras"
    code = f"import keras; m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]); m.save({str(path)!r})"
    if subprocess.run([sys.executable, "-c", code], capture_output=True).returncode != 0:
        return None
    return path.read_bytes()


async def test_a_kept_model_downloads_as_a_keras_file(jp_fetch, store, kept_model_bytes, tmp_path):
    import zipfile

    job = _trained(store, "keeper", 2)
    data = kept_model_bytes or b"PK placeholder"
    _keep_model_file(store, job.id, "model", data)
    listed = {j["id"]: j for j in (await _json(await jp_fetch("jupyter-dl", "api", "jobs")))["jobs"]}
    assert listed[job.id]["models"] == ["model"]  # the panel offers load/download from this
    reply = await jp_fetch("jupyter-dl", "api", "jobs", job.id, "results", "model", "model")
    assert reply.code == 200 and reply.body == data
    assert reply.headers["Content-Disposition"] == 'attachment; filename="keeper-model.keras"'  # the job's name
    if kept_model_bytes is not None:  # what was served is a Keras archive (config and weights inside)
        (tmp_path / "got.keras").write_bytes(reply.body)
        assert "config.json" in zipfile.ZipFile(tmp_path / "got.keras").namelist()


@pytest.mark.parametrize("name", ["history", "..", "model.keras", "x;y"])
async def test_a_model_not_kept_is_404(jp_fetch, store, name):
    job = _trained(store, "keeper", 1)
    _keep_model_file(store, job.id, "model")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", job.id, "results", "model", name)
    assert err.value.code == 404
    assert "\n" not in json.loads(err.value.response.body)["message"]
    running = _add(store, "running", "running")
    listed = {j["id"]: j for j in (await _json(await jp_fetch("jupyter-dl", "api", "jobs")))["jobs"]}
    assert "models" not in listed[running.id]
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", running.id, "results", "model", "model")
    assert err.value.code == 404


def _trace(figure, name):
    return next(t for t in figure["data"] if t["name"] == name)


async def test_figures_are_the_cells_loss_figure_and_follow_the_job(jp_fetch, store):
    """The loss tab's figures: the cell's loss figure (same traces, plotly JSON with its template), the epoch rows
    and the status; a poll with the last version gets `unchanged`; appended records show at the next poll; a
    metrics file that was replaced is read again from its start."""
    job = _trained(store, "fig", 2, losses=(1.0, 0.5, 0.25), steps=5)
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "figures", params={"theme": "dark"}))
    loss = body["loss"]
    assert len(_trace(loss, "loss (batch, smoothed)")["y"]) == 15  # one point per step: 3 epochs of 5
    assert _trace(loss, "loss")["y"] == [1.0, 0.5, 0.25] and _trace(loss, "loss")["x"] == [5, 10, 15]
    assert _trace(loss, "loss (batch)")["visible"] is False  # the raw steps, for the panel's toggle
    assert loss["layout"]["template"]["layout"]["paper_bgcolor"] != "white"  # plotly_dark, expanded for plotly.js
    assert [s["x0"] for s in loss["layout"]["shapes"]] == [5, 10, 15]  # epoch boundaries, as in the cell
    assert body["resources"] is None  # no rank sampled its resources
    assert [row["epoch"] for row in body["epochs"]] == [0, 1, 2] and body["epochs"][2]["logs"] == {"loss": 0.25}
    assert body["status"] == {
        "state": "succeeded",
        "epochs_done": 3,
        "epochs": 3,
        "steps": 15,
        "restarts": 0,
        "ranks": [],
    }

    again = await jp_fetch(
        "jupyter-dl", "api", "jobs", job.id, "figures", params={"theme": "dark", "version": body["version"]}
    )
    assert await _json(again) == {"version": body["version"], "unchanged": True}

    store.append_metrics(job.id, [{"kind": "batch", "t": 200.0, "epoch": 3, "step": 1, "logs": {"loss": 0.2}}])
    grown = await _json(
        await jp_fetch("jupyter-dl", "api", "jobs", job.id, "figures", params={"version": body["version"]})
    )
    assert len(_trace(grown["loss"], "loss (batch, smoothed)")["y"]) == 16 and grown["status"]["steps"] == 16

    path = store.job_dir(job.id) / "metrics.jsonl"
    replaced = path.with_suffix(".new")
    replaced.write_text(path.read_text().splitlines(keepends=True)[0])  # only a begin record
    replaced.replace(path)
    fresh = await _json(
        await jp_fetch("jupyter-dl", "api", "jobs", job.id, "figures", params={"version": grown["version"]})
    )
    assert fresh["status"]["steps"] == 0 and fresh["epochs"] == []


async def test_figures_draw_each_rank_s_resources(jp_fetch, store):
    job = _add(store, "res", "running")
    store.append_metrics(
        job.id,
        [
            {"kind": "resources", "rank": r, "t": 10.0 + i, "cpu": 50.0 + r, "rss_mb": 100.0 + i}
            for i in range(3)
            for r in range(2)
        ],
    )
    body = await _json(await jp_fetch("jupyter-dl", "api", "jobs", job.id, "figures"))
    names = sorted(t["name"] for t in body["resources"]["data"])
    assert names == ["rank 0 CPU %", "rank 0 memory MB", "rank 1 CPU %", "rank 1 memory MB"]
    assert _trace(body["resources"], "rank 1 CPU %")["x"] == [0.0, 1.0, 2.0]


async def test_figures_of_an_unknown_job_or_with_a_bad_theme_are_json_errors(jp_fetch, store):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", "nosuchjob", "figures")
    assert err.value.code == 404 and json.loads(err.value.response.body)["code"] == "not_found"
    job = _add(store, "m", "running")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-dl", "api", "jobs", job.id, "figures", params={"theme": "sepia"})
    assert err.value.code == 400 and "theme must be one of" in json.loads(err.value.response.body)["message"]


def test_figures_show_nobody_else_s_jobs(store):
    """Viewer isolation, as for the other endpoints: another user's job is reported like a missing one."""
    from jupyter_dl.server.service import JobService, NotFound

    service = JobService(store)
    bob = _trained(store, "b", 2, user="bob")
    with pytest.raises(NotFound, match="no job"):
        service.figures(bob.id, viewer="ann")
    assert service.figures(bob.id, viewer="bob")["status"]["steps"] == 10


async def test_compare_carries_the_figure_dl_compare_draws(jp_fetch, store):
    one, two = _trained(store, "cmp", 1), _trained(store, "cmp", 2, losses=(0.9, 0.4))
    body = await _json(
        await jp_fetch("jupyter-dl", "api", "compare", params={"ids": f"{one.id},{two.id}", "x": "epoch"})
    )
    figure = body["figure"]
    assert len(figure["data"]) == len(body["curves"]) >= 4
    assert figure["layout"]["xaxis"]["title"]["text"] == "epoch"  # drawn against the axis asked for
    assert {t["legendgroup"] for t in figure["data"]} == {one.id, two.id}
