"""Engine side: per-rank batch sizes for ranks of different speeds (mixed GPUs, or a slow host).

In synchronous training every step waits for the slowest rank. When ranks differ in speed, each gets a batch
proportional to its measured throughput, the batches summing to the global batch (batch_size x ranks), and every rank
keeps the same number of steps per epoch (each takes its columns of every global batch). The gradient each rank
contributes is weighted by its share (b_r / batch_size before the average), so the update is the mean gradient over
the global batch, exactly as with an even split.
"""

import time

import numpy as np

MIN_IMBALANCE = 1.10  # below this ratio of fastest to slowest rank, the even split is kept (noise, not hardware)


def measure(model, x, y, batch_size, steps=3):
    """Samples per second of forward + backward on this rank alone (no collective), over `steps` timed steps after
    one untimed warm-up step (which also builds the model)."""
    import tensorflow as tf

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=xb, y=yb, y_pred=model(xb, training=True))
        return tape.gradient(loss, model.trainable_variables)

    n = min(len(x), batch_size)
    xb, yb = tf.convert_to_tensor(x[:n]), tf.convert_to_tensor(y[:n])
    step(xb, yb)
    start = time.perf_counter()
    for _ in range(steps):
        grads = step(xb, yb)
    _ = [g.numpy() for g in grads if g is not None]  # wait for the device
    return steps * n / (time.perf_counter() - start)


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
    starts after the lower ranks' batches. Every rank gets the same number of blocks, so the same number of steps."""
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
        return a[index]

    return tuple(take(a) for a in arrays)
