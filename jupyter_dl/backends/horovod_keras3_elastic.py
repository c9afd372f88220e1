"""Horovod's elastic states for Keras (`hvd.elastic.KerasState`, `TensorFlowKerasState`) on Keras 3. Horovod calls
`optimizer.variables()`, a list on Keras 3 ("'list' object is not callable" as soon as a state is made), and
broadcasts the model with its own broadcast_variables (tf.Variable only, names from layer names). horovod_keras3's
install() calls install() here, so a `--manual` cell and a horovodrun script with `jupyter_dl.horovod_compat` get it.

A Keras 3 optimizer holds only its step count and learning rate until its first update builds the rest. A state is
made before that, and a rank new to the job syncs before it took a step, so the optimizer is built over the model's
trainable variables first: every rank then broadcasts the same list, and a commit restores into all of it.
"""

_broadcast_variables = None  # horovod_keras3's, given to install(): this module must not import it (a cycle)


def install(broadcast_variables):
    global _broadcast_variables
    import horovod.tensorflow.elastic as elastic

    _broadcast_variables = broadcast_variables
    elastic._broadcast_model = _broadcast_model
    elastic.TensorFlowKerasState._save_model = _save_model
    elastic.TensorFlowKerasState._load_model = _load_model


def optimizer_variables(model, optimizer) -> list:
    """The optimizer's variables, built for the model first (see above); none without an optimizer."""
    if optimizer is None:
        return []
    if not getattr(optimizer, "built", True):
        optimizer.build(model.trainable_variables)
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)  # a Keras 2 optimizer's is a method


def _broadcast_model(model, optimizer, backend=None):
    _broadcast_variables(list(model.variables) + optimizer_variables(model, optimizer), root_rank=0)


def _save_model(state):
    import tensorflow as tf

    state._saved_model_state = [tf.identity(v) for v in state.model.variables]
    state._saved_optimizer_state = [tf.identity(v) for v in optimizer_variables(state.model, state.optimizer)]


def _load_model(state):
    for var, saved in zip(state.model.variables, state._saved_model_state):
        var.assign(saved)
    for var, saved in zip(optimizer_variables(state.model, state.optimizer), state._saved_optimizer_state):
        var.assign(saved)
