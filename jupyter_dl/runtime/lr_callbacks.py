"""Engine side: the cell's learning-rate callbacks keep working in single-rank units while the optimizer runs at the
scaled rate (--lr-scale): what they compute, what they print and what the history logs is the rate the cell's
author set, as in one process."""

import contextlib
import functools


@contextlib.contextmanager
def in_single_rank_units(callbacks, updates, optimizer=None):
    """The cell's learning-rate callbacks were written for one rank; the optimizer runs at the scaled rate. A
    LearningRateScheduler's function sees and returns single-rank rates; ReduceLROnPlateau's floor is scaled; a
    callback of a notebook class reads and sets `optimizer`'s rate in single-rank units."""
    restore = []
    rate = rate_variable(optimizer) if updates.lr_factor != 1.0 else None
    for cb in callbacks:
        kind = type(cb).__name__
        if kind == "LearningRateScheduler" and callable(getattr(cb, "schedule", None)):
            schedule = cb.schedule

            verbose, cb.verbose = cb.verbose, 0  # its message would show the scaled rate: ours shows the cell's

            def in_single_rank_units(epoch, lr=None, _schedule=schedule, _verbose=verbose):
                if lr is None:
                    rate = _schedule(epoch)
                else:
                    try:
                        rate = _schedule(epoch, updates.unscaled(lr))
                    except TypeError:  # a one-argument schedule, as Keras also allows
                        rate = _schedule(epoch)
                if _verbose:
                    print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {rate}.")
                return updates.scaled(rate)

            cb.schedule = in_single_rank_units
            restore.append(
                lambda cb=cb, schedule=schedule, v=verbose: (
                    setattr(cb, "schedule", schedule),
                    setattr(cb, "verbose", v),
                )
            )
        elif kind == "ReduceLROnPlateau" and hasattr(cb, "min_lr"):
            min_lr = cb.min_lr
            cb.min_lr = updates.scaled(min_lr)
            restore.append(lambda cb=cb, min_lr=min_lr: setattr(cb, "min_lr", min_lr))
            if cb.verbose:
                restore.append(_reduce_messages_in_single_rank_units(cb, updates))
        elif rate is not None and type(cb).__module__ == "__main__":
            restore.append(_hooks_in_single_rank_units(cb, rate, updates))
    try:
        yield
    finally:
        for undo in restore:
            undo()


def rate_variable(optimizer):
    """The variable holding the optimizer's rate; None for a schedule or a callable, which no callback sets."""
    import keras

    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's is its inner one's
    rate = getattr(optimizer, "_learning_rate", None)
    return rate if isinstance(rate, keras.Variable) else None


def _hooks_in_single_rank_units(cb, rate, updates):
    """A notebook's callback was written for one process (the callbacks guide's CustomLearningRateScheduler reads
    `self.model.optimizer.learning_rate` and sets 0.05 from its table; relative or absolute, by the property, by
    `assign` or by `set_value`): while each of its own hooks runs, the optimizer holds the single-rank rate, and
    what the hook leaves there is scaled again. Hooks run between steps: no step applies the unscaled rate.
    Returns the undo."""
    import keras

    base = keras.callbacks.Callback
    names = [n for n in dir(type(cb)) if n.startswith("on_") and getattr(type(cb), n) is not getattr(base, n, None)]
    missing = object()
    before = {name: cb.__dict__.get(name, missing) for name in names}
    for name in names:
        setattr(cb, name, _hook_in_single_rank_units(getattr(cb, name), rate, updates))

    def undo():
        for name, value in before.items():
            if value is missing:
                del cb.__dict__[name]  # the class's method again
            else:
                setattr(cb, name, value)

    return undo


def _hook_in_single_rank_units(hook, rate, updates):
    @functools.wraps(hook)
    def hook_in_single_rank_units(*args, **kwargs):
        applied = float(rate.numpy())
        rate.assign(updates.unscaled(applied))
        given = float(rate.numpy())
        try:
            return hook(*args, **kwargs)
        finally:
            left = float(rate.numpy())
            # Unchanged: the applied value exactly, not a rounded product of the two conversions.
            rate.assign(applied if left == given else updates.scaled(left))

    return hook_in_single_rank_units


def _reduce_messages_in_single_rank_units(cb, updates):
    """ReduceLROnPlateau says the rate it set, which is the scaled one: say the cell's instead. Returns the undo."""
    verbose, on_epoch_end = cb.verbose, cb.on_epoch_end
    cb.verbose = 0

    def reporting_on_epoch_end(epoch, logs=None):
        before = float(cb.model.optimizer.learning_rate.numpy())
        on_epoch_end(epoch, logs)
        after = float(cb.model.optimizer.learning_rate.numpy())
        if after != before:
            print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to {updates.unscaled(after)}.")

    cb.on_epoch_end = reporting_on_epoch_end

    def undo():
        cb.verbose = verbose
        del cb.on_epoch_end  # the class's method again

    return undo


def learning_rate_logs_callback(keras, updates):
    class LearningRateLogs(keras.callbacks.Callback):
        """ReduceLROnPlateau and LearningRateScheduler log the rate the optimizer applies (scaled); History should
        hold the rate the cell's author set."""

        def on_epoch_end(self, epoch, logs=None):
            if logs and "learning_rate" in logs and updates.lr_factor != 1.0:
                logs["learning_rate"] = updates.unscaled(float(logs["learning_rate"]))

    return LearningRateLogs()
