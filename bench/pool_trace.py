"""Replay a multi-user job trace through the gang pool with simulated GPUs (target: >= 90% allocation).

A seeded trace: users submit jobs of 1, 2, 4 or 8 GPUs (mostly small, some whole-host), with log-normal durations,
arriving as a Poisson process offering 95% of the pool by default: busy, with queues forming in bursts.
A discrete-event simulation drives the pool's own scheduler with a fake clock. Prints GPU allocation
(allocated GPU-time over pool GPU-time while
any job waits, and over the whole run), mean and p95 queue wait, mean job completion time (arrival to end),
partial holds (must be 0), and starved jobs (waited more than --starved-after, or never started).

With --elastic-share S (issue 27) the same trace runs twice: as is, and with a share S of its jobs (drawn with
their own seed, so the trace is unchanged) elastic: a job of N GPUs becomes MIN:MAX = max(1, N/2):min(2N, quota),
with the same work, N x its duration in GPU-seconds, and a linear speed-up (at k GPUs it advances k GPU-seconds a
second). The pool asks it back GPUs; it answers at its next commit point, --commit-s later, and every change of its
GPU count (growing or shrinking) costs --change-cost seconds with no progress on any of its GPUs (the new group
forms and rank 0's state is broadcast). Both cost figures are assumptions, not measurements: see the note.

    .venv/bin/python bench/pool_trace.py [--jobs 2000] [--hosts 4] [--gpus-per-host 8] [--load 0.95]
                                         [--elastic-share 0.5 --change-cost 5 --commit-s 2]
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


def make_elastic(trace, share, seed, cap):
    """The same jobs, a share of them elastic (a separate generator: arrivals, sizes and durations are unchanged)."""
    rng = np.random.default_rng(seed + 1)
    picked = rng.random(len(trace)) < share
    return [
        {**job, "min": max(1, job["gpus"] // 2), "max": min(2 * job["gpus"], cap)} if elastic else dict(job)
        for job, elastic in zip(trace, picked)
    ]


class Progress:
    """An elastic job's work left (GPU-seconds), done at `rate` GPUs a second except while a change pauses it."""

    def __init__(self, work, rate, now):
        self.left, self.rate, self.paused_until, self.last = work, rate, now, now

    def advance(self, now):
        start = max(self.last, self.paused_until)
        if now > start:
            self.left = max(0.0, self.left - self.rate * (now - start))
        self.last = now

    def change(self, rate, now, cost):
        """The new size, after `cost` seconds without progress; returns the GPU-seconds that pause holds idle."""
        self.advance(now)
        paused_from = max(self.paused_until, now)
        self.rate, self.paused_until = rate, paused_from + cost
        return rate * cost

    def finish_at(self, now):
        return max(now, self.paused_until) + self.left / self.rate


def simulate(trace, hosts, per_host, reserve_after, max_gpus, change_cost=5.0, commit_s=2.0):
    clock = Clock()
    pool = GangPool(
        {f"h{h}": list(range(per_host)) for h in range(hosts)},
        clock=clock,
        default_quota=Quota(max_gpus=max_gpus),
        reserve_after=reserve_after,
        shrink_grace=float("inf"),  # every simulated job answers its requests
    )
    capacity = hosts * per_host
    events = [(job["t"], 0, i, "arrive", 0) for i, job in enumerate(trace)]
    heapq.heapify(events)
    tickets, started, waits, ended = {}, {}, {}, {}
    progress, version, answering = {}, {}, set()
    running: set = set()  # jobs submitted and not ended
    partial = changes = 0
    lost = 0.0  # GPU-seconds held but idle while elastic jobs change size
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

    def plan_finish(i):
        version[i] = version.get(i, 0) + 1
        heapq.heappush(events, (progress[i].finish_at(clock.now), 1, i, "finish", version[i]))

    def follow_pool():
        """Start what was granted, follow elastic jobs' GPU counts, and answer shrink requests at a commit point."""
        nonlocal changes, lost
        for i in list(running):
            ticket, job = tickets[i], trace[i]
            if ticket.state != "granted":
                continue
            if i not in started:
                started[i] = clock.now
                waits[i] = clock.now - job["t"]
                if job.get("min") is None:  # a fixed job: exactly as before
                    heapq.heappush(events, (clock.now + job["duration"], 1, i, "finish", 0))
                    continue
                progress[i] = Progress(job["gpus"] * job["duration"], ticket.held, clock.now)
                plan_finish(i)
            elif i in progress and ticket.held != progress[i].rate:
                lost += progress[i].change(ticket.held, clock.now, change_cost)
                changes += 1
                plan_finish(i)
            if ticket.shrink_to is not None and i not in answering:
                answering.add(i)
                heapq.heappush(events, (clock.now + commit_s, 2, i, "resize", 0))

    while events:
        t, _, i, kind, seen = heapq.heappop(events)
        if kind == "finish" and seen != version.get(i, 0):
            continue  # planned before its GPU count changed
        account(t)
        clock.now = t
        job = trace[i]
        if kind == "arrive":
            if job.get("min") is None:
                tickets[i] = pool.submit(job["user"], job["gpus"], priority=job["priority"])
            else:
                tickets[i] = pool.submit(job["user"], job["max"], priority=job["priority"], min_gpus=job["min"])
            running.add(i)
        elif kind == "resize":
            answering.discard(i)
            ticket = tickets[i]
            if ticket.state == "granted" and ticket.shrink_to is not None:  # a request may have been withdrawn
                pool.resize(ticket.id, job["user"], ticket.devices[: ticket.shrink_to])
        else:
            pool.release(tickets[i].id, job["user"])
            running.discard(i)
            ended[i] = t
        partial += len(pool.partial_holds())
        follow_pool()
    end = clock.now
    return {
        "waits": [waits.get(i) for i in range(len(trace))],
        "completions": [ended[i] - trace[i]["t"] for i in sorted(ended)],
        "partial_holds": partial,
        "changes": changes,
        "change_idle_share": lost / (capacity * end) if end else 0.0,
        "allocation_while_queued": allocated_while_queued / (capacity * queued_time) if queued_time else None,
        "allocation_overall": allocated_total / (capacity * end) if end else None,
        "queued_fraction": queued_time / end if end else None,
        "makespan_s": end,
    }


def summarize(trace, result, starved_after):
    waits = [w for w in result["waits"] if w is not None]
    never = sum(w is None for w in result["waits"])
    by_size: dict = {}
    by_kind: dict = {}
    for job, wait in zip(trace, result["waits"]):
        if wait is not None:
            by_size.setdefault(job["gpus"], []).append(wait)
            by_kind.setdefault("elastic" if job.get("min") else "fixed", []).append(wait)
    return {
        "allocation_while_queued": result["allocation_while_queued"],
        "allocation_overall": result["allocation_overall"],
        "queued_fraction": result["queued_fraction"],
        "mean_wait_s": statistics.mean(waits),
        "p95_wait_s": statistics.quantiles(waits, n=20)[18] if len(waits) >= 20 else max(waits),
        "mean_completion_s": statistics.mean(result["completions"]),
        "mean_wait_by_size_s": {s: statistics.mean(w) for s, w in sorted(by_size.items())},
        "partial_holds": result["partial_holds"],
        "starved": never + sum(w > starved_after for w in waits),
        "membership_changes": result["changes"],
        "change_idle_share": result["change_idle_share"],
        "mean_wait_by_kind_s": {k: statistics.mean(w) for k, w in sorted(by_kind.items())},
        "makespan_s": result["makespan_s"],
    }


def report(title, r, starved_after):
    print(f"-- {title}: simulated {r['makespan_s'] / 3600:.1f} h")
    print(
        f"GPU allocation while jobs wait: {r['allocation_while_queued']:.1%}   "
        f"(whole run: {r['allocation_overall']:.1%}; a queue existed {r['queued_fraction']:.0%} of the time)"
    )
    print(
        f"queue wait: mean {r['mean_wait_s'] / 60:.1f} min, p95 {r['p95_wait_s'] / 60:.1f} min; "
        + ", ".join(f"{s}-GPU jobs mean {w / 60:.1f} min" for s, w in r["mean_wait_by_size_s"].items())
    )
    print(f"job completion time (arrival to end): mean {r['mean_completion_s'] / 60:.1f} min")
    print(
        f"partial holds: {r['partial_holds']}   starved jobs (waited > {starved_after / 3600:.0f} h or "
        f"never started): {r['starved']}"
    )
    if r["membership_changes"]:
        kinds = ", ".join(f"{k} jobs {w / 60:.1f} min" for k, w in r["mean_wait_by_kind_s"].items())
        print(
            f"membership changes: {r['membership_changes']}, holding {r['change_idle_share']:.2%} of the pool's "
            f"GPU-time idle (counted as allocated above); mean wait of {kinds}"
        )


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
    parser.add_argument(
        "--elastic-share", type=float, default=0.0, help="share of the jobs made elastic in a second run (0: none)"
    )
    parser.add_argument("--change-cost", type=float, default=5.0, help="seconds without progress per size change")
    parser.add_argument("--commit-s", type=float, default=2.0, help="seconds to an elastic job's next commit point")
    args = parser.parse_args()
    load_before = _common.load_before()
    t_start = time.perf_counter()
    capacity = args.hosts * args.gpus_per_host
    trace = make_trace(args.jobs, args.users, capacity, args.load, args.seed)
    print(
        f"{args.jobs} jobs from {args.users} users on {args.hosts} x {args.gpus_per_host} simulated GPUs, "
        f"offered load {args.load:.0%}"
    )
    fixed = summarize(
        trace, simulate(trace, args.hosts, args.gpus_per_host, args.reserve_after, args.max_gpus), args.starved_after
    )
    report("fixed-size jobs", fixed, args.starved_after)
    met = fixed["allocation_while_queued"] >= 0.9 and fixed["partial_holds"] == 0
    print(f"target: >= 90% allocation, 0 partial holds -> {'MET' if met else 'MISSED'}")
    results = {"args": vars(args), **fixed}
    if args.elastic_share:
        mixed = make_elastic(trace, args.elastic_share, args.seed, args.max_gpus)
        run = simulate(
            mixed, args.hosts, args.gpus_per_host, args.reserve_after, args.max_gpus, args.change_cost, args.commit_s
        )
        elastic = summarize(mixed, run, args.starved_after)
        count = sum(job.get("min") is not None for job in mixed)
        report(
            f"{count} of {args.jobs} jobs elastic ({args.elastic_share:.0%} drawn), "
            f"change cost {args.change_cost:g} s, commit every {args.commit_s:g} s",
            elastic,
            args.starved_after,
        )
        cut = 1 - elastic["mean_wait_s"] / fixed["mean_wait_s"]
        met = elastic["allocation_while_queued"] >= 0.97 and cut >= 0.30 and elastic["partial_holds"] == 0
        print(
            f"issue 27 targets: >= 97% allocation while jobs wait ({elastic['allocation_while_queued']:.1%}), "
            f"mean wait -30% ({-cut:+.0%}), 0 partial holds -> {'MET' if met else 'MISSED'}"
        )
        results["elastic"] = {"jobs": count, **elastic}
    print(f"(replayed in {time.perf_counter() - t_start:.1f} s)")
    load_after = _common.print_load(load_before)
    _common.write_results(HERE / "results" / "pool_trace.json", results, t_start, load_before, load_after, ())


if __name__ == "__main__":
    main()
