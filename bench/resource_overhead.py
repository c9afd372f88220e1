"""What per-rank resource sampling costs training (issue 18; target: under 1% of step time).

The same 2-rank zero-code fit runs with sampling off (`c.JobRunner.resource_interval = 0`) and on (the default 0.25 s,
and a 4x denser 0.0625 s to show how the cost scales), interleaved off/on/dense in rounds, in one process. Two
figures per setting:
- the fit's samples/s (epoch 2, timed inside the ranks) against the run with sampling off: the end-to-end ratio,
  which on a small shared machine carries run-to-run noise of a few percent;
- the sampling thread's own CPU time (it measures itself with time.thread_time) as a share of the ranks' training
  time: the direct cost, free of that noise.

    .venv/bin/python bench/resource_overhead.py [--rounds 3] [--steps 200]
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import _common  # noqa: E402  (bench/ is the script's own directory)
from horovod_compat import fit_job

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = Path(__file__).resolve().parent / "results" / "resource_overhead.json"
TARGET = 0.01
SETTINGS = {"off": 0.0, "default": 0.25, "dense": 0.0625}


def sampler_share(store, job):
    """The sampling threads' CPU seconds over the ranks' training seconds, for one job."""
    records = store.metrics(job.id)[0]
    cpu = sum(r.get("sampler_cpu_s", 0.0) for r in records if r.get("kind") == "resources")
    trained = {r["rank"]: r["seconds"] for r in records if r.get("kind") == "throughput"}
    return cpu / sum(trained.values()) if trained else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200, help="timed steps per rank and run (default 200)")
    args = parser.parse_args()

    import jupyter_dl
    from jupyter_dl.kernel import api

    t_start = time.perf_counter()
    load_before = _common.load_before()
    speed = {name: [] for name in SETTINGS}
    share = {name: [] for name in SETTINGS}
    try:
        for i in range(args.rounds):
            for name, interval in SETTINGS.items():
                session = api.session()
                session.runner.resource_interval = interval
                result = jupyter_dl.distribute(fit_job, n=2, args=(args.steps,), plot=False, name=f"res-{name}")
                speed[name].append(result["samples_per_s"])
                share[name].append(sampler_share(session.store, session.jobs.all()[-1]))
            print(
                f"  round {i + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in speed.items()) + " samples/s",
                flush=True,
            )
    finally:
        jupyter_dl.shutdown()

    base = statistics.median(speed["off"])
    summary = {}
    print(f"\n{'sampling':24s} {'samples/s':>10s} {'vs off':>8s} {'sampler CPU / train time':>26s}")
    for name, interval in SETTINGS.items():
        med = statistics.median(speed[name])
        cost = statistics.median(s for s in share[name] if s is not None) if name != "off" else 0.0
        summary[name] = {
            "interval_s": interval,
            "samples_per_s": med,
            "ratio_vs_off": med / base,
            "sampler_cpu_share": cost,
        }
        label = f"{name} ({interval:g} s)" if interval else "off"
        print(f"{label:24s} {med:10.0f} {med / base:8.3f} {cost * 100:25.3f}%")
    cost = summary["default"]["sampler_cpu_share"]
    print(
        f"default sampling costs {cost * 100:.3f}% of training time: target < {TARGET * 100:g}%: "
        f"{'MET' if cost < TARGET else 'NOT MET'}"
    )
    load_after = _common.print_load(load_before)
    _common.write_results(
        RESULTS,
        {
            "runs": {"samples_per_s": speed, "sampler_cpu_share": share},
            "summary": summary,
            "target": TARGET,
            "timed_steps": args.steps,
        },
        t_start,
        load_before,
        load_after,
        ("tensorflow", "keras", "horovod", "psutil"),
    )


if __name__ == "__main__":
    main()
