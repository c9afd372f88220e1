"""What both backends do around their gradient allreduce: leave missing gradients alone, densify sparse ones, weight
this rank's share, and time the collective inside a traced step."""


def average_present(grads, allreduce_average, weight=None, timer=None):
    """`grads` with the present ones (None kept in place) replaced by `allreduce_average(list)` of them. `weight` (a
    scalar variable) scales this rank's gradients first: its share of the global batch when ranks' batches differ.
    `timer` (a float64 variable) accumulates the seconds this rank spent in the collective: waiting for the other
    ranks' gradients, then exchanging them (the summary's compute vs allreduce split)."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return list(grads)
    dense = [_dense(grads[i]) for i in present]
    if weight is not None:
        dense = [g * _cast(weight, g.dtype) for g in dense]
    reduced = allreduce_average(dense) if timer is None else _timed(timer, dense, allreduce_average)
    out = list(grads)
    for i, r in zip(present, reduced):
        out[i] = r
    return out


def _timed(timer, inputs, collective):
    """collective(inputs), with the time between all inputs being ready and all outputs being ready added to
    `timer`. Control dependencies order the timestamps inside a traced step, where Python timing cannot see."""
    import tensorflow as tf

    with tf.control_dependencies(inputs):
        started = tf.timestamp()
    with tf.control_dependencies([started]):
        inputs = [tf.identity(t) for t in inputs]
    outputs = collective(inputs)
    with tf.control_dependencies(outputs):
        added = timer.assign_add(tf.timestamp() - started)
    with tf.control_dependencies([added]):
        return [tf.identity(t) for t in outputs]


def _cast(value, dtype):
    import tensorflow as tf

    return tf.cast(tf.convert_to_tensor(value), dtype)


def _dense(grad):
    import tensorflow as tf

    return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad


def value_of(var):
    """A variable's current value as a tensor: a Keras 3 variable's `value` property, or a plain tf.Variable's
    read (its `value` is a method: keras.io's style transfer applies SGD to a notebook `tf.Variable`)."""
    value = getattr(var, "value", var)
    return var.read_value() if callable(value) and hasattr(var, "read_value") else value
