"""What `hvd.init` costs a warm cell (issue 28): two ranks initialise Horovod over gloo through a job's rendezvous
server, over and over, alternating between Horovod's own request handler (a missing key: "not found" at once, the
rank sleeps 10 ms and asks again) and jupyter-dl's (the server answers when the key lands), in one run so both see
the same load. Prints the median and p90 of init, first allreduce and shutdown for each, and the ratio.

    .venv/bin/python bench/horovod_init.py [--rounds 20]
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import finish, load_before  # noqa: E402


def rank_loop(connection):
    """One rank: for each environment it is sent, init, one allreduce, shutdown; sends back the three durations."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    tf.constant(0.0) + 1.0
    while (environment := connection.recv()) is not None:
        os.environ.update(environment)
        t0 = time.perf_counter()
        hvd.init()
        t1 = time.perf_counter()
        hvd.allreduce(tf.constant(1.0), name="bench")
        t2 = time.perf_counter()
        hvd.shutdown()
        connection.send((t1 - t0, t2 - t1, time.perf_counter() - t2))


def one_job(pipes, handler):
    """A job's rendezvous as the kernel makes it, with `handler` answering the ranks (None: Horovod's own)."""
    import horovod.runner.http.http_server as http_server

    from jupyter_dl.backends import horovod as backend

    start = http_server.RendezvousServer.start
    if handler is None:  # the rendezvous as it was before: Horovod's handler
        http_server.RendezvousServer.start = lambda server, handler_cls=None: start(server)
    try:
        rendezvous = backend.Rendezvous(["localhost", "localhost"], 30)
    finally:
        http_server.RendezvousServer.start = start
    for (kernel_end, _), environment in zip(pipes, rendezvous.environments("127.0.0.1", ["lo", "lo"])):
        kernel_end.send(environment)
    results = [kernel_end.recv() for kernel_end, _ in pipes]
    rendezvous.stop()
    return max(r[0] for r in results), max(r[1] for r in results), max(r[2] for r in results)


def summary(samples):
    ordered = sorted(samples)
    return {"median_s": statistics.median(ordered), "p90_s": ordered[int(0.9 * (len(ordered) - 1))]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    before = load_before()
    t_start = time.perf_counter()
    from jupyter_dl.backends.horovod_rendezvous import WaitingRendezvousHandler

    multiprocessing.set_start_method("spawn")
    pipes = [multiprocessing.Pipe() for _ in range(2)]
    ranks = [multiprocessing.Process(target=rank_loop, args=(rank_end,)) for _, rank_end in pipes]
    for rank in ranks:
        rank.start()
    handlers = {"horovod's handler": None, "waiting handler": WaitingRendezvousHandler}
    times: dict = {name: [] for name in handlers}
    for handler in handlers.values():  # warm-up: imports, the first gloo device
        one_job(pipes, handler)
    for _ in range(args.rounds):
        for name, handler in handlers.items():
            times[name].append(one_job(pipes, handler))
    for kernel_end, _ in pipes:
        kernel_end.send(None)
    for rank in ranks:
        rank.join()

    results = {}
    print(f"{'':20s} {'init median':>12s} {'p90':>8s} {'allreduce':>10s} {'shutdown':>9s}   ({args.rounds} jobs each)")
    for name, samples in times.items():
        init, first, down = (summary([s[i] for s in samples]) for i in range(3))
        results[name] = {"init": init, "first_allreduce": first, "shutdown": down}
        print(
            f"{name:20s} {init['median_s'] * 1e3:9.1f} ms {init['p90_s'] * 1e3:5.1f} ms "
            f"{first['median_s'] * 1e3:7.1f} ms {down['median_s'] * 1e3:6.1f} ms"
        )
    ratio = results["waiting handler"]["init"]["median_s"] / results["horovod's handler"]["init"]["median_s"]
    results["init_ratio"] = ratio
    print(f"hvd.init with the waiting handler / with Horovod's: {ratio:.2f}")
    finish(__file__, results, t_start, before)


if __name__ == "__main__":
    main()
