"""Mixed-speed ranks: samples/s with --balance on against the even split and against the ideal.

Two real ranks train the same model; a layer adds "device time" to each step in proportion to the rank's batch
(a sleep of `--per-sample-ms` per sample, doubled on rank 1), so rank 1 runs at half speed, as a slower GPU would.
Ideal is the sum of the two ranks' own throughputs, each measured alone (-n 1 with that rank's speed). Target:
balanced within 5% of ideal.

    .venv/bin/python bench/balance.py [--per-sample-ms 0.5] [--epochs 2]
"""

import argparse
import os
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _common  # noqa: E402
from device_time import DEVICE_TIME_LAYER  # noqa: E402

CELL = (
    DEVICE_TIME_LAYER
    + """
import horovod.tensorflow as hvd

slow = SLOW_FACTOR if hvd.rank() == SLOW_RANK else 1.0
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((32,)), DeviceTime(PER_SAMPLE * slow),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")])
model.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
model.fit(x, y, batch_size=64, epochs=EPOCHS, verbose=0)
del model  # its DeviceTime layer exists only on the engines
"""
)


def throughput(result):
    from jupyter_dl.live.summary import summarize

    return summarize(result.job, result.state)["samples_per_s"]


def run(n, slow_rank, slow_factor, balance, args, data):
    import jupyter_dl

    code = (
        CELL.replace("SLOW_FACTOR", str(slow_factor))
        .replace("SLOW_RANK", str(slow_rank))
        .replace("PER_SAMPLE", str(args.per_sample_ms / 1000))
        .replace("EPOCHS", str(args.epochs))
    )
    result = jupyter_dl.distribute(code, n=n, namespace=dict(data), balance=balance, plot=False)
    return throughput(result)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-sample-ms", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8192)
    args = parser.parse_args()
    from jupyter_dl.kernel import api

    load_before = _common.load_before()
    t_start = time.perf_counter()
    rng = np.random.default_rng(0)
    data = {
        "x": rng.normal(size=(args.samples, 32)).astype("float32"),
        "y": rng.integers(0, 10, args.samples).astype("int64"),
    }
    api.session().cluster.start(n=2)
    run(2, 1, 2.0, "off", args, data)  # warm-up: engines import TensorFlow, data travels once
    fast_alone = run(1, 1, 2.0, "off", args, data)  # -n 1 runs as rank 0: full speed
    slow_alone = run(1, 0, 2.0, "off", args, data)  # rank 0 slowed: the half-speed device alone
    even = run(2, 1, 2.0, "off", args, data)
    balanced = run(2, 1, 2.0, "on", args, data)
    # What two ranks of the same speed reach against twice one alone: the per-step allreduce and the two ranks
    # sharing this machine's cores, which no split of the batch can win back.
    same_speed = run(2, 1, 1.0, "off", args, data)
    ideal = fast_alone + slow_alone
    print(
        f"fast rank alone {fast_alone:8.0f} samples/s, slow rank alone {slow_alone:8.0f} samples/s, ideal {ideal:8.0f}"
    )
    print(f"even split      {even:8.0f} samples/s = {even / ideal:6.1%} of ideal")
    print(
        f"balanced split  {balanced:8.0f} samples/s = {balanced / ideal:6.1%} of ideal "
        f"({balanced / even:.2f}x the even split)"
    )
    print(
        f"two equal-speed ranks {same_speed:8.0f} samples/s = {same_speed / (2 * fast_alone):6.1%} of twice one "
        f"alone (what synchronising costs here); balanced / ideal relative to that: "
        f"{balanced / ideal / (same_speed / (2 * fast_alone)):6.1%}"
    )
    print(f"target: balanced within 5% of ideal -> {'MET' if balanced >= 0.95 * ideal else 'MISSED'}")
    api.shutdown()
    load_after = _common.print_load(load_before)
    _common.write_results(
        HERE / "results" / "balance.json",
        {
            "per_sample_ms": args.per_sample_ms,
            "fast_alone": fast_alone,
            "slow_alone": slow_alone,
            "ideal": ideal,
            "even": even,
            "balanced": balanced,
            "same_speed_pair": same_speed,
        },
        t_start,
        load_before,
        load_after,
        ("horovod", "tensorflow"),
    )


if __name__ == "__main__":
    main()
