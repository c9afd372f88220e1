"""What the live view knows about a training run, built from the records ranks publish. No widgets here."""

import time
from collections import deque

from jupyter_dl.live.series import DownsampledSeries

# What a rank's resource sample may hold (runtime/resources.py): process CPU % (100 = one core), resident memory,
# and where the rank has a GPU, its utilisation % and memory in use.
RESOURCE_KEYS = ("cpu", "rss_mb", "gpu_util", "gpu_mem_mb")


class TrainingState:
    """Consumes records; exposes bounded series, progress and throughput.

    Keras 3 batch logs are running means over the epoch; the per-batch value is recovered as
    k*mean_k - (k-1)*mean_(k-1) and then smoothed (exponential average), as loss curves usually are.
    The x axis is the global step, so epoch boundaries are exact even for datasets of unknown length.

    The one place this is done: the live view, the jobs panel (replaying metrics.jsonl, live/replay.py) and
    comparisons (comparison.py) all read their curves from here. A `restart` record (the kernel writes it to the
    job store) does what `restarted` does.
    """

    def __init__(self, budget=2000, smoothing=0.9, latency_window=100_000):
        self.budget = budget
        self.smoothing = smoothing
        self.epochs = None
        self.steps = None
        self.batch_size = None
        self.ranks = set()
        self.global_step = 0
        self.epoch = 0
        self.step = 0
        self.batch_loss = DownsampledSeries(budget)  # smoothed per-batch training loss
        self.batch_loss_raw = DownsampledSeries(budget)  # the recovered per-batch loss itself (the panel's toggle)
        self.begin = {}  # rank 0's first begin record: batch_size, epochs, steps, samples_per_epoch
        self.began_t = None  # when rank 0 first began: where "seconds since training began" count from
        self.epoch_series = {}  # "loss", "val_loss", "accuracy", ... -> series
        self.epoch_logs = []  # last value per epoch: the history, exactly
        self.epoch_boundaries = []  # global step at each epoch end
        self.throughput = {}  # rank -> {"samples", "steps", "seconds"}
        self.ended_ranks = set()
        # Engine batch end -> kernel saw it, seconds (recent): the kernel's benchmark; 0 keeps none (a server replay).
        self.latencies = deque(maxlen=latency_window)
        self._undrawn = []  # engine times of batches not yet drawn
        self._prev_mean = {}
        self._ema = None
        self._rate_window = []  # (engine time, global step) for live speed
        self.first_t = None
        self.last_t = None
        self.restarts = []  # {"attempt", "reason", "step", "epoch"} per restart
        self.resources = {}  # rank -> {"t": [...], "cpu": [...], "rss_mb": [...], ...}
        self.resource_samples = 0  # samples consumed so far: the view redraws on change
        self._pending_restart = None

    # ---------------------------------------------------------------------------------------------- input
    def consume(self, records):
        for record in records:
            kind = record.get("kind")
            t = record.get("t")
            if t is not None:
                self.first_t = t if self.first_t is None else min(self.first_t, t)
                self.last_t = t if self.last_t is None else max(self.last_t, t)
            if kind == "begin":
                self._begin(record)
            elif kind == "batch":
                self._batch(record)
            elif kind == "epoch":
                self._epoch(record)
            elif kind == "throughput":
                self.throughput[record.get("rank", 0)] = {
                    k: record[k] for k in ("samples", "steps", "seconds", "allreduce_s") if k in record
                }
            elif kind == "resources":
                self._resources(record)
            elif kind == "end":
                self.ended_ranks.add(record.get("rank", 0))
            elif kind == "restart":
                self.restarted(
                    record.get("attempt", len(self.restarts) + 1), record.get("reason", ""), record.get("label")
                )

    def _begin(self, record):
        if self._pending_restart is not None:
            self._resume_at(record.get("initial_epoch") or 0)
        rank = record.get("rank", 0)
        if rank == 0 and not self.begin:
            self.begin = dict(record)
            self.began_t = record.get("t")
        self.ranks.add(rank)
        self.epochs = record.get("epochs") or self.epochs
        self.steps = record.get("steps") or self.steps
        self.batch_size = record.get("batch_size") or self.batch_size

    def _resources(self, record):
        """One rank's resource sample: kept per rank as parallel lists, thinned to the budget by dropping every
        other point when full (the shape of a long run stays; the store keeps every sample)."""
        self.resource_samples += 1
        series = self.resources.setdefault(record["rank"], {"t": []})
        if len(series["t"]) >= self.budget:
            for values in series.values():
                del values[::2]
        series["t"].append(record["t"])
        for key in RESOURCE_KEYS:
            if key in record:
                values = series.setdefault(key, [None] * (len(series["t"]) - 1))
                values.append(record[key])
        for values in series.values():
            if len(values) < len(series["t"]):
                values.append(None)

    def time_split(self):
        """Where training time went, from the ranks' own clocks: {rank: {"seconds", "allreduce_s", "share"}} for
        ranks that timed their gradient allreduces (zero-code jobs), where share is the allreduce fraction."""
        split = {}
        for rank, v in sorted(self.throughput.items()):
            if v.get("seconds") and v.get("allreduce_s") is not None:
                split[rank] = {
                    "seconds": v["seconds"],
                    "allreduce_s": v["allreduce_s"],
                    "share": min(1.0, max(0.0, v["allreduce_s"] / v["seconds"])),
                }
        return split

    def _batch(self, record):
        if record["step"] == 1:
            self._prev_mean = {}
        self.global_step += 1
        self.epoch, self.step = record["epoch"], record["step"]
        self.steps = record.get("steps") or self.steps
        if "seen" in record:
            self.latencies.append(record["seen"] - record["t"])
        if len(self._undrawn) < 10_000:  # bounded when no view drains it (--no-plot)
            self._undrawn.append(record["t"])
        self._rate_window.append((record["t"], self.global_step))
        cutoff = record["t"] - 3.0
        while len(self._rate_window) > 2 and self._rate_window[0][0] < cutoff:
            self._rate_window.pop(0)
        mean = record["logs"].get("loss")
        if mean is None:
            return
        k = record["step"]
        value = k * mean - (k - 1) * self._prev_mean.get("loss", 0.0)
        self._prev_mean["loss"] = mean
        # Seeded with the first value, the exponential average needs no bias correction.
        self._ema = value if self._ema is None else self.smoothing * self._ema + (1 - self.smoothing) * value
        self.batch_loss.add(self.global_step, self._ema, record["t"])
        self.batch_loss_raw.add(self.global_step, value, record["t"])

    def _epoch(self, record):
        logs = record["logs"]
        self.epoch_logs.append(dict(logs))
        self.epoch_boundaries.append(self.global_step)
        for key, value in logs.items():
            self.epoch_series.setdefault(key, DownsampledSeries(self.budget)).add(
                self.global_step, value, record.get("t", 0.0)
            )

    def restarted(self, attempt, reason, label=None):
        """The job restarts after a failure, or an elastic job goes on with another group (label: "4 ranks"). Its
        next run begins at the epoch its checkpoint (commit) reached: what was drawn after that is dropped (it is
        trained again), and the restart is marked where the new run begins."""
        self._pending_restart = {"attempt": attempt, "reason": reason, "label": label or f"restart {attempt}"}
        self.ended_ranks.clear()
        self._rate_window = []

    def _resume_at(self, epoch):
        epoch = min(epoch, len(self.epoch_logs))
        self.global_step = self.epoch_boundaries[epoch - 1] if epoch else 0
        self.epoch_logs = self.epoch_logs[:epoch]
        self.epoch_boundaries = self.epoch_boundaries[:epoch]
        self.batch_loss.truncate(self.global_step)
        self.batch_loss_raw.truncate(self.global_step)
        for series in self.epoch_series.values():
            series.truncate(self.global_step)
        self._prev_mean = {}
        self._ema = None
        self.restarts.append({**self._pending_restart, "step": self.global_step, "epoch": epoch})
        self._pending_restart = None

    # --------------------------------------------------------------------------------------------- output
    def has_undrawn(self):
        return bool(self._undrawn)

    def take_undrawn(self):
        """Engine end times of the batches that arrived since the last call (the view draws them now)."""
        undrawn, self._undrawn = self._undrawn, []
        return undrawn

    @property
    def total_steps(self):
        return self.epochs * self.steps if self.epochs and self.steps else None

    def steps_per_second(self):
        if len(self._rate_window) < 2:
            return None
        (t0, s0), (t1, s1) = self._rate_window[0], self._rate_window[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def samples_per_second(self):
        rate = self.steps_per_second()
        if rate is None or not self.batch_size:
            return None
        return rate * self.batch_size * max(1, len(self.ranks))

    def progress(self):
        total = self.total_steps
        done = self.global_step
        finished = bool(self.ranks) and self.ended_ranks >= self.ranks
        fraction = 1.0 if finished else (min(1.0, done / total) if total else None)
        rate = self.steps_per_second()
        eta = (total - done) / rate if (total and rate and not finished) else (0.0 if finished else None)
        return {
            "epoch": self.epoch + 1 if done else 0,
            "epochs": self.epochs,
            "step": self.step,
            "steps": self.steps,
            "global_step": done,
            "total_steps": total,
            "fraction": fraction,
            "samples_per_s": self.samples_per_second(),
            "eta_s": eta,
            "updated": time.time(),
        }

    def rank_throughput(self):
        """Samples per second per rank over the whole run (from each rank's own clock)."""
        return {
            rank: (v["samples"] / v["seconds"] if v["seconds"] and v["samples"] else None)
            for rank, v in sorted(self.throughput.items())
        }
