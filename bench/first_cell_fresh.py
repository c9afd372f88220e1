"""The first `%%distribute -n 2` cell of a fresh Jupyter kernel (issue 28: <= 5 s), with the cluster started in the
background by `%load_ext jupyter_dl` (c.EngineCluster.start_on_load) and a person's pause of T seconds between the
load and the first cell, against the same kernel with the early start off (the cluster starts with the cell), and
with no pause and engines launched as their own processes instead of forked (c.EngineCluster.fork_engines). Each
run is a new kernel; the clock runs from sending the first cell to its reply.

    .venv/bin/python bench/first_cell_fresh.py [--kernels 5] [--pauses 0,3,10]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="jdl-bench-ipython-"))  # no stale connection files
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from _common import load_before, print_load, write_results  # noqa: E402
from real_kernel import fresh_kernel, run  # noqa: E402

CELL = "%%distribute -n 2\nprint('hi')\n"
OFF = "--EngineCluster.start_on_load=False"
LAUNCHED = "--EngineCluster.fork_engines=False"


def first_cell(pause, *options):
    """Seconds the first cell takes in a new kernel, `pause` s after `%load_ext jupyter_dl`."""
    with fresh_kernel(*options) as (client, _pid, _):
        assert run(client, "%load_ext jupyter_dl")[0] == "ok"
        time.sleep(pause)  # the person typing the cell
        t = time.perf_counter()
        status, text = run(client, CELL)
        elapsed = time.perf_counter() - t
        assert status == "ok" and "hi" in text, text
        run(client, "%dl_cluster stop")
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", type=int, default=5)
    parser.add_argument("--pauses", default="0,3,10")
    args = parser.parse_args()
    pauses = [float(p) for p in args.pauses.split(",")]
    t_start = time.perf_counter()
    before = load_before()
    runs: dict = {"off": [], "launched engines, pause 0 s": []} | {f"pause {p:g} s": [] for p in pauses}
    for _ in range(args.kernels):  # interleaved, so a change in the machine's load touches every column alike
        runs["off"].append(first_cell(0.0, OFF))
        runs["launched engines, pause 0 s"].append(first_cell(0.0, LAUNCHED))
        for p in pauses:
            runs[f"pause {p:g} s"].append(first_cell(p))
    medians = {name: statistics.median(times) for name, times in runs.items()}
    print(f"first cell of a fresh kernel, median of {args.kernels} kernels (target <= 5 s):")
    for name, median in medians.items():
        ratio = "" if name == "off" else f"  = {median / medians['off']:.2f}x without the early start"
        label = "without early start" if name == "off" else f"early start, {name}"
        print(f"  {label:32s} {median:6.2f} s  (all: {', '.join(f'{t:.2f}' for t in runs[name])}){ratio}")
    after = print_load(before)
    write_results(
        Path(__file__).parent / "results" / "first_cell_fresh.json",
        {"runs_s": runs, "median_s": medians},
        t_start,
        before,
        after,
        ("ipyparallel", "ipykernel", "tensorflow"),
    )


if __name__ == "__main__":
    main()
