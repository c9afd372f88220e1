"""Engine side: per-rank batch sizes for ranks of different speeds (mixed GPUs, or a slow host).

In synchronous training every step waits for the slowest rank. When ranks differ in speed, each gets a batch
proportional to its measured throughput, the batches summing to the global batch (batch_size x ranks), and every rank
keeps the same number of steps per epoch (each takes its columns of every global batch). The gradient each rank
contributes is weighted by its share (b_r / batch_size before the average), so the update is the mean gradient over
the global batch, exactly as with an even split.
"""

import time

import numpy as np

# `--balance on`: the user says the ranks differ; anything above this ratio of fastest to slowest rank is acted on.
MIN_IMBALANCE = 1.10
# `--balance auto` (ranks on several hosts) must not act on noise. Two identical namespace hosts sharing 2 busy cores
# (load 11) measured rank ratios up to 2.26 and host ratios (median of each host's ranks) up to 1.52, with each rank's
# steps spread 0.12-2.8 (interquartile range / median); a host slowed to a fifth of a CPU measured host ratios of
# 5.2-10.7. So auto compares hosts, and splits only above AUTO_MIN_IMBALANCE, above NOISE_MARGIN times the largest
# step spread, and above WITHIN_HOST_MARGIN times the largest ratio between ranks of one host (the same hardware).
AUTO_MIN_IMBALANCE = 1.3
NOISE_MARGIN = 2.0
WITHIN_HOST_MARGIN = 1.3
MEASURE_BUDGET_S = 2.0  # the lock-step measurement stops after this long (at least MIN_STEPS steps)
MIN_STEPS, MAX_STEPS = 3, 9


def measure(model, x, y, batch_size, step_barrier):
    """Samples per second of forward + backward on this rank, one value per timed step, after one untimed warm-up
    step (which also traces and builds). Every rank times the same steps at the same moment: `step_barrier(seconds)`
    waits for all ranks and returns the largest time any rank has spent so far, so that ranks sharing CPUs compete
    alike in each step and all stop after the same number of steps."""
    import tensorflow as tf

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=xb, y=yb, y_pred=model(xb, training=True))
        return tape.gradient(loss, model.trainable_variables)

    n = min(len(x), batch_size)
    xb, yb = tf.convert_to_tensor(x[:n]), tf.convert_to_tensor(y[:n])
    _finish(step(xb, yb))
    speeds, spent = [], 0.0
    while len(speeds) < MAX_STEPS:
        slowest = step_barrier(spent)
        if len(speeds) >= MIN_STEPS and slowest > MEASURE_BUDGET_S:
            break
        start = time.perf_counter()
        _finish(step(xb, yb))
        took = time.perf_counter() - start
        spent += took
        speeds.append(n / took)
    return speeds


def _finish(grads):
    """Wait for the step's device work: reading one value of each gradient needs it done."""
    for g in grads:
        if g is not None:
            float(g if g.shape.rank == 0 else g[(0,) * g.shape.rank])


def summarize(speeds):
    """(median samples/s, relative spread) of one rank's step speeds; the spread is the interquartile range over
    the median, which a preempted step or two does not move."""
    q1, median, q3 = np.percentile(speeds, [25, 50, 75])
    return float(median), float((q3 - q1) / median) if median else 0.0


def speeds_to_split_by(reports, auto):
    """Each rank's speed for split_batch, or None to keep the even split. `reports`: one (host, median samples/s,
    spread) per rank. `--balance on` (auto False) acts on any rank ratio above MIN_IMBALANCE; `auto` gives every rank
    its host's median and acts only on a host ratio above the floors described at AUTO_MIN_IMBALANCE."""
    medians = [median for _, median, _ in reports]
    if not auto:
        return medians if max(medians) >= MIN_IMBALANCE * min(medians) else None
    by_host: dict = {}
    for host, median, _ in reports:
        by_host.setdefault(host, []).append(median)
    host_speed = {host: float(np.median(speeds)) for host, speeds in by_host.items()}
    ratio = max(host_speed.values()) / min(host_speed.values())
    within = max(max(speeds) / min(speeds) for speeds in by_host.values())
    noise = max(spread for _, _, spread in reports)
    floor = max(AUTO_MIN_IMBALANCE, 1 + NOISE_MARGIN * noise, WITHIN_HOST_MARGIN * within)
    return [host_speed[host] for host, _, _ in reports] if ratio >= floor else None


def split_batch(global_batch, speeds):
    """Per-rank batch sizes proportional to speeds, summing to global_batch, each at least 1 (largest remainder)."""
    speeds = np.asarray(speeds, dtype=float)
    if len(speeds) > global_batch:
        raise ValueError(f"a global batch of {global_batch} cannot give each of {len(speeds)} ranks a sample")
    shares = speeds / speeds.sum() * (global_batch - len(speeds))
    batches = np.floor(shares).astype(int) + 1
    for i in np.argsort(-(shares - np.floor(shares)))[: global_batch - batches.sum()]:
        batches[i] += 1
    return [int(b) for b in batches]


def take_columns(arrays, rank, batches):
    """Rank's columns of every global batch: from each block of sum(batches) consecutive samples, the slice that
    starts after the lower ranks' batches; what is left after the whole blocks is split by the same shares, so an
    epoch covers the same samples as an even split. Every rank gets the same number of steps (the remainder is
    dropped only when it cannot give every rank a sample, as an even split drops fewer than one per rank)."""
    total = sum(batches)
    start = sum(batches[:rank])
    stop = start + batches[rank]

    def take(a):
        if a is None:
            return None
        if isinstance(a, dict):
            return {k: take(v) for k, v in a.items()}
        if isinstance(a, (list, tuple)):
            return type(a)(take(v) for v in a)
        blocks = len(a) // total
        if blocks == 0:
            raise ValueError(f"{len(a)} samples are fewer than one global batch of {total}")
        index = (np.arange(blocks)[:, None] * total + np.arange(start, stop)[None, :]).ravel()
        left = len(a) - blocks * total
        if left >= len(batches):
            tail = split_batch(left, batches)
            first = blocks * total + sum(tail[:rank])
            index = np.concatenate([index, np.arange(first, first + tail[rank])])
        return a[index]

    return tuple(take(a) for a in arrays)
