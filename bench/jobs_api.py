"""Jobs list endpoint latency with 1,000 jobs and 100,000 metric points in the store (target: < 100 ms).

Starts a real `jupyter server` with the extension on a temporary store, fills the store with the job store's own
writer, and times GET /jupyter-dl/api/jobs over HTTP with `requests` (median and p95 of N calls), plus the
filtered list and one metrics page for reference.

    .venv/bin/python bench/jobs_api.py [--jobs 1000] [--points 100000] [--calls 30]
"""

import argparse
import json
import pathlib
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import requests

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from jupyter_dl.jobs import Job  # noqa: E402
from jupyter_dl.jobs.store import JobStore  # noqa: E402


def fill(store, jobs, points):
    per_job = points // jobs
    states = ["succeeded"] * 8 + ["failed", "running"]
    for i in range(jobs):
        job = Job(name=f"job-{i}", n=2, notebook=f"nb/{i % 17}.ipynb")
        job.transition(states[i % len(states)])
        job.progress = {"fraction": 1.0, "sparkline": [1.0 / (k + 1) for k in range(60)]}
        store.save(job)
        store.append_metrics(
            job.id,
            [
                {
                    "kind": "batch",
                    "t": k * 0.01,
                    "epoch": 0,
                    "step": k + 1,
                    "steps": per_job,
                    "logs": {"loss": 1.0 / (k + 1)},
                }
                for k in range(per_job)
            ],
        )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(url, token, calls):
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        response = requests.get(url, headers={"Authorization": f"token {token}"}, timeout=30)
        samples.append((time.perf_counter() - t0) * 1000)
        response.raise_for_status()
    return samples, response.json()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="jdl-bench-"))
    store = JobStore(root=str(tmp / "jobs"))
    t0 = time.perf_counter()
    fill(store, args.jobs, args.points)
    fill_s = time.perf_counter() - t0
    token, port = secrets.token_hex(16), free_port()
    config = tmp / "config.json"
    config.write_text(json.dumps({"JobStore": {"root": store.root}}))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--ServerApp.port={port}",
            "--ServerApp.open_browser=False",
            "--allow-root",
            f"--IdentityProvider.token={token}",
            f"--config={config}",
            f"--ServerApp.root_dir={tmp}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "server.log", "w"),
    )
    base = f"http://127.0.0.1:{port}/jupyter-dl/api"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{base}/jobs", headers={"Authorization": f"token {token}"}, timeout=5)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        listing, body = timed(f"{base}/jobs", token, args.calls)
        assert len(body["jobs"]) == args.jobs, len(body["jobs"])
        filtered, body = timed(f"{base}/jobs?state=running", token, args.calls)
        job_id = body["jobs"][0]["id"]
        metrics, body = timed(f"{base}/jobs/{job_id}/metrics?since=0", token, args.calls)
    finally:
        server.terminate()
        server.wait(10)

    def row(name, samples):
        q = statistics.quantiles(samples, n=20)
        return f"{name:<34} {statistics.median(samples):8.1f} {q[18]:8.1f} {max(samples):8.1f}"

    print(f"store: {args.jobs} jobs, {args.points} metric points (filled in {fill_s:.1f}s)")
    print(f"{'endpoint':<34} {'median':>8} {'p95':>8} {'max':>8}   (ms, {args.calls} calls each)")
    print(row("GET /jobs (all)", listing))
    print(row("GET /jobs?state=running", filtered))
    print(row(f"GET /jobs/ID/metrics ({len(body['records'])} pts)", metrics))
    verdict = "MET" if statistics.median(listing) < 100 else "MISSED"
    print(f"target: list under 100 ms -> median {statistics.median(listing):.1f} ms: {verdict}")
    out = pathlib.Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "jobs_api.json").write_text(
        json.dumps(
            {
                "jobs": args.jobs,
                "points": args.points,
                "list_ms": listing,
                "filtered_ms": filtered,
                "metrics_ms": metrics,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
