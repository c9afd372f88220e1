"""Zero-code mode, engine side: every Keras optimizer update on this rank averages gradients across ranks.

Wrapping the optimizer inside `compile` (as we once did) misses every optimizer that was compiled somewhere else: a
model compiled in an earlier cell, a model that came back from a previous job, a custom loop calling
`optimizer.apply_gradients`. Every one of those updates goes through `apply` on a Keras optimizer class, so that is
where we hook, on the classes, for the duration of one cell:
- gradients are averaged across ranks before the update (once, at the outermost `apply`: a LossScaleOptimizer
  averages before its finite check so every rank takes the same skip/apply decision, then calls its inner one);
- the first update of any variable is preceded by a broadcast of rank 0's value (the ranks may have built their
  models with different random initialisations);
- while `fit` runs, the learning rate of every optimizer it drives (the model's, a GAN's two, a LossScaleOptimizer's
  inner one) is scaled (constants, schedules and callables alike), and put back when that fit ends: `fit` gives each
  rank its own shard, so the global batch grows with the ranks. A custom loop's batches are the same on every rank,
  so its averaged gradient is the one-process gradient and its learning rate stays as written.
"""

import contextlib
import threading

from jupyter_dl.runtime.job_backend import backend

_own_steps = threading.local()  # .active while jupyter-dl itself trains outside fit (see steps_of_our_own)


@contextlib.contextmanager
def steps_of_our_own():
    """Mark training steps jupyter-dl takes itself outside fit (the --recommend probe timing the cell's model,
    lr_find's sweep over the shards it took): they are no custom loop of the user's, so no note says they are."""
    before = getattr(_own_steps, "active", False)
    _own_steps.active = True
    try:
        yield
    finally:
        _own_steps.active = before


class DistributedUpdates:
    """Patch Keras optimizers' `apply` for one cell on one rank; use as a context manager."""

    def __init__(self, lr_factor: float, rank: int = 0):
        self.lr_factor = lr_factor
        self.rank = rank
        self.in_fit = False  # set by the fit hook while Keras' fit runs
        self.gradient_weight = None  # this rank's share of the global batch x ranks (1.0 for an even split)
        self.allreduce_seconds = None  # seconds this rank spent in gradient allreduces during the cell
        self._patched: list = []  # (class, original apply)
        self._adopted: dict = {}  # id(optimizer) -> optimizer, for as long as the cell runs
        self._collective_names: dict = {}  # id(optimizer) -> name of its gradient allreduce, the same on every rank
        self._restore_lr: list = []  # callables putting learning rates back
        self._scaled: set = set()  # ids of optimizers whose learning rate is scaled
        self._noted: set = set()  # ids of optimizers the custom-loop note was printed for
        self._synced: set = set()  # ids of variables already holding rank 0's value
        self._updated: dict = {}  # id(variable) -> variable, updated through a hooked optimizer
        self._local = threading.local()

    def __enter__(self):
        import tensorflow as tf
        from keras.src.optimizers.base_optimizer import BaseOptimizer

        # A variable, not a constant: a compiled train step is traced once and reused while --balance changes it.
        self.gradient_weight = tf.Variable(1.0, trainable=False, dtype=tf.float32, name="jdl_gradient_weight")
        self.allreduce_seconds = tf.Variable(0.0, trainable=False, dtype=tf.float64, name="jdl_allreduce_seconds")
        for cls in _classes_defining_apply(BaseOptimizer):
            original = cls.__dict__["apply"]
            self._patched.append((cls, original))
            cls.apply = self._distributed_apply(original)
        return self

    def __exit__(self, *exc):
        for cls, original in reversed(self._patched):
            cls.apply = original
        self._patched.clear()
        self.unscale_all()
        self._adopted.clear()
        return False

    # ----------------------------------------------------------------------------------------------- apply
    def _distributed_apply(self, original):
        updates = self

        def apply(optimizer, grads, trainable_variables=None):
            updates.adopt(optimizer)
            if updates.in_fit:
                updates.scale_for_sharded_data(optimizer)
            if getattr(updates._local, "inside", False):  # an inner optimizer: the outer one averaged already
                return original(optimizer, grads, trainable_variables)
            if not updates.in_fit and not getattr(_own_steps, "active", False):
                updates._note_custom_loop(optimizer)
            updates._local.inside = True
            try:
                grads = list(grads)
                variables = (
                    list(trainable_variables)
                    if trainable_variables is not None
                    else list(getattr(optimizer, "_trainable_variables", None) or [])
                )
                updates.sync_from_root(variables)
                updates._updated.update((id(v), v) for v in variables)
                grads = backend().average_gradients(
                    grads,
                    updates.gradient_weight,
                    name=updates._collective_names[id(optimizer)],
                    timer=updates.allreduce_seconds,
                )
                return original(optimizer, grads, trainable_variables)
            finally:
                updates._local.inside = False

        apply.__wrapped__ = original
        return apply

    def updated_variables(self):
        """Variables some hooked optimizer updated in this cell."""
        return list(self._updated.values())

    # ------------------------------------------------------------------------------------- first update
    def sync_from_root(self, variables):
        """Give variables that have not been synchronised yet rank 0's values. Called while a train step is being
        traced too: the broadcast then runs once, eagerly, outside the graph (tf.init_scope)."""
        fresh = [v for v in variables if id(v) not in self._synced]
        if not fresh:
            return
        import tensorflow as tf

        with tf.init_scope():
            # A variable made while this step is traced (a sub-model the train_step builds on its first call, as
            # keras.io's contrastive model does) holds no value until the traced step first runs: it is left to
            # fit's sync after the first step.
            fresh = [v for v in fresh if _has_value(v)]
            if fresh:
                backend().broadcast_from_root(fresh)
        self.mark_synced(fresh)

    def mark_synced(self, variables):
        self._synced.update(id(v) for v in variables)

    # ---------------------------------------------------------------------------------------- learning rate
    def adopt(self, optimizer):
        """Know this optimizer for the rest of the cell: name its collective (in the same order on every rank)."""
        if id(optimizer) in self._adopted:
            return
        self._adopted[id(optimizer)] = optimizer
        self._collective_names[id(optimizer)] = f"jdl_grads.{len(self._collective_names)}"

    def _note_custom_loop(self, optimizer):
        if self.rank == 0 and id(optimizer) not in self._noted:
            self._noted.add(id(optimizer))
            print(
                f"[jupyter-dl] {type(optimizer).__name__} updates outside fit (a custom loop): every rank reads the "
                f"same batches, so this trains exactly as one process would, without a speed-up; fit shards the "
                f"data for you, or give each rank its part under --manual",
                flush=True,
            )

    def unscale_all(self):
        """Put every scaled learning rate back (a rate a callback changed keeps its change, in single-rank units)."""
        for restore in reversed(self._restore_lr):
            restore()
        self._restore_lr.clear()
        self._scaled.clear()

    def scale_for_sharded_data(self, optimizer):
        """Scale the learning rate of an optimizer that trains on sharded data (fit), once per cell."""
        self.adopt(optimizer)
        # A LossScaleOptimizer reads and writes its inner optimizer's learning rate.
        optimizer = getattr(optimizer, "inner_optimizer", optimizer)
        if id(optimizer) in self._scaled or type(optimizer).__name__ == "MultiOptimizer":
            return
        self._scaled.add(id(optimizer))
        if self.lr_factor != 1.0:
            self._scale_learning_rate(optimizer)

    def _scale_learning_rate(self, optimizer):
        import keras
        import tensorflow as tf

        factor = self.lr_factor
        original = optimizer._learning_rate
        if isinstance(original, keras.optimizers.schedules.LearningRateSchedule):
            optimizer._learning_rate = ScaledSchedule(original, factor)
            self._restore_lr.append(lambda: setattr(optimizer, "_learning_rate", original))
        elif isinstance(original, keras.Variable):
            with tf.init_scope():
                value = float(original.numpy())
                original.assign(value * factor)
                stored = float(original.numpy())  # as the variable's dtype rounds it

            def restore():
                # A callback that changed the rate (ReduceLROnPlateau) keeps its change, in single-rank units.
                current = float(original.numpy())
                original.assign(value if current == stored else current / factor)

            self._restore_lr.append(restore)
        elif callable(original):
            optimizer._learning_rate = lambda: original() * factor
            self._restore_lr.append(lambda: setattr(optimizer, "_learning_rate", original))

    def unscaled(self, value):
        """A learning rate as the cell's author thinks of it (one rank)."""
        return value / self.lr_factor

    def scaled(self, value):
        return value * self.lr_factor


def _has_value(variable) -> bool:
    """False for a variable whose initial value is still to be assigned by the function being traced."""
    value = getattr(variable, "_value", None)  # a Keras variable's tf.Variable
    is_initialized = getattr(variable if value is None else value, "is_initialized", None)
    return is_initialized is None or bool(is_initialized())


def _classes_defining_apply(base):
    seen, stack, found = set(), [base], []
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if "apply" in cls.__dict__:
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def _scaled_schedule_class():
    import keras

    @keras.saving.register_keras_serializable(package="jupyter_dl")
    class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
        """The user's schedule times the ranks' learning-rate factor (a checkpoint written mid-job keeps it)."""

        def __init__(self, schedule, factor):
            self.schedule = schedule
            self.factor = factor

        def __call__(self, step):
            return self.schedule(step) * self.factor

        def get_config(self):
            return {"schedule": keras.saving.serialize_keras_object(self.schedule), "factor": self.factor}

        @classmethod
        def from_config(cls, config):
            return cls(keras.saving.deserialize_keras_object(config["schedule"]), config["factor"])

    return ScaledSchedule


class _LazyScheduleClass:
    """Defined on first use: building a Keras class at import time would import Keras in the kernel."""

    def __init__(self):
        self._cls = None

    def __call__(self, *args, **kwargs):
        if self._cls is None:
            self._cls = _scaled_schedule_class()
        return self._cls(*args, **kwargs)


ScaledSchedule = _LazyScheduleClass()
