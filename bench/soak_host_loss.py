"""Soak for elastic jobs losing a host (issue 27): two "hosts" of two engines each (network namespaces,
tests/support/netns.py), a `-n 2:4` job over both, and one host's link cut (down: the host sends nothing, not even a
reset) while the job trains; the other host's two ranks must go on from their last commit and finish, with no commit
lost, and nothing may hang. Then the host comes back with fresh engines for the next fault.

The collectives' timeout stays at its default (120 s): the survivors learn of the loss from the kernel, which counts
a host lost once its ranks' heartbeats stopped for `--host-timeout` seconds (c.JobRunner.elastic_host_timeout). The
faults cut the host of rank 2 or of rank 0 (the leader: rank 2 leads on), mid-epoch (after step 2 of 4, past a commit
point: commits after every step) or at an epoch end (tests/support/elastic_faults.py HOST_FAULTS; the same cell and
per-sample lost-commit check as bench/soak_elastic.py). Recovery: from the rank's mark (the link goes down within
0.05 s of it) to the next group's first step, so it includes the host timeout. Needs root (namespaces); writes
bench/results/soak_host_loss.json (soak_host_loss_tf.json with --backend tf).

    sudo .venv/bin/python bench/soak_host_loss.py [--runs 30] [--host-timeout 10] [--backend horovod]
        [--only host-cut-at-epoch-end-rank2] [--stop-grace 5]
"""

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["JUPYTER_DATA_DIR"] = tempfile.mkdtemp(prefix="jdl-soak-host-loss-")  # its jobs stay out of yours

import _common  # noqa: E402
import netns  # noqa: E402
from elastic_faults import HOST_FAULTS, run_elastic_fault  # noqa: E402
from soak_elastic import expected_outcome, fault_row, report, summary  # noqa: E402

ENGINES = 4
READY_TIMEOUT_S = 300.0
HEARTBEAT_MISSES = 3  # the controller drops a cut host's engines after 3 missed 3 s beats (default 10): faster refill


def wait_for_engines(cluster):
    """Until the cluster lists ENGINES engines, all answering with TensorFlow imported."""
    from jupyter_dl.wire import remote

    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        ids = cluster.engine_ids()
        try:
            cluster.describe(ids)  # starts a new engine's import of TensorFlow
            ready = len(ids) == ENGINES and all(cluster.client.direct_view(ids).apply_sync(remote.PRELOADED))
        except Exception:  # a cut host's engine the controller still lists
            ready = False
        if ready:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster did not get {ENGINES} ready engines back in {READY_TIMEOUT_S:.0f}s")
        time.sleep(0.5)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="host losses to inject")
    parser.add_argument("--host-timeout", type=float, default=10.0, help="c.JobRunner.elastic_host_timeout")
    parser.add_argument("--hang-after", type=float, default=300.0, help="seconds after which a fault counts as hung")
    parser.add_argument("--backend", default="horovod", choices=("horovod", "tf"))
    parser.add_argument(
        "--only", choices=[f.name for f in HOST_FAULTS], help="inject only this fault (default: each in turn)"
    )
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=None,
        help="c.JobRunner.stop_grace: seconds before a rank that has not "
        "left is killed (raise it to wait for a slow rank, and look at it with py-spy dump --native)",
    )
    args = parser.parse_args(argv)
    faults = [f for f in HOST_FAULTS if args.only in (None, f.name)]
    reason = netns.unavailable()
    if reason:
        print(f"soak_host_loss: {reason}", file=sys.stderr)
        return 2

    from jupyter_dl.kernel import api

    load_before = _common.load_before()
    t_start = time.perf_counter()
    rows, hangs, wrong = [], [], []
    out = HERE / "results" / ("soak_host_loss.json" if args.backend == "horovod" else "soak_host_loss_tf.json")
    logs_dir = tempfile.mkdtemp(prefix="jdl-soak-host-loss-logs-")

    def save():
        _common.write_results(
            out,
            {"runs": rows, **summary(rows, hangs, wrong), "backend": args.backend, "host_timeout_s": args.host_timeout},
            t_start,
            load_before,
            os.getloadavg()[0],
            ("horovod", "ipyparallel", "tensorflow"),
        )

    netns.make()
    try:
        with (
            open(os.path.join(logs_dir, "engines.log"), "w") as logs,
            netns.EnginesOnHosts(logs, heartbeat_misses=HEARTBEAT_MISSES) as engines,
        ):
            session = api.session()
            session.cluster.connect_file(engines.cluster_file)
            session.runner.elastic_commit_steps = 1  # commit points inside the 4-step epochs
            session.runner.elastic_host_timeout = args.host_timeout
            if args.stop_grace is not None:
                session.runner.stop_grace = args.stop_grace
            for i in range(args.runs):
                fault = faults[i % len(faults)]
                t_fault = time.perf_counter()
                wait_for_engines(session.cluster)
                ids = session.cluster.engine_ids()
                before = {eid: info["hostname"] for eid, info in zip(ids, session.cluster.describe(ids))}
                workdir = tempfile.mkdtemp(prefix="jdl-soak-host-loss-")
                # The cell writes its host's name to `cut` once it trains; that host's link goes down then
                cutter, cut = netns.cut_link_when(os.path.join(workdir, "cut"), timeout=args.hang_after)
                finished = _common.hang_watch(args.hang_after, hangs, fault.name)
                run = run_elastic_fault(fault, workdir, session, args.backend)
                finished.set()
                cutter.join(1)
                if hangs:
                    print(f"HANG: fault {i + 1} ({fault.name}) did not end within {args.hang_after:.0f}s", flush=True)
                    break
                problem = expected_outcome(run) or ("" if "index" in cut else "the cell never marked its host")
                if problem:
                    wrong.append((fault.name, problem))
                row = fault_row(run, problem)
                row["engines"] = {
                    "before": before,
                    "job": list(getattr(getattr(run.result, "job", None), "engine_ids", None) or []),
                    "after": sorted(session.cluster.client.ids),
                }
                if "index" in cut:
                    engines.restore(cut["index"])
                row["wall_s"] = time.perf_counter() - t_fault
                rows.append(row)
                if not problem:
                    shutil.rmtree(workdir, ignore_errors=True)  # a failed one's events stay for a look
                took = row["recovery_s"]
                print(
                    f"{i + 1:4d} {fault.name:<30} {'ok' if not problem else 'UNEXPECTED'} recovery "
                    + (f"{took:6.2f}s" if took is not None else "   n/a ")
                    + f" groups {row['groups']} wall {row['wall_s']:5.1f}s load {os.getloadavg()[0]:.1f}"
                    + f"\n     engines {row['engines']}"
                    + (f"\n     {problem} (events in {workdir})" if problem else ""),
                    flush=True,
                )
                if (i + 1) % 5 == 0:
                    save()
            api.shutdown()
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        netns.teardown()
        stats = summary(rows, hangs, wrong)
        report(stats, rows)
        _common.print_load(load_before)
        save()
    return 1 if hangs or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
