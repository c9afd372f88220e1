"""The two backends side by side: Horovod over gloo (`backend="horovod"`) and TensorFlow's own collective ops
(`backend="tf"`, jupyter_dl/backends/tf_ops.py), on the same machine, interleaved over rounds.

1. Training throughput of one zero-code Keras cell (MobileNetV2, alpha 0.35, on synthetic 64x64 images, 3 epochs,
   batch 32 per rank), three ways:
       (tf)       jupyter_dl.distribute(CELL, n=2, backend="tf"): what `%%distribute -n 2 --backend tf` runs
       (horovod)  the same with backend="horovod"
       (hvdrun)   `horovodrun -np 2 --gloo`: the same model and data written with Horovod's own Keras API
                  (DistributedOptimizer, BroadcastGlobalVariablesCallback; `import jupyter_dl.horovod_compat`)
   Samples/s are global (both ranks) over epochs 2 and 3 (24 steps each at the default 1536 samples), timed inside
   rank 0 by a callback, so no run is charged for process start, tracing (epoch 1) or shipping. Prints tf/horovod,
   tf/hvdrun and horovod/hvdrun.
2. Allreduce bandwidth of a 100 MiB float32 tensor on 2 ranks, in a `manual=True` job per backend: `hvd.allreduce`
   for horovod, `jupyter_dl.backends.tf_ops.allreduce` (on the group the job formed) for tf. One warm-up (which also
   checks the average is right), then 5 timed calls, each after a small allreduce that lines the ranks up; a call's
   time is the slower rank's, the median of 5 is reported as algorithm bandwidth (MiB / s). The tf job also measures
   TensorFlow's default ring subdivision, for what tf_ops' MAX_SUBDIVS_CPU buys.

Each round runs the three fits, each at a different position from round to round (3 rounds: each once first), then
the two allreduce jobs. Per round and median ratios are printed; results go to bench/results/backends.json.

    .venv/bin/python bench/backends.py [--rounds 3] [--samples 1536] [--mib 100]
    .venv/bin/python bench/backends.py --quick      # smoke test: 1 round, 256 samples, 16 MiB
"""

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: E402  (bench/ is the script's own directory)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "backends.json"
MARK = "BENCH_RESULT "
BACKENDS = ("tf", "horovod")
FITS = ["hvdrun", "tf", "horovod"]
BATCH, EPOCHS = 32, 3  # epoch 1 traces and warms up; epochs 2 and 3 are timed

# The zero-code job: an unchanged single-process Keras cell (x_train, y_train come from the notebook). It times its
# epochs itself; rank 0's `epoch_times` and `timed_s` come back into the namespace.
CELL = f"""\
import time
import keras

keras.utils.set_random_seed(0)
model = keras.applications.MobileNetV2(input_shape=(64, 64, 3), weights=None, classes=10, alpha=0.35)
model.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
epoch_times = {{}}
clock = keras.callbacks.LambdaCallback(
    on_epoch_begin=lambda epoch, logs: epoch_times.__setitem__(epoch, time.perf_counter()),
    on_epoch_end=lambda epoch, logs: epoch_times.__setitem__(epoch, time.perf_counter() - epoch_times[epoch]),
)
history = model.fit(x_train, y_train, batch_size={BATCH}, epochs={EPOCHS}, verbose=0, shuffle=False, callbacks=[clock])
timed_s = sum(epoch_times[e] for e in range(1, {EPOCHS}))
del clock
"""


def synthetic_images(samples):
    """Random 64x64 RGB images in [0, 1) and labels 0..9, the same on every call."""
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.random((samples, 64, 64, 3), dtype="float32"), rng.integers(0, 10, samples).astype("int32")


def horovod_fit(samples, batch, epochs):
    """CELL's model and data as a Horovod Keras user writes them for horovodrun: each rank its own shard,
    DistributedOptimizer, the broadcast callback, the learning rate scaled by hand. Epochs after the first are timed."""
    import time

    import horovod.tensorflow.keras as hvd
    import keras

    hvd.init()
    x, y = synthetic_images(samples)
    x, y = x[hvd.rank() :: hvd.size()], y[hvd.rank() :: hvd.size()]
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(64, 64, 3), weights=None, classes=10, alpha=0.35)
    model.compile(
        optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size())),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    times = {}
    clock = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: times.__setitem__(epoch, time.perf_counter()),
        on_epoch_end=lambda epoch, logs: times.__setitem__(epoch, time.perf_counter() - times[epoch]),
    )
    model.fit(
        x,
        y,
        batch_size=batch,
        epochs=epochs,
        verbose=0,
        shuffle=False,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), clock],
    )
    timed_s = sum(times[e] for e in range(1, epochs))
    return {"samples_per_s": len(x) * hvd.size() * (epochs - 1) / timed_s, "timed_s": timed_s}


SCRIPT = """\
import jupyter_dl.horovod_compat  # the one line a horovodrun script needs on Keras 3
import json
import horovod.tensorflow as hvd
{source}
result = horovod_fit({samples}, {batch}, {epochs})
if hvd.rank() == 0:
    print("{mark}" + json.dumps(result), flush=True)
"""


def run_horovodrun(workdir: Path, samples: int, timeout: float) -> dict:
    script = workdir / "backends_fit_hvd.py"
    source = inspect.getsource(synthetic_images) + "\n\n" + inspect.getsource(horovod_fit)
    script.write_text(SCRIPT.format(source=source, samples=samples, batch=BATCH, epochs=EPOCHS, mark=MARK))
    horovodrun = Path(sys.executable).parent / "horovodrun"
    cmd = [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    found = [line.split(MARK, 1)[1] for line in proc.stdout.splitlines() if MARK in line]
    if proc.returncode != 0 or not found:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"horovodrun failed (rc={proc.returncode}): {' '.join(cmd)}")
    return {**json.loads(found[0]), "wall_s": wall}


def run_zero_code(api, backend: str, x, y, timeout: float) -> dict:
    namespace = {"x_train": x, "y_train": y}
    t0 = time.perf_counter()
    api.distribute(
        CELL, n=2, namespace=namespace, backend=backend, plot=False, timeout=timeout, name=f"bench-{backend}"
    )
    wall = time.perf_counter() - t0
    if "timed_s" not in namespace:
        raise SystemExit(f"the backend={backend} fit did not return its epoch times (bound: {sorted(namespace)})")
    timed_s = float(namespace["timed_s"])
    return {"samples_per_s": len(x) * (EPOCHS - 1) / timed_s, "timed_s": timed_s, "wall_s": wall}


# --------------------------------------------------------------------------------------------- allreduce bandwidth
def allreduce_bandwidth(backend, mib, repeats, default_subdivs=False):
    """One rank's part of a `manual=True` job: seconds of each of `repeats` allreduces (average) of `mib` MiB of
    float32, after one warm-up that also checks the result. With `default_subdivs` (tf), the same again with
    TensorFlow's default ring subdivision."""
    import time

    import tensorflow as tf

    if backend == "horovod":
        import horovod.tensorflow as hvd

        hvd.init()
        rank = hvd.rank()

        def reduce(tensor, name):
            return hvd.allreduce(tensor, op=hvd.Average, name=name)

    else:
        from jupyter_dl.backends import tf_ops

        rank = tf_ops.current().rank

        def reduce(tensor, name):  # TensorFlow's collectives match by order: names are not needed
            return tf_ops.allreduce(tensor, "average")

    base = tf.random.stateless_uniform([mib * 2**20 // 4], seed=[1, 2])
    big = base + float(rank)  # ranks differ: the average is base + 0.5 on two ranks

    def measure(label):
        error = float(tf.reduce_max(tf.abs(reduce(big, f"bench.{label}.warm") - (base + 0.5))))
        if error > 1e-4:
            raise RuntimeError(f"{backend} allreduce is wrong: off by {error}")
        seconds = []
        for i in range(repeats):
            float(reduce(tf.constant(0.0), f"bench.{label}.sync.{i}"))  # both ranks start together
            t0 = time.perf_counter()
            out = reduce(big, f"bench.{label}.{i}")
            float(out[0])  # the op is done (without copying 100 MiB out)
            seconds.append(time.perf_counter() - t0)
        return seconds

    result = {"seconds": measure("main")}
    if default_subdivs:
        group = tf_ops.current()
        if hasattr(group, "subdivs"):
            kept, group.subdivs = group.subdivs, -1
            try:
                result["tf_default_subdivs_seconds"] = measure("tfdefault")
            finally:
                group.subdivs = kept
            result["subdivs"] = kept
    return result


def run_bandwidth(api, backend: str, mib: int, repeats: int, timeout: float) -> dict:
    ranks = api.distribute(
        allreduce_bandwidth,
        n=2,
        args=(backend, mib, repeats, backend == "tf"),
        manual=True,
        backend=backend,
        all_ranks=True,
        plot=False,
        timeout=timeout,
        name=f"bench-allreduce-{backend}",
    )

    def summary(key):
        slowest = [max(per_rank) for per_rank in zip(*(r[key] for r in ranks))]  # a call lasts until both are done
        median = statistics.median(slowest)
        return {"seconds": slowest, "median_s": median, "mib_per_s": mib / median}

    out = summary("seconds")
    if all("tf_default_subdivs_seconds" in r for r in ranks):
        out["tf_default_subdivs"] = summary("tf_default_subdivs_seconds")
        out["subdivs"] = ranks[0].get("subdivs")
    return out


# --------------------------------------------------------------------------------------------------------- main
def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--samples", type=int, default=1536, help="training samples over both ranks (default 1536)")
    parser.add_argument("--mib", type=int, default=100, help="allreduce size in MiB (default 100)")
    parser.add_argument("--repeats", type=int, default=5, help="timed allreduces per job (default 5)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed for one run (default 300)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: 1 round, 256 samples, 16 MiB (numbers mean little)"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.samples, args.mib = 1, 256, 16
    if args.samples % (2 * BATCH):
        parser.error(f"--samples must be a multiple of {2 * BATCH} (whole batches of {BATCH} on each of 2 ranks)")

    from jupyter_dl.kernel import api

    t_start = time.perf_counter()
    load_before = _common.load_before()
    x, y = synthetic_images(args.samples)
    fits = {"hvdrun": [], "tf": [], "horovod": []}
    bandwidth = {"tf": [], "horovod": []}
    try:
        t0 = time.perf_counter()
        api.session().cluster.start(n=2)
        print(f"  cluster of 2 engines up in {time.perf_counter() - t0:.1f} s", flush=True)
        with tempfile.TemporaryDirectory(prefix="jdl-bench-") as tmp:
            for i in range(args.rounds):
                # The three fits take turns at each position: in two rounds run in a fixed order, the zero-code fit
                # right after horovodrun was 35-45% slower than the other, whichever backend it was.
                runs = FITS[i % 3 :] + FITS[: i % 3]
                order = [b for b in runs if b in BACKENDS]
                for which in runs:
                    if which == "hvdrun":
                        fits[which].append(run_horovodrun(Path(tmp), args.samples, args.timeout))
                    else:
                        fits[which].append(run_zero_code(api, which, x, y, args.timeout))
                for backend in order:
                    bandwidth[backend].append(run_bandwidth(api, backend, args.mib, args.repeats, args.timeout))
                f = {k: v[-1]["samples_per_s"] for k, v in fits.items()}
                b = {k: v[-1]["mib_per_s"] for k, v in bandwidth.items()}
                print(
                    f"  round {i + 1} ({' then '.join(runs)}): fit samples/s hvdrun {f['hvdrun']:.1f}, "
                    f"tf {f['tf']:.1f}, horovod {f['horovod']:.1f}; tf/horovod {f['tf'] / f['horovod']:.3f}, "
                    f"tf/hvdrun {f['tf'] / f['hvdrun']:.3f}, horovod/hvdrun {f['horovod'] / f['hvdrun']:.3f} | "
                    f"allreduce {args.mib} MiB/s tf {b['tf']:.0f}, horovod {b['horovod']:.0f}, "
                    f"tf/horovod {b['tf'] / b['horovod']:.3f}",
                    flush=True,
                )
    finally:
        api.shutdown()

    med = statistics.median
    fit_median = {k: med(r["samples_per_s"] for r in v) for k, v in fits.items()}
    bw_median = {k: med(r["mib_per_s"] for r in v) for k, v in bandwidth.items()}
    tf_default = [r["tf_default_subdivs"]["mib_per_s"] for r in bandwidth["tf"] if "tf_default_subdivs" in r]
    if tf_default:
        bw_median["tf_default_subdivs"] = med(tf_default)
    ratios = {
        "fit tf/horovod": fit_median["tf"] / fit_median["horovod"],
        "fit tf/hvdrun": fit_median["tf"] / fit_median["hvdrun"],
        "fit horovod/hvdrun": fit_median["horovod"] / fit_median["hvdrun"],
        "allreduce tf/horovod": bw_median["tf"] / bw_median["horovod"],
    }
    if tf_default:
        ratios["allreduce tf/tf_default_subdivs"] = bw_median["tf"] / bw_median["tf_default_subdivs"]
    per_round = [
        {
            "fit tf/horovod": fits["tf"][i]["samples_per_s"] / fits["horovod"][i]["samples_per_s"],
            "fit tf/hvdrun": fits["tf"][i]["samples_per_s"] / fits["hvdrun"][i]["samples_per_s"],
            "fit horovod/hvdrun": fits["horovod"][i]["samples_per_s"] / fits["hvdrun"][i]["samples_per_s"],
            "allreduce tf/horovod": bandwidth["tf"][i]["mib_per_s"] / bandwidth["horovod"][i]["mib_per_s"],
        }
        for i in range(args.rounds)
    ]

    print(
        f"\nmedians of {args.rounds} round(s); fit: {args.samples} samples, epochs 2-{EPOCHS} timed; "
        f"allreduce: {args.mib} MiB"
    )
    print(f"{'':34s} {'tf':>9s} {'horovod':>9s} {'hvdrun':>9s}")
    fm = fit_median
    print(f"{'fit, samples/s (2 ranks)':34s} {fm['tf']:9.1f} {fm['horovod']:9.1f} {fm['hvdrun']:9.1f}")
    print(f"{'allreduce, MiB/s (bytes / time)':34s} {bw_median['tf']:9.0f} {bw_median['horovod']:9.0f} {'-':>9s}")
    if tf_default:
        print(f"{'  tf with TF default subdivs':34s} {bw_median['tf_default_subdivs']:9.0f}")
    print()
    for name, ratio in ratios.items():
        rounds = " ".join(f"{r[name]:.3f}" for r in per_round) if name in per_round[0] else ""
        print(f"{name:34s} {ratio:9.3f}  {'(rounds: ' + rounds + ')' if rounds else ''}")
    load_after = _common.print_load(load_before)
    _common.write_results(
        RESULTS,
        {
            "median_fit_samples_per_s": fit_median,
            "median_allreduce_mib_per_s": bw_median,
            "ratios": ratios,
            "per_round_ratios": per_round,
            "runs": {"fit": fits, "allreduce": bandwidth},
            "settings": {
                "rounds": args.rounds,
                "quick": args.quick,
                "samples": args.samples,
                "batch_per_rank": BATCH,
                "epochs": EPOCHS,
                "model": "MobileNetV2(input_shape=(64, 64, 3), alpha=0.35, classes=10)",
                "allreduce_mib": args.mib,
                "allreduce_repeats": args.repeats,
            },
        },
        t_start,
        load_before,
        load_after,
        ("tensorflow", "keras", "horovod", "ipyparallel", "jupyter_dl"),
    )


if __name__ == "__main__":
    main()
