"""The embedded pool under contention: kernels (processes) of one user taking turns on a host's GPUs.

1. Cost of a request: submit + release through the locked state file (`LocalPool`), against the same two calls on
   the in-memory `GangPool` in this process (the baseline), with a few hundred ended tickets on record.
2. Mutual exclusion: K worker processes each take all the (simulated) GPUs R times (submit, wait for the grant
   polling every 10 ms, hold briefly, release), recording when each grant began and ended. Any two intervals that
   overlap on a GPU would be a double grant (must be 0). Also prints the hand-off time (release to the next grant
   seen) and whether every worker got its turns (no one starved).

    .venv/bin/python bench/local_pool.py [--workers 3] [--rounds 100] [--gpus 2]
"""

import argparse
import multiprocessing
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import _common  # noqa: E402

from jupyter_dl.pool.gang import GangPool  # noqa: E402
from jupyter_dl.pool.local import LocalPool  # noqa: E402


def request_cost(state_file, gpus, cycles):
    pool = LocalPool(simulate_gpus=gpus, state_file=state_file)
    memory = GangPool(pool.inventory)
    start = time.perf_counter()
    for _ in range(cycles):
        ticket = memory.submit("me", 1)
        memory.release(ticket.id, "me")
    in_memory = (time.perf_counter() - start) / cycles
    start = time.perf_counter()
    for _ in range(cycles):
        ticket = pool.submit(1)
        pool.release(ticket["id"])
    locked_file = (time.perf_counter() - start) / cycles
    return in_memory, locked_file


def worker(state_file, gpus, rounds, hold_s, out):
    pool = LocalPool(simulate_gpus=gpus, state_file=state_file)
    spans = []
    for _ in range(rounds):
        ticket = pool.submit(gpus)
        granted = pool.wait_granted(ticket["id"], poll=0.01)
        began = time.time()
        time.sleep(hold_s)
        ended = time.time()
        pool.release(ticket["id"])
        spans.append((began, ended, [tuple(d) for d in granted["devices"]]))
    out.put(spans)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--hold", type=float, default=0.005, help="seconds each grant is held")
    parser.add_argument("--cycles", type=int, default=500)
    args = parser.parse_args()
    load_before = _common.load_before()
    t_start = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="jdl-pool-bench-")

    in_memory, locked_file = request_cost(f"{folder}/cost.json", args.gpus, args.cycles)
    print(
        f"submit + release: in-memory GangPool {in_memory * 1e6:.0f} us, embedded pool (lock, read, write) "
        f"{locked_file * 1e6:.0f} us ({locked_file / in_memory:.0f}x; per job, not per step)"
    )

    state_file = f"{folder}/contended.json"
    out = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=worker, args=(state_file, args.gpus, args.rounds, args.hold, out))
        for _ in range(args.workers)
    ]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    per_worker = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    wall = time.perf_counter() - started
    spans = sorted(span for spans in per_worker for span in spans)
    double_grants = sum(1 for i, a in enumerate(spans) for b in spans[i + 1 :] if b[0] < a[1] and set(a[2]) & set(b[2]))
    handoffs = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    print(
        f"{args.workers} processes x {args.rounds} turns on all {args.gpus} GPUs: {len(spans)} grants in "
        f"{wall:.1f} s; double grants {double_grants} (must be 0); every worker served: "
        f"{all(len(s) == args.rounds for s in per_worker)}"
    )
    print(
        f"hand-off (release to next grant): median {statistics.median(handoffs) * 1e3:.1f} ms, "
        f"p95 {sorted(handoffs)[int(0.95 * len(handoffs))] * 1e3:.1f} ms, max {max(handoffs) * 1e3:.1f} ms "
        f"(waiters poll every 10 ms here; jobs poll every 1 s)"
    )
    load_after = _common.print_load(load_before)
    _common.write_results(
        HERE / "results" / "local_pool.json",
        {
            "in_memory_us": in_memory * 1e6,
            "embedded_us": locked_file * 1e6,
            "ratio": locked_file / in_memory,
            "grants": len(spans),
            "double_grants": double_grants,
            "handoff_median_ms": statistics.median(handoffs) * 1e3,
            "handoff_max_ms": max(handoffs) * 1e3,
            "args": vars(args),
        },
        t_start,
        load_before,
        load_after,
        (),
    )


if __name__ == "__main__":
    main()
