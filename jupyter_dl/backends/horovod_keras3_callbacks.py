"""Horovod's four Keras callbacks, rewritten for Keras 3 (see horovod_keras3.py for why Horovod's own fail).

Their own module because they subclass Keras classes, so importing it imports Keras: horovod_keras3.install(), which
only ranks call, loads it; the kernel imports horovod_keras3 without paying for Keras."""

import sys

import horovod.tensorflow as hvd
import keras

from jupyter_dl.backends.horovod import average_scalars
from jupyter_dl.backends.keras3_unsupported import Keras3Unsupported

__all__ = [
    "BroadcastGlobalVariablesCallback",
    "MetricAverageCallback",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
]


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Rank root_rank's model and optimizer variables on every rank, once: before the first update when
    Keras has built the optimizer by then (Keras 3 does), else after the first batch (Horovod's moment)."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.local_variables = list(local_variables or [])
        self.broadcast_done = False

    def register_local_var(self, var):
        self.local_variables.append(var)

    def _broadcast(self):
        shared = [v for v in self.model.variables if not any(v is local for local in self.local_variables)]
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            shared += list(optimizer.variables)
        # install() has put jupyter_dl's Keras 3 broadcast_variables there before any callback can run.
        hvd.broadcast_variables(shared, self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        if not self.broadcast_done and (optimizer is None or optimizer.built):
            self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Epoch metrics averaged over ranks, in place: callbacks after this one and History see the average."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if logs:
            names = sorted(logs)  # the same order on every rank
            averaged = average_scalars([float(logs[n]) for n in names], name="jdl.hvd_metrics")
            logs.update(zip(names, averaged))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Horovod's schedule, lr = initial_lr * multiplier(epoch), on a Keras 3 optimizer."""

    def __init__(
        self,
        initial_lr,
        multiplier,
        start_epoch=0,
        end_epoch=None,
        staircase=True,
        momentum_correction=True,
        steps_per_epoch=None,
    ):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier ** (epoch - start_epoch))
        self.start_epoch, self.end_epoch, self.staircase = start_epoch, end_epoch, staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0

    def _set_lr(self, epoch):
        optimizer = self.model.optimizer
        if isinstance(optimizer._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            raise Keras3Unsupported(
                f"{type(self).__name__}: the optimizer's learning rate is a "
                "LearningRateSchedule; use the schedule or this callback, not both"
            )
        optimizer.learning_rate = self.initial_lr * self.multiplier(epoch)

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self.params.get("steps")
            if not self.steps_per_epoch:
                raise ValueError(f"{type(self).__name__}: pass steps_per_epoch (Keras did not report it)")
        if self.momentum_correction and getattr(self.model.optimizer, "momentum", 0) and _is_rank0():
            # Keras 3 bakes an optimizer's momentum into the compiled step as a constant: it cannot follow.
            print(
                f"[jupyter-dl] {type(self).__name__}: momentum correction is not applied on Keras 3 "
                "(pass momentum_correction=False to silence this)",
                file=sys.stderr,
            )

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        epoch = self.current_epoch
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return
        if not self.staircase:
            self._set_lr(epoch + batch / self.steps_per_epoch)
        elif batch == 0:
            self._set_lr(epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(self.model.optimizer.learning_rate.numpy())


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Goyal et al.'s gradual warmup, as Horovod's: from initial_lr / size up to initial_lr."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__(
            initial_lr,
            self._warmup,
            start_epoch=0,
            end_epoch=warmup_epochs,
            staircase=False,
            momentum_correction=momentum_correction,
            steps_per_epoch=steps_per_epoch,
        )
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def _warmup(self, epoch):
        epoch += 1.0 / self.steps_per_epoch  # the warmup's last batch reaches initial_lr exactly
        return (epoch * (hvd.size() - 1) / self.warmup_epochs + 1) / hvd.size()

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose and _is_rank0():
            print(
                f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                f"{float(self.model.optimizer.learning_rate.numpy()):g}."
            )


def _is_rank0():
    return hvd.rank() == 0
