"""What every benchmark here reports besides its numbers: how loaded the machine was, and which versions ran."""
import os
from importlib import metadata


def load_before():
    """The 1-minute load average now, with a note when other work will skew the timings."""
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"note: 1-minute load average is {load:.2f} before starting; other work on this machine "
              "skews these timings", flush=True)
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
