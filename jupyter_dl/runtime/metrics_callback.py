"""Engine side: the Keras callback that streams a rank's training metrics (see publish.py for how they travel).

Its own module because it imports Keras at the top, which takes seconds: publish.py loads it on first use."""

import math
import time

import keras

from jupyter_dl.runtime import stall_watch
from jupyter_dl.runtime.publish import FLUSH_INTERVAL, engine_publisher


class LiveMetrics(keras.callbacks.Callback):
    """Streams rank 0's batch and epoch metrics and every rank's throughput to the notebook's live view; add it to
    `fit(callbacks=...)` yourself in `--manual` cells."""

    def __init__(
        self,
        rank=None,
        samples_per_epoch=None,
        batch_size=None,
        flush_interval=FLUSH_INTERVAL,
        publish=None,
        initial_epoch=0,
        allreduce_seconds=None,
    ):
        super().__init__()
        if rank is None:
            from jupyter_dl.runtime.job_backend import backend

            rank = backend().rank_and_size()[0]
        self.rank = rank
        self.samples_per_epoch = samples_per_epoch
        self.batch_size = batch_size
        self.initial_epoch = initial_epoch  # > 0 when resuming from a checkpoint
        # Reads the seconds this rank has spent in gradient allreduces so far (zero-code jobs), for the
        # summary's compute vs allreduce split.
        self._allreduce_seconds = allreduce_seconds
        self._allreduce_at_begin = 0.0
        self.flush_interval = flush_interval
        self._publish = publish if publish is not None else engine_publisher()
        self._buffer = []
        self._seq = 0
        self._last_flush = -math.inf  # never: monotonic time starts near 0 at boot
        self._samples = 0
        self._steps = 0
        self._train_seconds = 0.0
        self.sent = []  # everything sent, kept for publishers that are not engines (tests, scripts)

    # ------------------------------------------------------------------------------------------ plumbing
    def _emit(self, record, force=False):
        self._buffer.append(record)
        now = time.monotonic()
        if force or now - self._last_flush >= self.flush_interval:
            self.flush(now)

    def flush(self, now=None):
        if not self._buffer:
            return
        records, self._buffer = self._buffer, []
        # Batch logs are device tensors; reading one waits for its step. Doing it here, once per flush, rather
        # than per batch keeps the training loop asynchronous (on GPUs the next step is already queued).
        for record in records:
            if "logs" in record:
                record["logs"] = {k: float(v) for k, v in record["logs"].items()}
        self._last_flush = now or time.monotonic()
        self.sent.extend(records)
        if self._publish is not None:
            self._publish({f"jdl.{self.rank}.{self._seq:06d}": records})
        self._seq += 1

    # ---------------------------------------------------------------------------------------- callbacks
    def on_train_begin(self, logs=None):
        stall_watch.fit_started()
        if self._allreduce_seconds is not None:
            self._allreduce_at_begin = self._allreduce_seconds()
        params = self.params or {}
        self._epoch_steps = params.get("steps")
        self._emit(
            {
                "kind": "begin",
                "rank": self.rank,
                "t": time.time(),
                "epochs": params.get("epochs"),
                "steps": self._epoch_steps,
                "batch_size": self.batch_size,
                "samples_per_epoch": self.samples_per_epoch,
                "initial_epoch": self.initial_epoch,
            },
            force=True,
        )

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_start = time.perf_counter()
        self._epoch_samples = 0

    def on_train_batch_end(self, batch, logs=None):
        stall_watch.step_done()  # a step done is progress, for --manual cells too
        self._steps += 1
        if self.samples_per_epoch and self.batch_size:
            self._epoch_samples = min((batch + 1) * self.batch_size, self.samples_per_epoch)
        if self.rank == 0:
            self._emit(
                {
                    "kind": "batch",
                    "t": time.time(),
                    "epoch": self._epoch,
                    "step": batch + 1,
                    "steps": self._epoch_steps,
                    "logs": dict(logs or {}),
                }
            )  # floats at flush time

    def on_epoch_end(self, epoch, logs=None):
        self._samples += self._epoch_samples
        self._train_seconds += time.perf_counter() - self._epoch_start
        throughput = {
            "kind": "throughput",
            "rank": self.rank,
            "t": time.time(),
            "epoch": epoch,
            "samples": self._samples,
            "steps": self._steps,
            "seconds": self._train_seconds,
        }
        if self._allreduce_seconds is not None:
            throughput["allreduce_s"] = self._allreduce_seconds() - self._allreduce_at_begin
        if self.rank == 0:
            self._buffer.append(
                {
                    "kind": "epoch",
                    "t": time.time(),
                    "epoch": epoch,
                    "logs": {k: float(v) for k, v in (logs or {}).items()},
                }
            )
        self._emit(throughput, force=True)

    def on_train_end(self, logs=None):
        self._emit({"kind": "end", "rank": self.rank, "t": time.time()}, force=True)
