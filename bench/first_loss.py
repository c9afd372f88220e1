"""Time to the first loss point of a warm `%%distribute -n 2` cell against the same cell's first step in one process
(issue 28: at most 1.3x).

Both sides run the same training cell on a warm process (TensorFlow imported, one run of the cell done before the
clock), so what each repeat pays is building the model and tracing the train function, which no distributed run can
skip. The one-process run is timed in this process, from the start of the cell to the end of its first batch (a
Keras callback). The distributed run goes through the job runner as `%%distribute` does, on a warm local cluster,
and is timed from the start of the cell to:
  - "rank 0 first step": the end of rank 0's first batch, by rank 0's own clock (the engines run on this machine);
  - "first loss point":  the kernel holding that batch's loss (what the cell's live plot draws next).

    .venv/bin/python bench/first_loss.py [--repeats 7] [--backends horovod,tf]
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import finish, load_before  # noqa: E402

DATA = """
import numpy as np
import keras
rng = np.random.default_rng(0)
x_train = rng.normal(size=(4096, 64)).astype("float32")
y_train = (x_train[:, :10].argmax(axis=1)).astype("int64")
"""
# A small MLP of the quickstart's size: its first step is mostly building the model and tracing the train function.
CELL = """
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=64, epochs=1, verbose=0{callbacks})
"""


def one_process_first_step(namespace):
    """Seconds from the start of the cell to the end of its first batch, run here."""
    import keras

    class FirstBatch(keras.callbacks.Callback):
        end = None

        def on_train_batch_end(self, batch, logs=None):
            if FirstBatch.end is None:
                FirstBatch.end = time.time()

    namespace = {**namespace, "FirstBatch": FirstBatch}
    t0 = time.time()
    exec(CELL.format(callbacks=", callbacks=[FirstBatch()]"), namespace)
    return FirstBatch.end - t0


class FirstLoss:
    """A job observer that notes when the kernel first holds a batch's loss, and rank 0's clock for that batch."""

    def __init__(self):
        self.seen = self.rank_t = None
        self.phases = []  # (time, what the runner said it waits on)

    def status(self, text):
        self.phases.append((time.time(), text))

    def started(self, job):
        pass

    def update(self, state, force=False):
        if self.seen is None and state.global_step >= 1:
            self.seen = time.time()
            self.rank_t = min(state.take_undrawn())  # engine times of the batches in so far

    def finished(self, job, state):
        pass


def distributed_first_loss(session, namespace, backend):
    from jupyter_dl.kernel.job.work import CellWork
    from jupyter_dl.kernel.options import options_from_python

    options = options_from_python({"n": 2, "backend": backend, "plot": False})
    observer = FirstLoss()
    t0 = time.time()
    result = session.runner.run(CellWork(CELL.format(callbacks=""), dict(namespace)), options, observers=[observer])
    assert result.job.state == "succeeded", result.job.state
    if os.environ.get("FIRST_LOSS_PHASES"):
        for t, text in observer.phases:
            print(f"    {t - t0:7.3f} s  {text}")
    return observer.rank_t - t0, observer.seen - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backends", default="horovod,tf")
    args = parser.parse_args()
    t_start = time.perf_counter()
    before = load_before()
    from jupyter_dl.kernel import api

    namespace: dict = {}
    exec(DATA, namespace)
    session = api.session()
    results: dict = {}
    try:
        session.cluster.start(2)
        one_process_first_step(namespace)  # warm: the first run here imports and initialises Keras' pieces
        for backend in args.backends.split(","):
            distributed_first_loss(session, namespace, backend)  # warm: the backend's group forms
            rows = {"one_process": [], "rank0_first_step": [], "first_loss_point": []}
            # Interleaved so a slow stretch of the machine hits both sides alike.
            for _ in range(args.repeats):
                rows["one_process"].append(one_process_first_step(namespace))
                rank_t, seen = distributed_first_loss(session, namespace, backend)
                rows["rank0_first_step"].append(rank_t)
                rows["first_loss_point"].append(seen)
            medians = {name: statistics.median(values) for name, values in rows.items()}
            results[backend] = {"runs": rows, "median_s": medians}
            base = medians["one_process"]
            print(
                f"{backend:8}: one process first step {base:.3f} s; %%distribute -n 2: rank 0 first step "
                f"{medians['rank0_first_step']:.3f} s ({medians['rank0_first_step'] / base:.2f}x), first loss point "
                f"in the kernel {medians['first_loss_point']:.3f} s ({medians['first_loss_point'] / base:.2f}x; "
                f"target <= 1.3x), medians of {args.repeats}",
                flush=True,
            )
    finally:
        session.cluster.stop()
    finish(__file__, results, t_start, before)


if __name__ == "__main__":
    main()
