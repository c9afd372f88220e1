"""What holds the page's main thread while a job streams in JupyterLab (issue 30 item 5: every long task under
200 ms): runs the browser walk-through (tests/panel/test_browser.py, a failed job then a 40-epoch job streaming
into its cell and the jobs panel) under Chrome's tracer, then lists each task over --over ms with its wall and
thread (CPU) time, the kinds of work in it (style, layout, paint, gc) and the code it ran for (the live figure,
the plotly renderer drawing an output, ipywidgets, the jobs panel, JupyterLab), and per phase (the cell's start,
streaming, the job's end) the long tasks' count and CPU time.

Wall times grow with the machine's load; CPU times much less, so compare those between runs on a shared machine.

    .venv/bin/python bench/long_tasks.py [--over 150] [--out DIR]
    .venv/bin/python bench/long_tasks.py --trace DIR/walkthrough-trace.json   # read a kept trace again
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import main_thread_trace  # noqa: E402
from _common import finish, load_before  # noqa: E402

TEST = "tests/panel/test_browser.py::test_walkthrough_a_failed_job_then_a_streaming_one"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--over", type=float, default=150, help="list the tasks longer than this, ms (wall)")
    parser.add_argument("--out", type=Path, help="where the trace is kept (default: a new temporary folder)")
    parser.add_argument("--trace", type=Path, help="report on this kept trace instead of running the walk-through")
    args = parser.parse_args()
    if args.trace:
        trace = json.loads(args.trace.read_text())
        marks = main_thread_trace.marks(trace)
        print(main_thread_trace.report(main_thread_trace.long_tasks(trace), over_ms=args.over, marks=marks))
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="jdl-long-tasks-"))
    t_start, before = time.perf_counter(), load_before()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", TEST, "-x", "-q", "-s", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env={**os.environ, "JDL_TRACE_DIR": str(out)},
        capture_output=True,
        text=True,
    )
    found = json.loads((out / "walkthrough-long-tasks.json").read_text()) if run.returncode == 0 else None
    if found is None:
        sys.exit(f"the walk-through failed (exit {run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}")
    print(main_thread_trace.report(found["tasks"], over_ms=args.over, marks=found["marks"]))
    measured = ("while the job streamed", "at the job's end")  # the test's own long-task lines
    print("\n".join(line for line in run.stdout.splitlines() if line.startswith(measured)))
    print(f"trace kept at {out / 'walkthrough-trace.json'} (DevTools' Performance panel opens it)")
    phases = main_thread_trace.by_phase(found["tasks"], found["marks"])
    finish(__file__, {"phases": phases, "trace": str(out / "walkthrough-trace.json")}, t_start, before)


if __name__ == "__main__":
    main()
