"""While a job runs: what the ranks produce (metrics, logs) goes into the job's state, store and observers."""

import math
import time
from collections.abc import Sequence

from jupyter_dl.kernel.job.observer import JobObserver


class MetricsFeed:
    """Moves what the ranks produce (metrics, logs) into the job's state, store and observers, and carries
    cancel requests from the store back to the monitor."""

    LOG_INTERVAL = 0.5  # the logs tab ran ~3 epochs behind the panel at 2 s; only changed logs are rewritten
    CANCEL_CHECK_INTERVAL = 0.2
    SPARKLINE_POINTS = 60

    def __init__(self, job, collector, state, observers: Sequence[JobObserver], store, ars, redact):
        self.job, self.collector, self.state, self.observers, self.store = job, collector, state, observers, store
        self.ars, self.redact = ars, redact
        self._logs_at = self._cancel_at = -math.inf  # never: monotonic time starts near 0 at boot
        self._logged: dict[tuple[str, int], int] = {}  # (stream, rank) -> length of the text last written
        self.stalls: dict[int, dict] = {}  # rank -> its stall report

    def pump(self, final=False):
        records = self.collector.poll()
        for record in records:
            if record.get("kind") == "stall":
                self.stalls.setdefault(record["rank"], record)
        if records:
            self.state.consume(records)
            self.job.progress = {**self.state.progress(), "sparkline": self._sparkline()}
            if self.store is not None:
                self.store.append_metrics(self.job.id, records)
                self.store.save(self.job, progress_only=not final)
        # Also when nothing new came: a view that skipped a redraw (throttled) draws it now, not at the next flush.
        if records or final or self.state.has_undrawn():
            for observer in self.observers:
                observer.update(self.state, force=final)
        self._write_logs(final)

    def _write_logs(self, final):
        now = time.monotonic()
        if self.store is None or not (final or now - self._logs_at > self.LOG_INTERVAL):
            return
        self._logs_at = now
        for stream in ("stdout", "stderr"):
            texts = {r: getattr(ar, stream) or "" for r, ar in enumerate(self.ars)}
            changed = {r: text for r, text in texts.items() if self._logged.get((stream, r)) != len(text)}
            if changed:
                self.store.write_logs(self.job.id, {r: self.redact(t) for r, t in changed.items()}, stream)
                self._logged.update({(stream, r): len(t) for r, t in changed.items()})

    def cancel_requested(self):
        now = time.monotonic()
        if self.store is None or now - self._cancel_at < self.CANCEL_CHECK_INTERVAL:
            return False
        self._cancel_at = now
        return self.store.cancel_requested(self.job.id)

    def _sparkline(self):
        ys = self.state.batch_loss.points()[1]
        stride = max(1, -(-len(ys) // self.SPARKLINE_POINTS))
        return [round(y, 5) for y in ys[::stride]]
