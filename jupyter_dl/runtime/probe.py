"""Engine side: a short profile of one model on this engine's device: step time and peak memory at a few batch
sizes. Runs on the engine's own copy of the model (the notebook's is never trained) and takes a few seconds."""

import os
import time

import numpy as np

from jupyter_dl.runtime.optimizer_hooks import steps_of_our_own


def device_kind():
    """'gpu:<name>' for this engine's first visible GPU, else 'cpu'."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu"
    details = tf.config.experimental.get_device_details(gpus[0])
    return f"gpu:{details.get('device_name', 'unknown')}"


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _peak_reset(gpu):
    import tensorflow as tf

    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    return _rss_bytes()


def _peak_since(gpu, baseline):
    import tensorflow as tf

    if gpu:
        return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    return max(0, _rss_bytes() - baseline)  # CPU: resident growth, a lower bound of the step's working memory


@steps_of_our_own()  # timing steps, not the user's custom loop: no note about one
def profile(model, x, y, batch_sizes=(16, 64, 256), steps=10):
    """[{batch_size, step_s (median of `steps` after two warm-up steps), peak_bytes}] and the device kind."""
    kind = device_kind()
    gpu = kind != "cpu"
    rows = []
    # Keras specialises the step it traces first to that batch shape and runs a general one for any later shape, as
    # `fit` does; the specialised step was 25-30% faster for recurrent models. A 2-sample batch takes that first trace.
    model.train_on_batch(x[np.arange(2) % len(x)], y[np.arange(2) % len(x)])
    for batch in batch_sizes:
        picked = np.arange(batch) % len(x)
        xb, yb = x[picked], y[picked]
        baseline = _peak_reset(gpu)
        for _ in range(2):  # warm-up: traces the step for this shape, fills allocator caches
            model.train_on_batch(xb, yb)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            model.train_on_batch(xb, yb)
            times.append(time.perf_counter() - start)
        rows.append(
            {"batch_size": int(batch), "step_s": float(np.median(times)), "peak_bytes": _peak_since(gpu, baseline)}
        )
    return {"device": kind, "rows": rows}


class ProbeDone(Exception):
    """Raised from `fit` in probe mode: the cell ran up to its training, which was profiled instead of run."""

    def __init__(self, payload):
        super().__init__("probe finished")
        self.payload = payload


def probe_fit(model, x, y, kwargs, multipliers=(1, 2, 4)):
    """What the recommender needs from a cell's `fit`: model features, the training set's size, epochs, batch size,
    learning rate, and step times at multiples of the cell's batch size on this engine's device."""
    from jupyter_dl.runtime.sharding import _is_array_like, _length
    from jupyter_dl.wire.model_features import model_features, optimizer_facts

    if not _is_array_like(x) or y is None:
        raise ValueError("--recommend needs fit(x, y) with in-memory arrays, to know the data size and probe steps")
    batch = kwargs.get("batch_size") or 32
    if not model.built:
        model(x[:1])
    learning_rate = optimizer_facts(model)[0]  # read before the profile's steps touch the optimizer
    measured = profile(model, x, y, [batch * m for m in multipliers])
    slots = optimizer_facts(model)[1]  # the profile's steps built the optimizer
    raise ProbeDone(
        {
            "features": model_features(model).as_dict(),
            "samples": int(_length(x)),
            "epochs": int(kwargs.get("epochs") or 1),
            "batch_size": int(batch),
            "learning_rate": learning_rate,
            "optimizer_slots": slots,
            **measured,
        }
    )
