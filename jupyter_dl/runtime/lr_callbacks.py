"""Engine side: the cell's learning-rate callbacks keep working in single-rank units while the optimizer runs at the
scaled rate (--lr-scale): what they compute, what they print and what the history logs is the rate the cell's
author set, as in one process."""

import contextlib


@contextlib.contextmanager
def in_single_rank_units(callbacks, updates):
    """The cell's learning-rate callbacks were written for one rank; the optimizer runs at the scaled rate. A
    LearningRateScheduler's function sees and returns single-rank rates; ReduceLROnPlateau's floor is scaled."""
    restore = []
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
    try:
        yield
    finally:
        for undo in restore:
            undo()


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
