"""Soak: 100 injected failures in a row on one real 2-engine cluster; zero may hang.

Cycles through tests/support/fault_catalog.py (rank errors, engine deaths, stalls, timeouts, cancels, interrupts,
restarts). Each run must end within --hang-after seconds of starting, or it counts as a hang and the soak stops
(a watchdog thread interrupts the kernel side). After each fault the next one needs the whole cluster again, so a
leaked or stuck engine shows up as a failure of the following run. Prints time-to-error (from the injected failure
to the cell's error) and time-to-cancel (from the stop request to the cell's error), median and max.

    .venv/bin/python bench/soak.py [--runs 100] [--hang-after 90]
    .venv/bin/python bench/soak.py --elastic [--runs 1000] [--kinds lost,grow]   (bench/soak_elastic.py)
"""

import argparse
import collections
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _common  # noqa: E402
from fault_catalog import FAULTS, run_fault  # noqa: E402


def _size():
    import horovod.tensorflow as hvd

    return hvd.size()


def expected_outcome(run):
    """True when the run ended the way its fault says it must."""
    from jupyter_dl.errors import JobCancelled, JobStalled, JobTimeout, RankError

    kinds = {
        "rank_error": RankError,
        "stalled": JobStalled,
        "timeout": JobTimeout,
        "cancelled": JobCancelled,
        "interrupted": KeyboardInterrupt,
    }
    if run.fault.expect == "restarted":
        return run.error is None
    if not isinstance(run.error, kinds[run.fault.expect]):
        return False
    return run.fault.expect != "rank_error" or run.error.rank == run.fault.rank


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=None, help="faults to inject (default 100; with --elastic 1000)")
    parser.add_argument(
        "--hang-after", type=float, default=None, help="seconds after which a run counts as hung (90; elastic: 180)"
    )
    parser.add_argument(
        "--elastic", action="store_true", help="soak elastic jobs instead (bench/soak_elastic.py; takes --kinds too)"
    )
    args, rest = parser.parse_known_args()
    if args.elastic:
        import soak_elastic

        hang = ["--hang-after", str(args.hang_after)] if args.hang_after else []
        return soak_elastic.main(rest + hang + ["--runs", str(args.runs or 1000)])
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)} (--kinds goes with --elastic)")
    args.runs, args.hang_after = args.runs or 100, args.hang_after or 90.0

    import jupyter_dl
    from jupyter_dl.kernel import api

    load_before = _common.load_before()
    t_start = time.perf_counter()
    session = api.session()
    session.cluster.start(n=2)
    assert jupyter_dl.distribute(_size, n=2) == 2
    rows, hangs, wrong = [], [], []
    for i in range(args.runs):
        fault = FAULTS[i % len(FAULTS)]
        workdir = tempfile.mkdtemp(prefix="jdl-soak-")
        finished = _common.hang_watch(args.hang_after, hangs, fault.name)
        run = run_fault(fault, workdir)
        finished.set()
        if hangs:
            print(f"HANG: run {i} ({fault.name}) did not end within {args.hang_after:.0f}s")
            break
        ok = expected_outcome(run)
        if not ok:
            wrong.append((fault.name, repr(run.error)[:200]))
        took = run.time_to_error
        rows.append(
            {
                "fault": fault.name,
                "expect": fault.expect,
                "ok": ok,
                "time_to_error_s": took,
                "wall_s": run.ended - run.started,
            }
        )
        shown = f"{took:.2f}s" if took is not None else "n/a"
        print(
            f"{i + 1:3d} {fault.name:<36} {'ok' if ok else 'UNEXPECTED'}  to error {shown:>7}  "
            f"wall {run.ended - run.started:5.1f}s",
            flush=True,
        )

    def stats(values):
        return (statistics.median(values), max(values)) if values else (float("nan"), float("nan"))

    errors = [
        r["time_to_error_s"]
        for r in rows
        if r["expect"] in ("rank_error", "stalled", "timeout") and r["time_to_error_s"] is not None
    ]
    by_kind = collections.defaultdict(list)
    for r in rows:
        if r["time_to_error_s"] is not None:
            by_kind[r["expect"]].append(r["time_to_error_s"])
    stops = by_kind["cancelled"] + by_kind["interrupted"]
    print(f"\nruns {len(rows)}, hangs {len(hangs)}, unexpected outcomes {len(wrong)}")
    for name, error in wrong:
        print(f"  unexpected: {name}: {error}")
    print("time to error (s), from the injected failure:   median {:.2f}  max {:.2f}".format(*stats(errors)))
    for kind, values in sorted(by_kind.items()):
        print(f"  {kind:<12} n={len(values):3d}  median {statistics.median(values):.2f}  max {max(values):.2f}")
    print("time to cancel (s), from the stop request:      median {:.2f}  max {:.2f}".format(*stats(stops)))
    restarts = [r["wall_s"] for r in rows if r["expect"] == "restarted"]
    if restarts:
        print("restarted jobs, whole wall time (s):           median {:.2f}  max {:.2f}".format(*stats(restarts)))
    api.shutdown()
    load_after = _common.print_load(load_before)
    _common.write_results(
        HERE / "results" / "soak.json",
        {
            "runs": rows,
            "hangs": hangs,
            "unexpected": wrong,
            "time_to_error_median_s": stats(errors)[0],
            "time_to_error_max_s": stats(errors)[1],
            "time_to_cancel_median_s": stats(stops)[0],
            "time_to_cancel_max_s": stats(stops)[1],
        },
        t_start,
        load_before,
        load_after,
        ("horovod", "ipyparallel", "tensorflow"),
    )
    return 1 if hangs or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
