"""Engines ready to run a job: forked from one server that imported TensorFlow once (EngineCluster.fork_engines,
the default) against engines launched as their own processes, in the same run, rounds interleaved. Both with the
same controller heartbeat (EngineCluster.heartbeat_ms); `--heartbeat-ms 3000` gives ipyparallel's own.

Two times, each from the kernel's side, ending when every engine is registered AND has TensorFlow imported
with its first op run (what a job would otherwise wait for):
- start: a new 2-engine local cluster (controller, engines, imports);
- replace: one engine of a running cluster SIGKILLed, until the cluster has 2 ready engines again
  (EngineCluster.replace_dead, what an elastic job's lost rank and a stuck engine go through).

And the memory of the ready engines (PSS; for forked engines with their server, whose modules they share).

    .venv/bin/python bench/engine_start.py [--rounds 5] [--heartbeat-ms 1000]
"""

import argparse
import os
import pathlib
import signal
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _common  # noqa: E402

from jupyter_dl.cluster.engines import EngineCluster  # noqa: E402
from jupyter_dl.wire import remote  # noqa: E402


def _until_ready(cluster, n):
    while True:
        ids = cluster.engine_ids()
        cluster.describe(ids)  # as a job does: it starts the engine's preload (imports, first op), once
        if len(ids) >= n and all(cluster.client[ids].apply_sync(remote.PRELOADED)):
            return
        time.sleep(0.05)


def _pss_mib(pid) -> float:
    """Proportional set size: pages shared between processes count a share each, so sums add up."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def one_round(fork: bool, heartbeat_ms: int) -> dict:
    t0 = time.perf_counter()
    cluster = EngineCluster(fork_engines=fork, heartbeat_ms=heartbeat_ms)
    cluster.start(n=2)
    _until_ready(cluster, 2)
    started = time.perf_counter() - t0
    engines = [info["pid"] for info in cluster.describe(cluster.engine_ids())]
    server = [cluster._forks.pid] if cluster._forks is not None else []
    memory = sum(_pss_mib(pid) for pid in engines + server)
    try:
        victim = cluster.engine_ids()[0]
        pid = cluster.describe([victim])[0]["pid"]
        t1 = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        cluster.replace_dead([victim])
        cluster.ensure(2)
        _until_ready(cluster, 2)
        replaced = time.perf_counter() - t1
    finally:
        cluster.stop()
    return {"start": started, "replace": replaced, "pss_mib": memory}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    args = parser.parse_args()
    t_start, before = time.perf_counter(), _common.load_before()
    runs: dict = {"forked": [], "launched": []}
    for r in range(args.rounds):
        for label, fork in (
            (("forked", True), ("launched", False)) if r % 2 == 0 else (("launched", False), ("forked", True))
        ):
            result = one_round(fork, args.heartbeat_ms)
            runs[label].append(result)
            print(
                f"round {r + 1} {label:8s} start {result['start']:.2f} s, replace {result['replace']:.2f} s, "
                f"memory (PSS, engines{' + server' if fork else ''}) {result['pss_mib']:.0f} MiB",
                flush=True,
            )
    summary = {}
    for measure in ("start", "replace", "pss_mib"):
        forked = statistics.median(x[measure] for x in runs["forked"])
        launched = statistics.median(x[measure] for x in runs["launched"])
        summary[measure] = {"forked_median_s": forked, "launched_median_s": launched, "ratio": forked / launched}
        print(f"{measure:8s}: forked {forked:.2f}, launched {launched:.2f}, ratio {forked / launched:.2f}")
    _common.finish(__file__, {"heartbeat_ms": args.heartbeat_ms, "rounds": runs, "summary": summary}, t_start, before)


if __name__ == "__main__":
    main()
