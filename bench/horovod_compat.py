"""Training throughput of Horovod's own TF2 API on Keras 3 (issue 13), three ways, interleaved on one machine:

    (A) `horovodrun -np 2 --gloo`: a Horovod custom loop (DistributedGradientTape) as a script, with
        `import jupyter_dl.horovod_compat` on top
    (B) the same loop in a `--manual` job: jupyter_dl.distribute(custom_loop, n=2, manual=True)
    (C) the same model in a zero-code job: ordinary single-process `model.fit`, jupyter_dl.distribute(fit_job, n=2)
    (D) the same fit as a Horovod user writes it, under `horovodrun -np 2 --gloo`: `horovod.tensorflow.keras`'s
        DistributedOptimizer and BroadcastGlobalVariablesCallback (with the compat import). C/D is what zero-code
        mode costs against Horovod's own Keras path; C/A also contains what Keras' fit costs against a hand loop.

Samples/s are global (both ranks), timed inside the ranks after a warm-up that includes tracing, so (A)/(D) are
not charged for process start and (B)/(C) not for shipping. Rounds run A B C D A B C D ...; medians and the ratios
B/A, C/A and C/D are printed (target: B/A and C/A >= 0.97) and written to bench/results/horovod_compat.json.

    .venv/bin/python bench/horovod_compat.py [--rounds 3] [--steps 200]
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
RESULTS = HERE / "results" / "horovod_compat.json"
TARGET = 0.97
MARK = "BENCH_RESULT "
FEATURES, HIDDEN, CLASSES, BATCH, WARMUP = 256, 512, 10, 64, 20


def custom_loop(steps, features=FEATURES, hidden=HIDDEN, classes=CLASSES, batch=BATCH, warmup=WARMUP):
    """Horovod's tensorflow2 example loop: DistributedGradientTape, broadcast after the first step."""
    import time

    import horovod.tensorflow as hvd
    import keras
    import numpy as np
    import tensorflow as tf

    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=((warmup + steps) * batch, features)).astype("float32")
    y = rng.integers(0, classes, size=(warmup + steps) * batch)
    batches = [(tf.constant(x[i : i + batch]), tf.constant(y[i : i + batch])) for i in range(0, len(x), batch)]
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(classes),
        ]
    )
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(0.001 * hvd.size())

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    for i, (images, labels) in enumerate(batches[:warmup]):
        training_step(images, labels, i == 0)
    hvd.allreduce(tf.constant(0.0), name="bench.start")  # every rank starts the clock together
    t0 = time.perf_counter()
    for images, labels in batches[warmup:]:
        loss = training_step(images, labels, False)
    float(loss)
    hvd.allreduce(tf.constant(0.0), name="bench.end")
    elapsed = time.perf_counter() - t0
    return {"samples_per_s": steps * batch * hvd.size() / elapsed, "elapsed_s": elapsed}


def fit_job(steps, features=FEATURES, hidden=HIDDEN, classes=CLASSES, batch=BATCH, ranks=2):
    """The same model as an ordinary single-process Keras fit (nothing in it knows about Horovod). Epoch 1 warms
    up (tracing); epoch 2 is timed. The zero-code job shards the arrays, so each rank takes `steps` batches."""
    import time

    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * batch * ranks, features)).astype("float32")
    y = rng.integers(0, classes, size=len(x))
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(classes),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.001), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    times = {}

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            times[epoch] = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times[epoch] = time.perf_counter() - times[epoch]

    model.fit(x, y, batch_size=batch, epochs=2, verbose=0, shuffle=False, callbacks=[EpochClock()])
    return {"samples_per_s": len(x) / times[1], "elapsed_s": times[1]}


def horovod_fit(steps, features=FEATURES, hidden=HIDDEN, classes=CLASSES, batch=BATCH):
    """fit_job's model and data as a Horovod Keras user writes it: each rank its own shard, DistributedOptimizer,
    broadcast callback, learning rate scaled by hand. Epoch 1 warms up; epoch 2 is timed."""
    import time

    import horovod.tensorflow.keras as hvd
    import keras
    import numpy as np

    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * batch * hvd.size(), features)).astype("float32")
    y = rng.integers(0, classes, size=len(x))
    x, y = x[hvd.rank() :: hvd.size()], y[hvd.rank() :: hvd.size()]
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(classes),
        ]
    )
    model.compile(
        optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size())),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    times = {}

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            times[epoch] = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times[epoch] = time.perf_counter() - times[epoch]

    model.fit(
        x,
        y,
        batch_size=batch,
        epochs=2,
        verbose=0,
        shuffle=False,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), EpochClock()],
    )
    return {"samples_per_s": len(x) * hvd.size() / times[1], "elapsed_s": times[1]}


SCRIPT = """\
import jupyter_dl.horovod_compat  # the one line a horovodrun script needs on Keras 3
import json
import horovod.tensorflow as hvd
{source}
result = {function}({steps})
if hvd.rank() == 0:
    print("{mark}" + json.dumps(result), flush=True)
"""


def run_horovodrun(workdir: Path, steps: int, timeout: float, function=custom_loop) -> dict:
    script = workdir / f"{function.__name__}_hvd.py"
    source = inspect.getsource(function)
    for name, value in (
        ("FEATURES", FEATURES),
        ("HIDDEN", HIDDEN),
        ("CLASSES", CLASSES),
        ("BATCH", BATCH),
        ("WARMUP", WARMUP),
    ):
        source = source.replace(f"={name}", f"={value}")
    script.write_text(SCRIPT.format(source=source, steps=steps, mark=MARK, function=function.__name__))
    horovodrun = Path(sys.executable).parent / "horovodrun"
    cmd = [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script)]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    found = [line.split(MARK, 1)[1] for line in proc.stdout.splitlines() if MARK in line]
    if proc.returncode != 0 or not found:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"horovodrun failed (rc={proc.returncode}): {' '.join(cmd)}")
    return json.loads(found[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="A B C rounds (default 3)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per rank and run (default 200)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed for one run (default 300)")
    args = parser.parse_args()

    import jupyter_dl

    t_start = time.perf_counter()
    load_before = _common.load_before()
    runs = {"A": [], "B": [], "C": [], "D": []}
    try:
        with tempfile.TemporaryDirectory(prefix="jdl-bench-") as tmp:
            for i in range(args.rounds):
                runs["A"].append(run_horovodrun(Path(tmp), args.steps, args.timeout))
                runs["B"].append(
                    jupyter_dl.distribute(
                        custom_loop,
                        n=2,
                        args=(args.steps,),
                        manual=True,
                        plot=False,
                        timeout=args.timeout,
                        name="bench-manual",
                    )
                )
                runs["C"].append(
                    jupyter_dl.distribute(
                        fit_job, n=2, args=(args.steps,), plot=False, timeout=args.timeout, name="bench-zero-code"
                    )
                )
                runs["D"].append(run_horovodrun(Path(tmp), args.steps, args.timeout, horovod_fit))
                print(
                    f"  round {i + 1}: "
                    + ", ".join(f"({k}) {v[-1]['samples_per_s']:.0f}" for k, v in runs.items())
                    + " samples/s",
                    flush=True,
                )
    finally:
        jupyter_dl.shutdown()

    med = {k: statistics.median(r["samples_per_s"] for r in v) for k, v in runs.items()}
    ratios = {"B/A": med["B"] / med["A"], "C/A": med["C"] / med["A"], "C/D": med["C"] / med["D"]}
    labels = {
        "A": "(A) horovodrun -np 2, custom loop",
        "B": "(B) --manual -n 2, same loop",
        "C": "(C) zero-code -n 2, model.fit",
        "D": "(D) horovodrun -np 2, fit + hvd.keras",
    }
    print(f"\n{'run':40s} {'samples/s':>10s}  (median of {args.rounds})")
    for key, label in labels.items():
        print(f"{label:40s} {med[key]:10.0f}")
    for name, ratio in ratios.items():
        verdict = (
            f"target >= {TARGET}: {'MET' if ratio >= TARGET else 'NOT MET'}"
            if name != "C/D"
            else "(zero-code against Horovod's own Keras fit)"
        )
        print(f"{name:40s} {ratio:10.3f}  {verdict}")
    load_after = _common.print_load(load_before)
    _common.write_results(
        RESULTS,
        {
            "runs": runs,
            "median_samples_per_s": med,
            "ratios": ratios,
            "target": TARGET,
            "model": {
                "features": FEATURES,
                "hidden": HIDDEN,
                "classes": CLASSES,
                "batch_per_rank": BATCH,
                "timed_steps": args.steps,
            },
        },
        t_start,
        load_before,
        load_after,
        ("tensorflow", "keras", "horovod", "ipyparallel"),
    )


if __name__ == "__main__":
    main()
