"""What every benchmark here reports besides its numbers: how loaded the machine was, and which versions ran."""

import os
from importlib import metadata


def load_before():
    """The 1-minute load average now, with a note when other work will skew the timings."""
    load = os.getloadavg()[0]
    if load > 0.5:
        print(
            f"note: 1-minute load average is {load:.2f} before starting; other work on this machine "
            "skews these timings",
            flush=True,
        )
    return load


def print_load(before):
    after = os.getloadavg()[0]
    print(f"load average (1 min) before {before:.2f}, after {after:.2f} on {os.cpu_count()} cpus")
    return after


def versions(*dists):
    found = {}
    for dist in dists:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def write_results(path, data, t_start, load_before, load_after, dists):
    """Write a benchmark's JSON with the machine facts every result needs, and say where it went."""
    import json
    import platform
    import time

    data = {
        **data,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            **versions(*dists),
        },
        "bench_wall_s": time.perf_counter() - t_start,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    shown = path.relative_to(path.parent.parent.parent)
    print(f"wrote {shown} (whole benchmark: {time.perf_counter() - t_start:.0f} s)")


def finish(bench_file, results, t_start, before, dists=("ipyparallel", "horovod", "tensorflow")):
    """The end of a benchmark: the load it ran under, and its JSON as bench/results/<its name>.json."""
    import pathlib

    after = print_load(before)
    bench = pathlib.Path(bench_file)
    write_results(bench.parent / "results" / f"{bench.stem}.json", results, t_start, before, after, dists)


def hang_watch(after_s, hangs, name):
    """A watchdog for one run of a soak: unless the returned Event is set within `after_s` seconds, `name` is added
    to `hangs` and the main thread is interrupted (KeyboardInterrupt), so a hung run ends the soak, not the machine."""
    import _thread
    import threading

    finished = threading.Event()

    def watch():
        if not finished.wait(after_s):
            hangs.append(name)
            dump_stacks()
            _thread.interrupt_main()

    threading.Thread(target=watch, daemon=True, name="soak-hang-watch").start()
    return finished


def dump_stacks():
    """On a hang, where everything waits: this process's threads, and (with py-spy installed, as root) every engine's
    and the controller's, so the hang can be diagnosed after the soak has cleaned up."""
    import faulthandler
    import shutil
    import subprocess
    import sys

    print("--- the kernel's threads ---", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        print("(no py-spy: the engines' stacks are not dumped)", file=sys.stderr, flush=True)
        return
    found = subprocess.run(["pgrep", "-f", "ipyparallel|ipengine|ipcontroller"], capture_output=True, text=True)
    for pid in found.stdout.split():
        print(f"--- process {pid} ---", file=sys.stderr, flush=True)
        subprocess.run([spy, "dump", "--pid", pid], stdout=sys.stderr, stderr=sys.stderr, timeout=60, check=False)
