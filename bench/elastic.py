"""What a membership change of an elastic job costs, on the 2-rank digits job (real engines, both backends).

- grow: `-n 2:4` on a 2-engine cluster (the job starts the other 2 and grows into them): the time from the commit
  point where the ranks heard the change to the new group's first training step.
- lost rank: `-n 1:2`, rank 1's engine dies (os._exit) at an epoch end: the time from its death to the survivors'
  first training step (the next group: the survivor and whatever engine is free).
Both are read from the engines' own clocks (one host): the cell notes when it heard or died, the job's metrics
stream when the next step ran. Against them, one epoch of the same job on 2 ranks.
- steady: what an elastic job costs while nothing changes (its commits: every epoch end, and about every
  c.JobRunner.elastic_commit_seconds of training inside an epoch over arrays): the median epoch of `-n 1:2` on the
  2 engines against the same cell on a fixed `-n 2`, in the same run (ratio).

    .venv/bin/python bench/elastic.py [--repeats 3] [--backends horovod,tf]
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import load_before, print_load, write_results  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["JUPYTER_DATA_DIR"] = tempfile.mkdtemp(prefix="jdl-bench-elastic-")

CELL = """
import os, time
import keras
from jupyter_dl.runtime import elastic
from jupyter_dl.runtime.job_backend import backend

keras.utils.set_random_seed(1)

class Scenario(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        rank, size = backend().rank_and_size()
        if MODE == "grow" and rank == 0 and epoch == 1 and size == 2:
            while not elastic.pending_change():
                time.sleep(0.01)
            open(NOTE, "w").write(str(time.time()))
        if MODE == "lost_rank" and epoch == 2 and rank == 1 and not os.path.exists(NOTE):
            open(NOTE, "w").write(str(time.time()))
            os._exit(1)

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=keras.optimizers.Adam(0.002), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=6, batch_size=32, verbose=0, callbacks=[Scenario()])
"""


def _digits():
    import numpy as np
    from sklearn.datasets import load_digits

    data = load_digits()
    x, y = (data.data / 16.0).astype("float32"), data.target.astype("int64")
    order = np.random.default_rng(0).permutation(len(x))
    return x[order], y[order]


def _first_step_after(session, job, t):
    """Engine time of the first training step after `t` (a new group's first batch)."""
    steps = [r["t"] for r in session.store.metrics(job.id)[0] if r.get("kind") == "batch" and r["t"] > t]
    return min(steps)


def _epoch_seconds(session, job):
    ends = [r["t"] for r in session.store.metrics(job.id)[0] if r.get("kind") == "epoch" and r.get("rank", 0) == 0]
    return statistics.median(b - a for a, b in zip(ends, ends[1:]))


RANKS = {"grow": (2, 4), "lost_rank": (1, 2), "steady": (1, 2), "fixed": 2}


def one(session, x, y, backend, mode):
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.wire.options import RunOptions

    if session.cluster.client is not None and len(session.cluster.engine_ids()) != 2:
        session.cluster.stop()
    if session.cluster.client is None:
        session.cluster.start(n=2)
    note = tempfile.mktemp(prefix="jdl-elastic-note-")
    namespace = {"x_train": x, "y_train": y, "MODE": mode, "NOTE": note}
    result = session.runner.run(CellWork(CELL, namespace, 2), RunOptions(n=RANKS[mode], backend=backend))
    sizes = [change["n"] for change in result.job.membership]
    if not os.path.exists(note):  # steady, fixed: nothing changed
        return None, sizes, _epoch_seconds(session, result.job)
    heard = float(open(note).read())
    os.unlink(note)
    return _first_step_after(session, result.job, heard) - heard, sizes, _epoch_seconds(session, result.job)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", default="horovod,tf")
    args = parser.parse_args()
    from jupyter_dl.kernel.api import Session

    before, started = load_before(), time.perf_counter()
    x, y = _digits()
    session = Session()
    session.runner.elastic_grow_wait = 600  # grow once, into both engines
    results = {}
    try:
        for backend in args.backends.split(","):
            for kind in ("steady", "fixed"):  # alternated, so that a drift in the machine's speed hits both
                results[f"{backend}/{kind}"] = {"epoch_s": []}
            for _ in range(args.repeats):
                for kind in ("steady", "fixed"):
                    results[f"{backend}/{kind}"]["epoch_s"].append(one(session, x, y, backend, kind)[2])
            steady, fixed = (statistics.median(results[f"{backend}/{k}"]["epoch_s"]) for k in ("steady", "fixed"))
            results[f"{backend}/steady"]["ratio_to_fixed"] = steady / fixed
            print(
                f"{backend:8} steady   : one epoch {steady:.3f}s elastic -n 1:2, {fixed:.3f}s fixed -n 2: "
                f"{steady / fixed:.2f}x (median of {args.repeats} each)",
                flush=True,
            )
            for kind in ("grow", "lost_rank"):
                runs = [one(session, x, y, backend, kind) for _ in range(args.repeats)]
                costs = sorted(cost for cost, _, _ in runs)
                results[f"{backend}/{kind}"] = {
                    "seconds": costs,
                    "median_s": statistics.median(costs),
                    "groups": [sizes for _, sizes, _ in runs],
                    "epoch_s": statistics.median(epoch for _, _, epoch in runs),
                }
                r = results[f"{backend}/{kind}"]
                print(
                    f"{backend:8} {kind:9}: change to first step median {r['median_s']:.2f}s "
                    f"(runs {', '.join(f'{c:.2f}' for c in costs)}; groups {r['groups']}); "
                    f"one epoch of the job {r['epoch_s']:.2f}s",
                    flush=True,
                )
    finally:
        session.cluster.stop()
    after = print_load(before)
    write_results(
        pathlib.Path(__file__).parent / "results" / "elastic.json",
        results,
        started,
        before,
        after,
        ["tensorflow", "horovod", "ipyparallel"],
    )
    print(json.dumps({k: round(v["median_s"], 2) for k, v in results.items() if "median_s" in v}))


if __name__ == "__main__":
    main()
