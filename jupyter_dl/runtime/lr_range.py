"""The learning-rate range test itself: runs in the kernel (no cluster) or on every rank of a job.

The learning rate grows exponentially from `start_lr` to `end_lr` over `steps` training steps; the loss is smoothed
(bias-corrected exponential average) and the sweep stops once it exceeds `diverge` times its best value. The model's
and the optimizer's variables and the learning rate are restored afterwards, whatever happens. On several ranks each
trains on its own shard with averaged gradients and the stop decision is taken on the rank-averaged loss, so every
rank runs the same number of steps (one stopping early would leave the others waiting in an allreduce).
"""

import math

import numpy as np

from jupyter_dl.runtime.optimizer_hooks import steps_of_our_own


def suggest(lrs, smoothed):
    """A tenth of the learning rate at the smoothed loss's minimum (Smith's rule: the minimum sits at the edge of
    divergence). bench/lr_finder.py compares it with a grid search; the steepest-slope rule we tried first landed
    2.5x to 20,000x away from the grid's best on the same tasks. None when the sweep was too short to tell."""
    if len(lrs) < 8:
        return None
    return float(lrs[int(np.argmin(smoothed))]) / 10.0


@steps_of_our_own()  # its steps run outside fit on shards of its own: no "custom loop" note
def range_test(model, x, y, start_lr=1e-7, end_lr=10.0, steps=100, batch_size=32, beta=0.98, diverge=4.0, seed=0):
    """Sweep the learning rate on `model` (compiled) over batches of (x, y). Returns lrs, losses, smoothed loss and
    the suggestion. Distributed when Horovod is initialised with more than one rank."""
    from jupyter_dl.runtime.job_backend import backend

    rank, size = _rank_and_size(backend)
    optimizer = model.optimizer
    if optimizer is None:
        raise ValueError("the model is not compiled; compile it with its optimizer and loss first")
    if _is_schedule(optimizer):
        raise ValueError(
            "the optimizer uses a learning-rate schedule; compile it with a constant learning rate for the range test"
        )
    if size > 1:
        from jupyter_dl.runtime.sharding import shard_fit_inputs

        # Recompiling under the Keras interception wraps the optimizer so gradients are averaged across ranks.
        model.compile(optimizer=optimizer, loss=model.loss)
        optimizer = model.optimizer
        x, y, _ = shard_fit_inputs(x, y, {}, rank, size)
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    saved_model = [v.numpy() for v in model.variables]
    saved_optimizer = [v.numpy() for v in optimizer.variables]
    saved_lr = float(np.asarray(optimizer.learning_rate))
    if size > 1:
        backend().broadcast_from_root(model.variables)
    n = len(x)
    order = np.random.default_rng(seed + rank).permutation(n)
    factor = (end_lr / start_lr) ** (1.0 / max(1, steps - 1))
    lrs, losses, smoothed = [], [], []
    average, best = 0.0, math.inf
    try:
        for i in range(steps):
            lr = start_lr * factor**i
            optimizer.learning_rate.assign(lr)
            picked = order[np.arange(i * batch_size, (i + 1) * batch_size) % n]
            result = model.train_on_batch(x[picked], y[picked])
            loss = float(result[0] if isinstance(result, (list, tuple)) else result)
            if size > 1:
                loss = backend().average_scalars([loss], name=f"jdl.lr_range.{i}")[0]
            if not math.isfinite(loss):
                break
            average = beta * average + (1 - beta) * loss
            value = average / (1 - beta ** (i + 1))
            lrs.append(lr)
            losses.append(loss)
            smoothed.append(value)
            best = min(best, value)
            if i > 0 and value > diverge * best:
                break
    finally:
        for variable, value in zip(model.variables, saved_model):
            variable.assign(value)
        for variable, value in zip(optimizer.variables, saved_optimizer):
            variable.assign(value)
        optimizer.learning_rate.assign(saved_lr)
    return {
        "lrs": lrs,
        "losses": losses,
        "smoothed": smoothed,
        "suggestion": suggest(lrs, smoothed),
        "ranks": size,
        "batch_size": batch_size,
    }


def _rank_and_size(backend):
    try:
        return backend().rank_and_size()
    except Exception:  # Horovod not initialised: the kernel runs the test alone
        return 0, 1


def _is_schedule(optimizer):
    import keras

    return isinstance(getattr(optimizer, "_learning_rate", None), keras.optimizers.schedules.LearningRateSchedule)
