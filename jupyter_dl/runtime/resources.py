"""Engine side: sample this rank's resource use while a job runs, and stream it to the kernel.

A daemon thread wakes every `interval` seconds and reads the process's CPU % and resident memory (psutil, which
ipykernel already depends on) and, where this rank has a GPU and NVML can be loaded, that GPU's utilisation and
memory. Samples are published in batches (one iopub message per `flush_interval`) under their own keys
(`jdl.<rank>.r<seq>`), beside LiveMetrics' records, so the live view, the job store and the panel receive them the
same way. Reading a counter costs microseconds, so a few samples a second do not slow training (bench/
resource_overhead.py measures it).
"""

import collections
import os
import threading
import time

FLUSH_INTERVAL = 1.0


class _Gpu:
    """NVML readings for the GPU this rank is pinned to (CUDA_VISIBLE_DEVICES' first entry), or nothing."""

    def __init__(self):
        self._handle = None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if visible in ("", "-1"):
            return
        try:
            import pynvml  # the nvidia-ml-py package: optional, present where GPUs are

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = (
                pynvml.nvmlDeviceGetHandleByIndex(int(visible))
                if visible.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(visible)
            )
        except Exception:  # no driver, no library, an index NVML does not know: no GPU series, not a failed job
            self._handle = None

    def read(self) -> dict:
        if self._handle is None:
            return {}
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            memory = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
            return {"gpu_util": float(util.gpu), "gpu_mem_mb": memory.used / 2**20}
        except Exception:
            return {}


class ResourceSampler:
    """Samples this process every `interval` seconds between __enter__ and __exit__; `publish` sends a dict of
    records (ipyparallel's publish_data on an engine). `sent` keeps what was sent, and `cpu_seconds` what the
    sampling thread itself cost (for the overhead bench)."""

    def __init__(self, rank, interval=0.25, publish=None, flush_interval=FLUSH_INTERVAL):
        self.rank = rank
        self.interval = interval
        self.flush_interval = flush_interval
        self._publish = publish
        self._stop = threading.Event()
        self._thread = None
        self._seq = 0
        self.sent = collections.deque(maxlen=10_000)  # the latest samples, for tests and scripts
        self.cpu_seconds = 0.0

    def __enter__(self):
        if self.interval and self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="jdl-resources", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        return False

    def _run(self):
        import psutil

        process = psutil.Process()
        process.cpu_percent(None)  # the first reading only starts the interval
        gpu = _Gpu()
        buffer, flushed_at = [], time.monotonic()
        while not self._stop.wait(self.interval):
            started = time.thread_time()
            buffer.append(self._sample(process, gpu))
            now = time.monotonic()
            if now - flushed_at >= self.flush_interval:
                self._flush(buffer)
                buffer, flushed_at = [], now
            self.cpu_seconds += time.thread_time() - started
        last = self._sample(process, gpu)  # the last moments of the job, too, and what sampling cost
        last["sampler_cpu_s"] = self.cpu_seconds
        buffer.append(last)
        self._flush(buffer)

    def _sample(self, process, gpu) -> dict:
        with process.oneshot():
            record = {
                "kind": "resources",
                "rank": self.rank,
                "t": time.time(),
                "cpu": process.cpu_percent(None),
                "rss_mb": process.memory_info().rss / 2**20,
            }
        record.update(gpu.read())
        return record

    def _flush(self, records):
        if not records:
            return
        self.sent.extend(records)
        if self._publish is not None:
            try:
                self._publish({f"jdl.{self.rank}.r{self._seq:06d}": records})
            except Exception:  # a lost sample must never fail the job
                pass
        self._seq += 1
