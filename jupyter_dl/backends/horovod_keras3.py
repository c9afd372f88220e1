"""Horovod 0.28.1's TensorFlow 2 and Keras APIs, made to work on Keras 3 objects. `install()` patches the imported
Horovod modules (never the files on disk); it is idempotent, and every rank calls it before user code runs.

Why Horovod breaks on Keras 3 (TF >= 2.16):
- it keys gradients and variables by `tf.Variable.ref()`; a Keras 3 variable is not a `tf.Variable` and has none
  (`DistributedGradientTape.gradient`, `BroadcastGlobalVariablesCallback`, `register_local_*`);
- its Keras optimizer wrapper overrides Keras 2 internals (`get_gradients`, `_aggregate_gradients`) that a Keras 3
  optimizer never calls, so it would train every rank apart without saying so;
- its callbacks use Keras 2 names (`optimizer.lr`, `optimizer.variables()`, `keras.backend.get_value/constant`),
  and so do its elastic states (horovod_keras3_elastic.py).
What works and is used as is: the collectives (`hvd.allreduce`, `grouped_allreduce`, `broadcast`, ...).

Collectives here get fixed names derived from the tensors' shapes, never from Keras' auto-generated layer names:
persistent engines with different histories name the same layer `dense_3` on one rank and `dense` on another, and
Horovod, which matches tensors across ranks by name, would then wait forever.
"""

import dataclasses
import functools
import zlib

from jupyter_dl.backends import horovod_keras3_elastic
from jupyter_dl.backends.keras3_unsupported import Keras3Unsupported

_installed = False

__all__ = ["Keras3Unsupported", "install"]


def install():
    """Patch horovod.tensorflow, horovod.tensorflow.keras and horovod.keras (importing them). Safe to call again."""
    global _installed
    if _installed:
        return
    import horovod.tensorflow as hvd
    import horovod.tensorflow.functions as functions
    import horovod.tensorflow.keras as hvd_tf_keras
    import horovod.tensorflow.keras.callbacks as tf_keras_callbacks

    _wrap_compile()
    original_distributed_optimizer = hvd.DistributedOptimizer
    hvd.DistributedGradientTape = DistributedGradientTape
    hvd.broadcast_variables = functions.broadcast_variables = broadcast_variables
    hvd.DistributedOptimizer = _tf_distributed_optimizer(original_distributed_optimizer)
    modules = [(hvd_tf_keras, tf_keras_callbacks)]
    try:
        import horovod.keras as hvd_keras
        import horovod.keras.callbacks as keras_callbacks

        modules.append((hvd_keras, keras_callbacks))
    except ImportError:  # horovod.keras is optional; horovod.tensorflow.keras is the same API
        pass
    for module, callbacks in modules:
        module.DistributedOptimizer = DistributedOptimizer
        module.load_model = load_model
        module.broadcast_global_variables = broadcast_global_variables
        for cls in _callback_classes():
            setattr(callbacks, cls.__name__, cls)
    horovod_keras3_elastic.install(broadcast_variables)
    _installed = True


# ------------------------------------------------------------------------------------------ gradient reduction


@dataclasses.dataclass
class _GradientReduction:
    """How one tape or optimizer combines its gradients across ranks (Horovod's arguments, our implementation)."""

    op: object
    compression: object
    sparse_as_dense: bool
    predivide: float
    groups: object  # None, a number of groups, or lists of variables reduced together
    process_set: object
    scale_local: bool
    local: list = dataclasses.field(default_factory=list)  # variables whose gradients stay on this rank
    variables: list | None = None  # the optimizer's variables for the update being traced (see _DistributedOptimizer)

    def is_local(self, var):
        return any(var is v for v in self.local)

    def __call__(self, grads, variables):
        import tensorflow as tf

        grads = list(grads)
        variables = list(variables) if variables is not None else [None] * len(grads)
        shared = [i for i, g in enumerate(grads) if g is not None and not self.is_local(variables[i])]
        for chunk in self._chunks(shared, variables):
            tensors = [grads[i] for i in chunk]
            if self.sparse_as_dense:
                tensors = [tf.convert_to_tensor(t) if isinstance(t, tf.IndexedSlices) else t for t in tensors]
            for i, reduced in zip(chunk, self._allreduce(tensors)):
                grads[i] = reduced
        if self.scale_local and self.local:
            # A rank's local gradients are scaled like the shared ones, which are averaged over the ranks.
            size = self.process_set.size()
            for i, g in enumerate(grads):
                if g is not None and self.is_local(variables[i]):
                    grads[i] = (
                        tf.IndexedSlices(g.values / size, g.indices, g.dense_shape)
                        if isinstance(g, tf.IndexedSlices)
                        else g / size
                    )
        return grads

    def _allreduce(self, tensors):
        import horovod.tensorflow as hvd

        scale = {}
        if self.predivide != 1.0:  # validated: op is Average
            scale = {"prescale_factor": 1.0 / self.predivide, "postscale_factor": self.predivide}
        return hvd.grouped_allreduce(
            tensors,
            op=self.op,
            compression=self.compression,
            process_set=self.process_set,
            name=_collective_name("grads", tensors),
            ignore_name_scope=True,
            **scale,
        )

    def _chunks(self, indices, variables):
        if not indices or not self.groups:
            return [indices] if indices else []
        if isinstance(self.groups, int):
            n = min(self.groups, len(indices))
            return [indices[k * len(indices) // n : (k + 1) * len(indices) // n] for k in range(n)]
        chunks, left = [], list(indices)
        for group in self.groups:
            chunk = [i for i in left if any(variables[i] is v for v in group)]
            left = [i for i in left if i not in chunk]
            if chunk:
                chunks.append(chunk)
        return chunks + [[i] for i in left]


def _collective_name(kind, tensors):
    signature = ",".join(f"{getattr(t.dtype, 'name', t.dtype)}{tuple(t.shape)}" for t in tensors)
    return f"jdl.{kind}.{zlib.crc32(signature.encode()):08x}"


def _reduction(
    api,
    allowed_ops,
    op=None,
    compression=None,
    sparse_as_dense=False,
    gradient_predivide_factor=1.0,
    num_groups=0,
    groups=None,
    process_set=None,
    scale_local_gradients=True,
):
    """How `api` (its name, for errors) reduces gradients: Horovod's own arguments and defaults, checked."""
    import horovod.tensorflow as hvd

    op = hvd.Average if op is None else op
    compression = compression or hvd.Compression.none
    if op == hvd.Adasum and op in allowed_ops and not hvd.mpi_enabled():
        raise Keras3Unsupported(f"{api}(op=hvd.Adasum) needs Horovod running on MPI, not gloo; use op=hvd.Average")
    if op not in allowed_ops:
        names = {hvd.Average: "Average", hvd.Sum: "Sum", hvd.Adasum: "Adasum"}
        raise Keras3Unsupported(
            f"{api}(op={names.get(op, op)}) is not supported here; use op=hvd.Average or op=hvd.Sum"
        )
    if gradient_predivide_factor != 1.0 and op != hvd.Average:
        raise ValueError(f"{api}: gradient_predivide_factor needs op=hvd.Average")
    groups = groups if groups is not None else (num_groups or None)
    if groups is not None and not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError(f"{api}: groups must be a positive integer or a list of lists of variables")
    return _GradientReduction(
        op,
        compression,
        sparse_as_dense,
        float(gradient_predivide_factor),
        groups,
        process_set or hvd.global_process_set,
        scale_local_gradients,
    )


# --------------------------------------------------------------------------------------------- gradient tape


class _ReducingTape:
    """Mixed in front of the user's tape class: gradients come back reduced across ranks, by position."""

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False, **kwargs):
        import tensorflow as tf

        grads = super().gradient(target, sources, output_gradients, **kwargs)
        reduced = self._hvd_reduction(tf.nest.flatten(grads), tf.nest.flatten(sources))
        return tf.nest.pack_sequence_as(grads, reduced)

    def register_local_source(self, source):
        self._hvd_reduction.local.append(source)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        grads = self.gradient(target, sources, output_gradients)
        local = [(s, g) for s, g in zip(sources, grads) if self._hvd_reduction.is_local(s)]
        shared = [(s, g) for s, g in zip(sources, grads) if not self._hvd_reduction.is_local(s)]
        return local, shared


_TAPE_CLASSES: dict = {}


def DistributedGradientTape(
    gradtape,
    device_dense="",
    device_sparse="",
    compression=None,
    sparse_as_dense=False,
    op=None,
    gradient_predivide_factor=1.0,
    num_groups=0,
    groups=None,
    process_set=None,
    scale_local_gradients=True,
):
    """Horovod's DistributedGradientTape (same arguments, same positions) for Keras 3 and tf.Variable sources.
    The tape itself is returned, its class swapped for one whose `gradient` reduces across ranks."""
    import horovod.tensorflow as hvd

    reduction = _reduction(
        "DistributedGradientTape",
        (hvd.Average, hvd.Sum, hvd.Adasum),
        op,
        compression,
        sparse_as_dense,
        gradient_predivide_factor,
        num_groups,
        groups,
        process_set,
        scale_local_gradients,
    )
    base = getattr(type(gradtape), "_hvd_base", type(gradtape))
    if base not in _TAPE_CLASSES:
        _TAPE_CLASSES[base] = type(base.__name__, (_ReducingTape, base), {"_hvd_base": base})
    gradtape.__class__ = _TAPE_CLASSES[base]
    gradtape._hvd_reduction = reduction
    return gradtape


# ------------------------------------------------------------------------------------------------ broadcast


def broadcast_variables(variables, root_rank, process_set=None, inplace=False):
    """Set every variable (Keras 3 or tf.Variable) to root_rank's value. Eager: done on return; inside a
    tf.function: returns the op that does it."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    variables = list(variables)
    process_set = process_set or hvd.global_process_set
    prefix = _collective_name("bcast", variables)
    updates = [
        var.assign(
            hvd.broadcast(
                tf.convert_to_tensor(var),
                root_rank,
                name=f"{prefix}.{i}",
                ignore_name_scope=True,
                process_set=process_set,
            )
        )
        for i, var in enumerate(variables)
    ]
    return None if tf.executing_eagerly() else tf.group(*updates)


def broadcast_global_variables(root_rank):
    raise Keras3Unsupported(
        "broadcast_global_variables: TensorFlow 2 has no global variables; use "
        "hvd.callbacks.BroadcastGlobalVariablesCallback(0) in fit, or "
        "hvd.broadcast_variables(model.variables, root_rank=0)"
    )


# ------------------------------------------------------------------------------------------- Keras optimizer


class _DistributedOptimizer:
    """Mixed in front of a Keras 3 optimizer class. Keras calls `_clip_gradients` exactly once per real update
    (after summing micro-batches when gradient_accumulation_steps is set), before clipping: the same point where
    Horovod reduced on Keras 2. `_backend_apply_gradients` is where the update's variables are still known."""

    def _backend_apply_gradients(self, grads, trainable_variables):
        self._hvd_reduction.variables = list(trainable_variables)
        try:
            return super()._backend_apply_gradients(grads, trainable_variables)
        finally:
            self._hvd_reduction.variables = None

    def _clip_gradients(self, grads):
        grads = self._hvd_reduction(grads, self._hvd_reduction.variables)
        if self._hvd_sum_passes > 1:  # Keras averages accumulated micro-batches; Horovod's default sums them
            grads = [g if g is None else g * self._hvd_sum_passes for g in grads]
        return super()._clip_gradients(grads)

    def register_local_var(self, var):
        self._hvd_reduction.local.append(var)


_OPTIMIZER_CLASSES: dict = {}


def _distribute_in_place(optimizer, reduction, sum_passes=1):
    base = getattr(type(optimizer), "_hvd_base", type(optimizer))
    if base not in _OPTIMIZER_CLASSES:
        # Same name and module as the user's class: a saved model names a plain Keras optimizer and loads anywhere.
        _OPTIMIZER_CLASSES[base] = type(
            base.__name__,
            (_DistributedOptimizer, base),
            {"_hvd_base": base, "__module__": base.__module__, "__qualname__": base.__qualname__},
        )
    optimizer.__class__ = _OPTIMIZER_CLASSES[base]
    optimizer._hvd_reduction = reduction
    optimizer._hvd_sum_passes = sum_passes
    return optimizer


def DistributedOptimizer(
    optimizer,
    name=None,
    device_dense="",
    device_sparse="",
    compression=None,
    sparse_as_dense=False,
    gradient_predivide_factor=1.0,
    op=None,
    backward_passes_per_step=1,
    average_aggregated_gradients=False,
    num_groups=0,
    groups=None,
    process_set=None,
    scale_local_gradients=True,
):
    """horovod.tensorflow.keras.DistributedOptimizer for a Keras 3 optimizer: a new optimizer of the same class and
    config (as Horovod returns) whose updates use gradients reduced across ranks. backward_passes_per_step=N uses
    Keras' own gradient accumulation; the N micro-batch gradients are summed, or averaged with
    average_aggregated_gradients=True, as in Horovod."""
    import horovod.tensorflow as hvd
    import keras

    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise Keras3Unsupported(
            f"DistributedOptimizer: {type(optimizer).__name__} is not a Keras 3 optimizer; use a "
            "keras.optimizers.* instance (Keras 3 has no legacy / tf.compat.v1 optimizers)"
        )
    reduction = _reduction(
        "DistributedOptimizer",
        (hvd.Average, hvd.Sum),
        op,
        compression,
        sparse_as_dense,
        gradient_predivide_factor,
        num_groups,
        groups,
        process_set,
        scale_local_gradients,
    )
    base = getattr(type(optimizer), "_hvd_base", type(optimizer))
    config = optimizer.get_config()
    passes = int(backward_passes_per_step)
    if passes > 1:
        config["gradient_accumulation_steps"] = passes
    if name:
        config["name"] = name
    distributed = base.from_config(config)
    return _distribute_in_place(
        distributed, reduction, passes if passes > 1 and not average_aggregated_gradients else 1
    )


def _tf_distributed_optimizer(original):
    """horovod.tensorflow.DistributedOptimizer: Keras 3 optimizers go to ours (Horovod's would drop `op`)."""

    def distributed_optimizer(optimizer, *args, **kwargs):
        import keras

        if isinstance(optimizer, keras.optimizers.Optimizer):
            kwargs.pop("use_locking", None)
            return DistributedOptimizer(optimizer, *args, **kwargs)
        return original(optimizer, *args, **kwargs)

    distributed_optimizer.__doc__ = original.__doc__
    return distributed_optimizer


def _wrap_compile():
    """Keras 3 compiles the train step with XLA by default on GPUs; Horovod's collectives are not XLA ops. A model
    compiled with a Horovod optimizer gets jit_compile=False, and an explicit jit_compile=True a clear error.
    Patched on Keras' Trainer, not on keras.Model: Keras only compiles a loaded model when Model.compile is
    Trainer.compile."""
    from keras.src.trainers.trainer import Trainer

    compile_ = Trainer.compile
    if getattr(compile_, "_hvd_wrapped", False):
        return

    @functools.wraps(compile_)
    def compile(model, optimizer="rmsprop", *args, **kwargs):
        if isinstance(optimizer, _DistributedOptimizer):
            if kwargs.get("jit_compile") is True:
                raise Keras3Unsupported("Horovod's collectives are not XLA ops; use jit_compile=False in compile")
            kwargs["jit_compile"] = False
        return compile_(model, optimizer, *args, **kwargs)

    compile._hvd_wrapped = True
    Trainer.compile = compile


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None, legacy_opts=False):
    """Load a Keras model and make its optimizer (state included) a Horovod one, as Horovod's load_model does."""
    import horovod.tensorflow as hvd
    import keras

    if legacy_opts:
        raise Keras3Unsupported("load_model(legacy_opts=True): Keras 3 has no legacy optimizers; use load_model(path)")
    objects = {cls.__name__: cls for cls in custom_optimizers or ()}
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    if getattr(model, "optimizer", None) is not None:
        _distribute_in_place(model.optimizer, _reduction("load_model", (hvd.Average,), compression=compression))
    return model


def _callback_classes():
    """Horovod's four Keras callbacks for Keras 3 (imported here, not at the top: they import Keras)."""
    from jupyter_dl.backends import horovod_keras3_callbacks as callbacks

    return [getattr(callbacks, name) for name in callbacks.__all__]
