"""What a %%distribute run costs next to `horovodrun`, for the same small Keras job.

    (a) `horovodrun -np 2 --gloo python script.py`   the whole command, wall clock (what a user pays today per run)
    (b) `%%distribute -n 2`, cold                      no cluster yet: engines start and import TensorFlow
    (c) `%%distribute -n 2`, warm                      engines up, TensorFlow imported, data already on the engines

(b) and (c) run through `jupyter_dl.distribute(code, n=2, namespace=...)`, which is what the cell magic calls, in a
fresh Python process per cold run (so no cluster exists when (b) starts); (c) runs in that same process right after
(b). Prints seconds and the ratios b/a and c/a (target: c/a <= 0.3) and writes them to bench/results/overhead.json.

    .venv/bin/python bench/overhead.py [--repeats 3] [--cold-runs 2]
"""

import argparse
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
RESULTS = HERE / "results" / "overhead.json"
TARGET = 0.3
MARK = "BENCH_RESULT "

# The job: an unchanged single-process Keras cell (x_train, y_train come from the notebook).
CELL = """\
import keras
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)
"""

# The same job written for horovodrun by hand: what a user has to write and run today.
SCRIPT = (
    '''\
import json, time
t0 = time.perf_counter()
import horovod.tensorflow as hvd
import keras
from sklearn.datasets import load_digits

hvd.init()
t_import = time.perf_counter() - t0
x, y = load_digits(return_X_y=True)
x, y = (x / 16.0).astype("float32"), y.astype("int32")
per_rank = len(x) // hvd.size()
x_train = x[hvd.rank()::hvd.size()][:per_rank]
y_train = y[hvd.rank()::hvd.size()][:per_rank]


class AveragingAdam(keras.optimizers.Adam):
    def apply(self, grads, trainable_variables=None):
        grads = hvd.grouped_allreduce(list(grads), op=hvd.Average)
        return super().apply(grads, trainable_variables)


model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=AveragingAdam(), loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              jit_compile=False)
for i, v in enumerate(model.variables):
    v.assign(hvd.broadcast(v.value, 0, name=f"b{i}"))
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)
print("'''
    + MARK
    + """" + json.dumps({"rank": hvd.rank(), "import_s": t_import,
                                       "total_s": time.perf_counter() - t0,
                                       "accuracy": float(history.history["accuracy"][-1])}), flush=True)
"""
)


def load_data():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype("float32"), y.astype("int32")


# ------------------------------------------------------------------------------------------------- (a) horovodrun
def run_horovodrun(workdir: Path, timeout: float) -> dict:
    script = workdir / "keras_digits_hvd.py"
    script.write_text(SCRIPT)
    horovodrun = Path(sys.executable).parent / "horovodrun"
    cmd = [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    ranks = [json.loads(line.split(MARK, 1)[1]) for line in proc.stdout.splitlines() if MARK in line]
    if proc.returncode != 0 or len(ranks) != 2:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"horovodrun failed (rc={proc.returncode}, {len(ranks)} of 2 ranks reported): {' '.join(cmd)}")
    ranks.sort(key=lambda r: r["rank"])
    return {"wall_s": wall, "ranks": ranks}


# ---------------------------------------------------------------------------------- (b), (c) jupyter_dl, in a worker
def worker(out: Path, warm_runs: int):
    """One fresh process: a cold run (cluster starts), then warm runs. Writes its timings as JSON to `out`."""
    x_train, y_train = load_data()
    import jupyter_dl

    def one(namespace):
        t0 = time.perf_counter()
        res = jupyter_dl.distribute(CELL, n=2, namespace=namespace)
        wall = time.perf_counter() - t0
        timings = dict(res.job.timings)
        return {
            "wall_s": wall,
            "accuracy": float(namespace["history"].history["accuracy"][-1]),
            "cluster_s": timings.get("cluster_s"),
            "ship_s": timings.get("ship_s"),
            "run_s": timings.get("run_s"),
            "shipped": timings.get("shipped"),
            "rank_run_s": [r.get("run_s") for r in timings.get("ranks") or [] if r],
            "rank_init_s": [r.get("init_s") for r in timings.get("ranks") or [] if r],
        }

    report = {}
    try:
        report["cold"] = one({"x_train": x_train, "y_train": y_train})
        # Warm: the identical job (a fresh namespace holding the same arrays, which the engines already have).
        report["warm"] = [one({"x_train": x_train, "y_train": y_train}) for _ in range(warm_runs)]
        # Re-running the cell in the namespace the previous run filled (model, history, keras are bound there now).
        ns = {"x_train": x_train, "y_train": y_train}
        one(ns)
        report["rerun"] = one(ns)
    finally:
        t0 = time.perf_counter()
        jupyter_dl.shutdown()
        report["shutdown_s"] = time.perf_counter() - t0
        out.write_text(json.dumps(report))


def run_worker(workdir: Path, index: int, warm_runs: int, timeout: float) -> dict:
    out = workdir / f"worker-{index}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(out), "--warm-runs", str(warm_runs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not out.exists():
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"jupyter_dl worker failed (rc={proc.returncode})")
    return json.loads(out.read_text())


# --------------------------------------------------------------------------------------------------------- main
def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="horovodrun runs, and warm runs per worker (default 3)")
    parser.add_argument("--cold-runs", type=int, default=2, help="fresh processes, one cold run each (default 2)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds allowed for one command (default 180)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--warm-runs", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.warm_runs)

    t_start = time.perf_counter()
    load_before = [_common.load_before()]
    with tempfile.TemporaryDirectory(prefix="jdl-bench-") as tmp:
        workdir = Path(tmp)
        a_runs, workers = [], []
        for i in range(max(args.repeats, args.cold_runs)):  # interleaved, so drift hits both sides alike
            if i < args.repeats:
                a_runs.append(run_horovodrun(workdir, args.timeout))
                print(f"  (a) horovodrun run {i + 1}: {a_runs[-1]['wall_s']:.2f} s", flush=True)
            if i < args.cold_runs:
                workers.append(run_worker(workdir, i, args.repeats, args.timeout))
                w = workers[-1]
                print(
                    f"  (b) cold run {i + 1}: {w['cold']['wall_s']:.2f} s;  (c) warm: "
                    + ", ".join(f"{r['wall_s']:.2f}" for r in w["warm"])
                    + " s",
                    flush=True,
                )

    med = statistics.median
    a = med(r["wall_s"] for r in a_runs)
    b = med(w["cold"]["wall_s"] for w in workers)
    warm = [r for w in workers for r in w["warm"]]
    c = med(r["wall_s"] for r in warm)
    rerun = med(w["rerun"]["wall_s"] for w in workers)
    a_rank = med(max(r["total_s"] for r in run["ranks"]) for run in a_runs)
    accuracies = (
        [r["accuracy"] for run in a_runs for r in run["ranks"]]
        + [w["cold"]["accuracy"] for w in workers]
        + [r["accuracy"] for r in warm]
    )

    rows = [
        ("(a) horovodrun -np 2 (script)", a, f"median of {len(a_runs)}"),
        ("(b) %%distribute -n 2, cold", b, f"median of {len(workers)}, cluster start included"),
        ("(c) %%distribute -n 2, warm", c, f"median of {len(warm)}"),
        ("    warm, re-run in same namespace", rerun, f"median of {len(workers)}"),
    ]
    print()
    print(f"{'run':36s} {'seconds':>8s}  notes")
    for label, secs, note in rows:
        print(f"{label:36s} {secs:8.2f}  {note}")
    print(f"{'b/a':36s} {b / a:8.2f}")
    print(f"{'c/a':36s} {c / a:8.2f}  target <= {TARGET}: {'MET' if c / a <= TARGET else 'NOT MET'}")
    print(f"\nwithin (a): slowest rank's own time (python start to fit end) {a_rank:.2f} s of {a:.2f} s")
    if all(r["rank_run_s"] and r["cluster_s"] is not None and r["ship_s"] is not None for r in warm):
        c_rank = med(max(r["rank_run_s"]) for r in warm)
        print(
            f"within (c): slowest rank's cell time {c_rank:.2f} s of {c:.2f} s; median cluster "
            f"{med(r['cluster_s'] for r in warm):.3f} s, ship {med(r['ship_s'] for r in warm):.3f} s, "
            f"run {med(r['run_s'] for r in warm):.2f} s"
        )
    print(f"final training accuracy over all runs: {min(accuracies):.3f} .. {max(accuracies):.3f}")
    load_after = [_common.print_load(load_before[0])]

    _common.write_results(
        RESULTS,
        {
            "a_horovodrun_s": a,
            "b_cold_s": b,
            "c_warm_s": c,
            "warm_rerun_same_namespace_s": rerun,
            "b_over_a": b / a,
            "c_over_a": c / a,
            "target_c_over_a": TARGET,
            "target_met": c / a <= TARGET,
            "runs": {"a": a_runs, "workers": workers},
        },
        t_start,
        load_before,
        load_after,
        ("tensorflow", "keras", "horovod", "ipyparallel", "jupyter_dl"),
    )


if __name__ == "__main__":
    main()
