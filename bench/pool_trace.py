"""Replay a multi-user job trace through the gang pool with simulated GPUs (target: >= 90% allocation).

A seeded trace: users submit jobs of 1, 2, 4 or 8 GPUs (mostly small, some whole-host), with log-normal durations,
arriving as a Poisson process offering 95% of the pool by default: busy, with queues forming in bursts.
A discrete-event simulation drives the pool's own scheduler with a fake clock. Prints GPU allocation
(allocated GPU-time over pool GPU-time while
any job waits, and over the whole run), mean and p95 queue wait, partial holds (must be 0), and starved jobs (waited
more than --starved-after, or never started).

    .venv/bin/python bench/pool_trace.py [--jobs 2000] [--hosts 4] [--gpus-per-host 8] [--load 0.95]
"""

import argparse
import heapq
import pathlib
import statistics
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import _common  # noqa: E402

from jupyter_dl.pool.gang import GangPool, Quota  # noqa: E402


def make_trace(jobs, users, capacity, load, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 4, 8], size=jobs, p=[0.45, 0.25, 0.2, 0.1])
    durations = rng.lognormal(mean=np.log(600), sigma=0.8, size=jobs)  # median 10 min
    rate = load * capacity / float(np.mean(sizes * durations))  # arrivals per second for that load
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=jobs))
    owners = rng.integers(0, users, size=jobs)
    priorities = (rng.random(jobs) < 0.05).astype(int)  # a few urgent jobs
    return [
        dict(t=float(a), user=f"user{u}", gpus=int(s), duration=float(d), priority=int(p))
        for a, u, s, d, p in zip(arrivals, owners, sizes, durations, priorities)
    ]


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def simulate(trace, hosts, per_host, reserve_after, max_gpus):
    clock = Clock()
    pool = GangPool(
        {f"h{h}": list(range(per_host)) for h in range(hosts)},
        clock=clock,
        default_quota=Quota(max_gpus=max_gpus),
        reserve_after=reserve_after,
    )
    capacity = hosts * per_host
    events = [(job["t"], 0, i, "arrive") for i, job in enumerate(trace)]
    heapq.heapify(events)
    tickets, started, waits = {}, {}, {}
    partial = 0
    busy_time = queued_time = allocated_while_queued = allocated_total = 0.0
    last = 0.0

    def account(until):
        nonlocal busy_time, queued_time, allocated_while_queued, allocated_total, last
        span = until - last
        allocated = capacity - pool.free_count()
        allocated_total += allocated * span
        if pool.queue():
            queued_time += span
            allocated_while_queued += allocated * span
        busy_time += span if allocated else 0.0
        last = until

    def start_granted():
        for i, ticket in tickets.items():
            if ticket.state == "granted" and i not in started:
                started[i] = clock.now
                waits[i] = clock.now - trace[i]["t"]
                heapq.heappush(events, (clock.now + trace[i]["duration"], 1, i, "finish"))

    while events:
        t, _, i, kind = heapq.heappop(events)
        account(t)
        clock.now = t
        if kind == "arrive":
            job = trace[i]
            tickets[i] = pool.submit(job["user"], job["gpus"], priority=job["priority"])
        else:
            pool.release(tickets[i].id, trace[i]["user"])
        partial += len(pool.partial_holds())
        start_granted()
    end = clock.now
    return {
        "waits": [waits.get(i) for i in range(len(trace))],
        "partial_holds": partial,
        "allocation_while_queued": allocated_while_queued / (capacity * queued_time) if queued_time else None,
        "allocation_overall": allocated_total / (capacity * end) if end else None,
        "queued_fraction": queued_time / end if end else None,
        "makespan_s": end,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--users", type=int, default=12)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--gpus-per-host", type=int, default=8)
    parser.add_argument("--load", type=float, default=0.95, help="offered GPU-time over pool capacity")
    parser.add_argument(
        "--reserve-after",
        type=float,
        default=3600.0,
        help="seconds a blocked job waits before GPUs are kept for it (the pool's default)",
    )
    parser.add_argument("--max-gpus", type=int, default=16, help="per-user quota")
    parser.add_argument("--starved-after", type=float, default=6 * 3600.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    load_before = _common.load_before()
    t_start = time.perf_counter()
    capacity = args.hosts * args.gpus_per_host
    trace = make_trace(args.jobs, args.users, capacity, args.load, args.seed)
    result = simulate(trace, args.hosts, args.gpus_per_host, args.reserve_after, args.max_gpus)
    waits = [w for w in result["waits"] if w is not None]
    never = sum(w is None for w in result["waits"])
    starved = never + sum(w > args.starved_after for w in waits)
    p95 = statistics.quantiles(waits, n=20)[18] if len(waits) >= 20 else max(waits)
    by_size = {}
    for job, wait in zip(trace, result["waits"]):
        if wait is not None:
            by_size.setdefault(job["gpus"], []).append(wait)
    print(
        f"{args.jobs} jobs from {args.users} users on {args.hosts} x {args.gpus_per_host} simulated GPUs, "
        f"offered load {args.load:.0%}, simulated {result['makespan_s'] / 3600:.1f} h "
        f"(replayed in {time.perf_counter() - t_start:.1f} s)"
    )
    print(
        f"GPU allocation while jobs wait: {result['allocation_while_queued']:.1%}   "
        f"(whole run: {result['allocation_overall']:.1%}; "
        f"a queue existed {result['queued_fraction']:.0%} of the time)"
    )
    print(
        f"queue wait: mean {statistics.mean(waits) / 60:.1f} min, p95 {p95 / 60:.1f} min; "
        + ", ".join(f"{s}-GPU jobs mean {statistics.mean(w) / 60:.1f} min" for s, w in sorted(by_size.items()))
    )
    print(
        f"partial holds: {result['partial_holds']}   starved jobs (waited > {args.starved_after / 3600:.0f} h or "
        f"never started): {starved}"
    )
    met = result["allocation_while_queued"] >= 0.9 and result["partial_holds"] == 0
    print(f"target: >= 90% allocation, 0 partial holds -> {'MET' if met else 'MISSED'}")
    load_after = _common.print_load(load_before)
    _common.write_results(
        HERE / "results" / "pool_trace.json",
        {
            "args": vars(args),
            "allocation_while_queued": result["allocation_while_queued"],
            "allocation_overall": result["allocation_overall"],
            "mean_wait_s": statistics.mean(waits),
            "p95_wait_s": p95,
            "partial_holds": result["partial_holds"],
            "starved": starved,
        },
        t_start,
        load_before,
        load_after,
        (),
    )


if __name__ == "__main__":
    main()
