"""Ranks on two hosts: gloo between "hosts" made of network namespaces (tests/support/netns.py), against what the link
itself carries, and the cost of putting a job's ranks on two hosts instead of one.

1. Gloo allreduce bandwidth between a rank in each namespace (bus bandwidth: with 2 ranks, each sends and receives
   the buffer's size once per allreduce) against a plain TCP transfer over the same veths and bridge: ratio.
2. The same small Keras job (digits, zero-code) on 2 hosts x 1 rank against 1 host x 2 ranks: wall time ratio.

Both "hosts" share this machine's CPUs and memory: the figures show what the network path costs, not what two real
machines would gain. Needs root (namespaces).

    .venv/bin/python bench/multi_host.py [--mb 64] [--repeats 5] [--epochs 3]
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _common  # noqa: E402
import netns  # noqa: E402
from netns import HOSTS, KERNEL_ADDRESS  # noqa: E402

TCP_PORT = 5201
# Receives everything sent to it, then answers with the byte count (so the sender's clock covers delivery).
TCP_SINK = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
for _ in range(int(sys.argv[3])):
    connection, _ = server.accept()
    got = 0
    while True:
        chunk = connection.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)
    connection.sendall(str(got).encode())
    connection.close()
"""
TCP_SOURCE = """
import socket, sys, time
size, repeats = int(sys.argv[3]), int(sys.argv[4])
block = b"x" * (1 << 20)
for _ in range(repeats):
    start = time.perf_counter()
    with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as connection:
        for _ in range(size // len(block)):
            connection.sendall(block)
        connection.shutdown(socket.SHUT_WR)
        assert int(connection.recv(64)) == size
    print(time.perf_counter() - start, flush=True)
"""

JOB = """
import keras
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=EPOCHS, batch_size=32, verbose=0)
"""


def tcp_seconds(mb, repeats):
    """Seconds per transfer of `mb` MiB from host a to host b over one TCP connection, each of `repeats` tries."""
    (_, host_a, _, _), (ns_b, host_b, _, address_b) = HOSTS
    sink = subprocess.Popen(
        netns.in_host(ns_b, host_b, [sys.executable, "-c", TCP_SINK, address_b, str(TCP_PORT), str(repeats)]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sink.stdout.readline().strip() == "ready"
        source = netns.sh(
            *netns.in_host(
                HOSTS[0][0],
                host_a,
                [sys.executable, "-c", TCP_SOURCE, address_b, str(TCP_PORT), str(mb << 20), str(repeats)],
            )
        )
        return [float(line) for line in source.stdout.split()]
    finally:
        sink.wait(30)


def tcp_both_ways_seconds(mb, repeats):
    """Seconds until `mb` MiB have gone from host a to host b AND from b to a, both transfers at once (what an
    allreduce of 2 ranks moves: each rank sends and receives the buffer's size), each of `repeats` tries."""
    sinks, sources = [], []
    try:
        for (namespace, hostname, _, address), port in zip(HOSTS[:2], (TCP_PORT + 1, TCP_PORT + 2)):
            sink = subprocess.Popen(
                netns.in_host(namespace, hostname, [sys.executable, "-c", TCP_SINK, address, str(port), str(repeats)]),
                stdout=subprocess.PIPE,
                text=True,
            )
            sinks.append(sink)
            assert sink.stdout.readline().strip() == "ready"
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            sources = [
                subprocess.Popen(
                    netns.in_host(
                        HOSTS[i][0],
                        HOSTS[i][1],
                        [sys.executable, "-c", TCP_SOURCE, HOSTS[1 - i][3], str(port), str(mb << 20), "1"],
                    ),
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for i, port in ((0, TCP_PORT + 2), (1, TCP_PORT + 1))
            ]
            for source in sources:
                source.wait(120)
            times.append(time.perf_counter() - start)  # includes two interpreter starts: an upper bound
            # The sources' own clocks (connect to last byte acknowledged) exclude the start; the slower one counts.
            times[-1] = max(float(source.stdout.read().split()[0]) for source in sources)
        return times
    finally:
        for sink in sinks:
            sink.wait(30)


def reduce_and_copy_seconds(mb, repeats):
    """Seconds for the arithmetic and copies of a 2-rank allreduce of `mb` MiB, in one process: copying the tensor
    into and out of the fusion buffer, and summing the half each rank reduces."""
    import numpy as np

    tensor = np.ones((mb << 20) // 4, dtype=np.float32)
    fusion = np.empty_like(tensor)
    half = tensor.size // 2
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(fusion, tensor)
        np.add(fusion[:half], tensor[half:], out=fusion[:half])
        np.copyto(tensor, fusion)
        times.append(time.perf_counter() - start)
    return times


def allreduce_seconds(mb, repeats):
    """On each rank: seconds per allreduce of an `mb` MiB float32 tensor, after one untimed warm-up."""
    import time

    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf

    tensor = tf.constant(np.ones((mb << 20) // 4, dtype=np.float32))
    hvd.allreduce(tensor, name="bench.warmup").numpy()
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        hvd.allreduce(tensor, name=f"bench.{i}").numpy()
        times.append(time.perf_counter() - start)
    return times


class Namespaces:
    """A controller on the bridge; engines started one at a time in the namespaces; a fresh Session per layout."""

    def __init__(self, workdir):
        import ipyparallel as ipp

        self.logs = open(os.path.join(workdir, "engines.log"), "w")
        self.cluster = ipp.Cluster(
            n=0,
            controller_ip=KERNEL_ADDRESS,
            controller_location=KERNEL_ADDRESS,
            log_level=40,
            cluster_id=f"jdl-bench-multihost-{os.getpid()}",
        )
        self.cluster.start_controller_sync()
        self.engine_file = os.path.join(
            self.cluster.profile_dir, "security", f"ipcontroller-{self.cluster.cluster_id}-engine.json"
        )
        self.client = self.cluster.connect_client_sync()
        self.engines = []

    def add_engine(self, host_index):
        namespace, hostname, *_ = HOSTS[host_index]
        self.engines += netns.start_engines(namespace, hostname, self.engine_file, 1, self.logs)
        netns.wait_for_engines(self.client, len(self.engines), self.engines)

    def session(self):
        from jupyter_dl.kernel.api import Session

        session = Session()
        session.cluster.connect_file(self.cluster.cluster_file)
        return session

    def stop(self):
        for engine in self.engines:
            engine.kill()
            engine.wait(10)
        self.client.close()
        self.cluster.stop_cluster_sync()
        self.logs.close()


def job_seconds(session, data, epochs):
    """Wall seconds of the small job's run on 2 ranks (warm: the second of two runs) and where its ranks ran."""
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.wire.options import RunOptions

    code = JOB.replace("EPOCHS", str(epochs))
    session.runner.run(CellWork(code, dict(data)), RunOptions(n=2, plot=False))  # engines import TF, data travels
    start = time.perf_counter()
    result = session.runner.run(CellWork(code, dict(data)), RunOptions(n=2, plot=False))
    return time.perf_counter() - start, result.job.hosts


def digits():
    import numpy as np
    from sklearn.datasets import load_digits

    data = load_digits()
    order = np.random.default_rng(0).permutation(len(data.data))
    return {"x_train": (data.data[order] / 16.0).astype("float32"), "y_train": data.target[order].astype("int64")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64, help="MiB per allreduce and per TCP transfer")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    if netns.unavailable():
        sys.exit(f"bench/multi_host.py: {netns.unavailable()}")
    load_before = _common.load_before()
    t_start = time.perf_counter()
    netns.make()
    cluster = None
    try:
        tcp = tcp_seconds(args.mb, args.repeats)
        both_ways = tcp_both_ways_seconds(args.mb, args.repeats)
        arithmetic = reduce_and_copy_seconds(args.mb, args.repeats)
        cluster = Namespaces(tempfile.mkdtemp(prefix="jdl-bench-multihost-"))
        cluster.add_engine(0)
        cluster.add_engine(1)  # engine 0 on host a, engine 1 on host b
        session = cluster.session()
        from jupyter_dl.kernel.job.work import FunctionWork
        from jupyter_dl.wire.options import RunOptions

        per_rank = session.runner.run(
            FunctionWork(allreduce_seconds, (args.mb, args.repeats), all_ranks=True), RunOptions(n=2)
        ).results
        allreduce = [max(times) for times in zip(*per_rank)]  # an allreduce ends when its slowest rank has it
        data = digits()
        two_hosts, hosts_2x1 = job_seconds(session, data, args.epochs)
        session.cluster.stop()
        cluster.add_engine(0)  # a second engine on host a: its ranks are placed first, both there
        session = cluster.session()
        one_host, hosts_1x2 = job_seconds(session, data, args.epochs)
        session.cluster.stop()
    finally:
        if cluster is not None:
            cluster.stop()
        netns.teardown()
    assert len(set(hosts_2x1)) == 2 and len(set(hosts_1x2)) == 1, (hosts_2x1, hosts_1x2)
    mib = args.mb
    tcp_best, allreduce_best = min(tcp), min(allreduce)
    tcp_mibps, gloo_mibps = mib / tcp_best, mib / allreduce_best  # gloo: bus bandwidth, 2(n-1)/n = 1 for 2 ranks
    print(f"plain TCP, host a -> host b over the veths: {tcp_mibps:8.0f} MiB/s  (best of {args.repeats} x {mib} MiB)")
    print(
        f"gloo allreduce, 1 rank per host:           {gloo_mibps:8.0f} MiB/s bus bandwidth "
        f"(best of {args.repeats} x {mib} MiB; {allreduce_best * 1000:.0f} ms each)"
    )
    print(f"gloo / TCP: {gloo_mibps / tcp_mibps:.2f}")
    # What caps it on this machine: both directions share the CPUs that move the bytes (veths copy in the kernel), and
    # the allreduce adds its own copies and sums on the same CPUs.
    both_best, arithmetic_best = min(both_ways), min(arithmetic)
    floor = both_best + arithmetic_best
    print(
        f"plain TCP, a -> b and b -> a at once:       {mib / both_best:8.0f} MiB/s each way "
        f"({both_best * 1000:.0f} ms for {mib} MiB each way)"
    )
    print(
        f"the allreduce's copies and sums, one process: {arithmetic_best * 1000:.0f} ms; TCP both ways + these = "
        f"{floor * 1000:.0f} ms, a floor of {mib / floor:.0f} MiB/s"
    )
    print(f"gloo / that floor: {floor / allreduce_best:.2f}")
    print(
        f"small job (digits, {args.epochs} epochs, 2 ranks): 2 hosts x 1 rank {two_hosts:.1f}s, "
        f"1 host x 2 ranks {one_host:.1f}s; 2 hosts / 1 host: {two_hosts / one_host:.2f}"
    )
    load_after = _common.print_load(load_before)
    _common.write_results(
        HERE / "results" / "multi_host.json",
        {
            "mib": mib,
            "repeats": args.repeats,
            "tcp_s": tcp,
            "allreduce_s": allreduce,
            "tcp_mib_per_s": tcp_mibps,
            "gloo_bus_mib_per_s": gloo_mibps,
            "gloo_over_tcp": gloo_mibps / tcp_mibps,
            "tcp_both_ways_s": both_ways,
            "reduce_and_copy_s": arithmetic,
            "gloo_over_floor": floor / allreduce_best,
            "epochs": args.epochs,
            "job_2_hosts_x_1_rank_s": two_hosts,
            "job_1_host_x_2_ranks_s": one_host,
            "two_hosts_over_one_host": two_hosts / one_host,
        },
        t_start,
        load_before,
        load_after,
        ("horovod", "tensorflow", "ipyparallel"),
    )


if __name__ == "__main__":
    main()
