"""Soak for elastic jobs (issue 27): injected faults in `-n 1:2` jobs, one after another on one real 2-engine cluster;
zero may hang and zero may lose a commit.

Cycles through tests/support/elastic_faults.py: a rank's engine dies (os._exit, SIGKILL; mid-epoch or at an epoch
end; rank 1 or the leader, rank 0), the job grows into an engine that came free, a second rank dies while the group
re-forms after that grow, a rank raises, a rank stalls. A grow fault first shuts one engine down, so that the job
starts on one, and starts its replacement once the job trains: the engine that comes free. The package replaces
dead engines itself (EngineCluster.replace_dead); before each fault the bench waits until the cluster has 2 engines
with TensorFlow imported again, so a leaked or stuck engine shows up as a failure of the following fault.

A fault passes when the job ended as it must (finished; or RankError naming the rank that raised; or JobStalled)
and, when it finished, lost no commit (elastic_faults.ElasticRun.lost_commits). Recovery time: from the injected
failure (a grow: from the commit point where rank 0 heard the request) to the next group's first training step,
both read from the engines' clocks. Prints per fault kind the median, p90, p99, max and a histogram; writes
bench/results/soak_elastic.json (soak_elastic_tf.json with --backend tf; also every 10 faults, so a run stopped early
leaves its numbers).

    .venv/bin/python bench/soak_elastic.py [--runs 1000] [--kinds lost,grow] [--hang-after 180]
"""

import argparse
import collections
import os
import pathlib
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["JUPYTER_DATA_DIR"] = tempfile.mkdtemp(prefix="jdl-soak-elastic-")  # its 1,000 jobs stay out of yours

import _common  # noqa: E402
from elastic_faults import ELASTIC_FAULTS, run_elastic_fault  # noqa: E402

BINS = [0.5, 1, 2, 3, 5, 10, 20, 30, 60, float("inf")]
ENGINES = 2
READY_TIMEOUT_S = 300.0


def _size():
    from jupyter_dl import collectives

    return collectives.size()


def wait_for_engines(cluster):
    """Until the cluster has ENGINES live engines with TensorFlow imported (replacements of dead ones included)."""
    from jupyter_dl.wire import remote

    cluster.ensure(ENGINES)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        ids = cluster.engine_ids()
        cluster.describe(ids)  # starts a new engine's import of TensorFlow
        if len(ids) >= ENGINES and all(cluster.client.direct_view(ids).apply_sync(remote.PRELOADED)):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster did not get {ENGINES} ready engines back in {READY_TIMEOUT_S:.0f}s")
        time.sleep(0.2)
        cluster.ensure(ENGINES)


def expected_outcome(run) -> str:
    """'' when the job ended as its fault says it must, else what was wrong."""
    from jupyter_dl.errors import JobStalled, RankError

    fault, error = run.fault, run.error
    if fault.expect == "finished":
        if error is not None:
            others = "".join(f"; rank {r}: {said}" for r, said in sorted(getattr(error, "others", {}).items()))
            return f"failed: {type(error).__name__}: {str(error)[:300]}{others[:600]}"
        return "; ".join(run.lost_commits())
    if fault.expect == "rank_error":
        if not isinstance(error, RankError) or error.rank != fault.rank or error.ename != fault.ename:
            return f"wanted RankError from rank {fault.rank}, got {error!r}"[:300]
        return ""
    if not isinstance(error, JobStalled):
        return f"wanted JobStalled, got {error!r}"[:300]
    return ""


def fault_row(run, problem) -> dict:
    """What the soak keeps of one fault's run (the caller adds its wall time)."""
    fault, job = run.fault, getattr(run.result, "job", None)
    finished = fault.expect == "finished" and run.error is None
    return {
        "fault": fault.name,
        "expect": fault.expect,
        "ok": not problem,
        "problem": problem,
        "lost_commit": finished and bool(run.lost_commits()),
        "recovery_s": run.recovery_s() if finished else None,
        "time_to_error_s": run.time_to_error_s(),
        "groups": [change["n"] for change in job.membership] if job is not None else None,
        "reasons": [change["reason"] for change in job.membership] if job is not None else None,
        "job_s": run.ended - run.started,
    }


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def bins(values) -> list:
    """(label, count) per BINS interval: '1-2s' holds 1 <= v < 2."""
    found, low = [], 0.0
    for high in BINS:
        label = f"{low:g}-{high:g}s" if high != float("inf") else f">={low:g}s"
        found.append((label, sum(1 for v in values if low <= v < high)))
        low = high
    return found


def histogram(values) -> str:
    counted = bins(values)
    widest = max(count for _, count in counted) or 1
    return "\n".join(
        f"      {label:>9} {'#' * max(1, round(30 * count / widest)):<30} {count}" for label, count in counted if count
    )


def distribution(values) -> dict:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median_s": statistics.median(values),
        "p90_s": percentile(values, 90),
        "p99_s": percentile(values, 99),
        "max_s": max(values),
        "histogram": {label: count for label, count in bins(values)},
    }


def summary(rows, hangs, wrong) -> dict:
    recovery, to_error = collections.defaultdict(list), collections.defaultdict(list)
    for r in rows:
        if r["recovery_s"] is not None:
            recovery[r["fault"]].append(r["recovery_s"])
        if r["time_to_error_s"] is not None:
            to_error[r["fault"]].append(r["time_to_error_s"])
    every = [v for values in recovery.values() for v in values]
    return {
        "faults": len(rows),
        "hangs": hangs,
        "unexpected": wrong,
        "lost_commits": sum(1 for r in rows if r["lost_commit"]),
        "fault_wall_median_s": statistics.median(r["wall_s"] for r in rows) if rows else None,
        "recovery_all": distribution(every),
        "recovery_by_fault": {k: distribution(v) for k, v in sorted(recovery.items())},
        "time_to_error_by_fault": {k: distribution(v) for k, v in sorted(to_error.items())},
    }


def report(stats, rows):
    print(
        f"\nfaults {stats['faults']}, hangs {len(stats['hangs'])}, unexpected outcomes {len(stats['unexpected'])}, "
        f"lost commits {stats['lost_commits']}; one fault takes {stats['fault_wall_median_s'] or 0:.1f}s (median wall, "
        "waiting for the replacement engine included)"
    )
    for name, error in stats["unexpected"][:20]:
        print(f"  unexpected: {name}: {error}")
    for title, by_fault in (
        ("recovery", stats["recovery_by_fault"]),
        ("time to error", stats["time_to_error_by_fault"]),
    ):
        print(f"{title} (s):")
        for name, d in by_fault.items():
            print(
                f"  {name:<38} n={d['n']:4d}  median {d['median_s']:6.2f}  p90 {d['p90_s']:6.2f}  "
                f"p99 {d['p99_s']:6.2f}  max {d['max_s']:6.2f}"
            )
            key = "recovery_s" if title == "recovery" else "time_to_error_s"
            print(histogram([r[key] for r in rows if r["fault"] == name and r[key] is not None]))
    every = stats["recovery_all"]
    if every["n"]:
        print(
            f"  {'every survived fault':<38} n={every['n']:4d}  median {every['median_s']:6.2f}  "
            f"p90 {every['p90_s']:6.2f}  p99 {every['p99_s']:6.2f}  max {every['max_s']:6.2f}"
        )
        print(histogram([r["recovery_s"] for r in rows if r["recovery_s"] is not None]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="faults to inject (issue 27 asks for 1,000)")
    parser.add_argument(
        "--kinds",
        default="",
        help="comma-separated words; only the faults whose name holds one run, e.g. lost,grow "
        f"(all: {', '.join(f.name for f in ELASTIC_FAULTS)})",
    )
    parser.add_argument("--hang-after", type=float, default=180.0, help="seconds after which a fault counts as hung")
    parser.add_argument("--backend", default="horovod", choices=("horovod", "tf"))
    args = parser.parse_args(argv)
    words = [w for w in args.kinds.split(",") if w]
    faults = [f for f in ELASTIC_FAULTS if not words or any(w in f.name for w in words)]
    if not faults:
        parser.error(
            f"--kinds {args.kinds!r} names no fault; pick words from: {', '.join(f.name for f in ELASTIC_FAULTS)}"
        )

    import jupyter_dl
    from jupyter_dl.kernel import api

    # Started in the background (nohup ... &), SIGINT comes ignored, and the watchdog's interrupt_main would do
    # nothing; SIGTERM (the soak's time is up) stops it as Ctrl-C does, keeping what it reached.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stopping = threading.Event()

    def stop(*_):
        stopping.set()  # the job in flight takes the interrupt as a stop-button press; the loop ends after it
        signal.default_int_handler(signal.SIGINT, None)

    signal.signal(signal.SIGTERM, stop)
    load_before = _common.load_before()
    t_start = time.perf_counter()
    session = api.session()
    session.runner.elastic_grow_wait = 600  # grow once, into the engine, however slowly it starts
    # Commit points every 3 steps inside an epoch (the time-based default would make none in these short epochs):
    # a mid-epoch fault strikes after step 5, so the survivors go on from inside the epoch.
    session.runner.elastic_commit_steps = 3
    session.cluster.start(n=ENGINES)
    assert jupyter_dl.distribute(_size, n=ENGINES, backend=args.backend) == ENGINES
    rows, hangs, wrong = [], [], []
    out = HERE / "results" / ("soak_elastic.json" if args.backend == "horovod" else f"soak_elastic_{args.backend}.json")

    def save():
        _common.write_results(
            out,
            {"runs": rows, **summary(rows, hangs, wrong), "backend": args.backend, "kinds": [f.name for f in faults]},
            t_start,
            load_before,
            os.getloadavg()[0],
            ("horovod", "ipyparallel", "tensorflow"),
        )

    try:
        for i in range(args.runs):
            fault = faults[i % len(faults)]
            t_fault = time.perf_counter()
            wait_for_engines(session.cluster)
            workdir = tempfile.mkdtemp(prefix="jdl-soak-elastic-")
            finished = _common.hang_watch(args.hang_after, hangs, fault.name)
            run = run_elastic_fault(fault, workdir, session, args.backend)
            finished.set()
            if stopping.is_set():
                print(f"stopped during fault {i + 1} ({fault.name}): not counted", flush=True)
                break
            if hangs:
                print(f"HANG: fault {i + 1} ({fault.name}) did not end within {args.hang_after:.0f}s", flush=True)
                break
            problem = expected_outcome(run)
            if problem:
                wrong.append((fault.name, problem))
            row = {**fault_row(run, problem), "wall_s": time.perf_counter() - t_fault}
            rows.append(row)
            if not problem and not os.environ.get("KEEP"):
                shutil.rmtree(workdir, ignore_errors=True)  # a failed one's events stay for a look
            took = row["recovery_s"] if row["recovery_s"] is not None else row["time_to_error_s"]
            shown = f"{took:6.2f}s" if took is not None else "   n/a "
            print(
                f"{i + 1:4d} {fault.name:<38} {'ok' if not problem else 'UNEXPECTED'} "
                f"{'recovery' if row['recovery_s'] is not None else 'to error'} {shown} groups {row['groups']} "
                f"wall {row['wall_s']:5.1f}s load {os.getloadavg()[0]:.1f}"
                + (f"\n     {problem} (events in {workdir})" if problem else ""),
                flush=True,
            )
            if (i + 1) % 10 == 0:
                save()
    except KeyboardInterrupt:  # stopped from outside (the soak's time is up): keep what it reached
        print("stopped", flush=True)
    finally:
        stats = summary(rows, hangs, wrong)
        report(stats, rows)
        api.shutdown()
        _common.print_load(load_before)
        save()
    return 1 if hangs or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
