"""What the estimator knows about a Keras model without running it: parameters, forward FLOPs and activations per
sample, layer counts by kind, input size, and per group of layers the FLOPs, layers, weights and elements read
and written; for recurrent layers also the operations their loops launch and the elements those write. FLOPs count
multiply-adds as two; layers we do not model count as one operation per output element (cheap elementwise work),
which is right for activations, pooling, normalisation."""

import math
from dataclasses import asdict, dataclass, field


@dataclass
class ModelFeatures:
    params: int
    trainable_params: int
    flops_per_sample: float  # forward pass
    activations_per_sample: float  # output elements of every layer, and what they keep for the backward pass
    input_size: int  # elements per sample
    layers: int
    kinds: dict = field(default_factory=dict)  # layer class name -> count
    flops_by_group: dict = field(default_factory=dict)  # dense | conv | rnn | attention | other -> forward FLOPs
    sequential_steps: int = 0  # time steps recurrent layers run one after another (each costs a launch)
    layers_by_group: dict = field(default_factory=dict)  # group -> layers that compute (no input layers, reshapes)
    traffic_by_group: dict = field(default_factory=dict)  # group -> elements read and written per sample (forward)
    loop_launches: int = 0  # operations recurrent loops run in a forward pass (loop body x time steps)
    loop_elements: int = 0  # elements per sample those operations write
    params_by_group: dict = field(default_factory=dict)  # group -> trainable weights (a dense one is read by matmuls)

    def as_dict(self):
        return asdict(self)


OPS_PER_STEP_GUESS = 20  # operations a recurrent time step runs, for a model whose loop cannot be traced
GATES = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}  # weight blocks of a recurrent cell
RESHAPES = ("InputLayer", "Flatten", "Reshape")  # views of their input: no arithmetic, no data moved


def _elements(shape):
    dims = [d for d in list(shape)[1:] if d is not None]
    return math.prod(dims) if dims else 1


def _shape(tensor_or_list):
    if isinstance(tensor_or_list, (list, tuple)):
        if not tensor_or_list:
            raise ValueError("no tensor")  # an input layer's own input
        tensor_or_list = tensor_or_list[0]
    return tuple(tensor_or_list.shape)


def layer_flops(layer) -> float:
    """Forward FLOPs per sample of one built layer."""
    kind = type(layer).__name__
    try:
        out_shape = _shape(layer.output)
        in_shape = _shape(layer.input)
    except (AttributeError, ValueError):
        return 0.0
    out = _elements(out_shape)
    if kind in ("Dense", "EinsumDense"):
        fan_in = sum(math.prod(w.shape) for w in layer.trainable_weights if len(w.shape) >= 2) / max(1, out_shape[-1])
        return 2.0 * fan_in * out
    if kind.startswith("Conv") or kind.startswith("SeparableConv") or kind.startswith("DepthwiseConv"):
        kernel = next((w for w in layer.trainable_weights if len(w.shape) >= 3), None)
        if kernel is None:
            return float(out)
        # kernel: spatial... x in/groups x out (or x depth multiplier): MACs per output position = kernel size / out ch
        per_position = math.prod(kernel.shape) / max(1, out_shape[-1])
        if kind.startswith("DepthwiseConv"):
            per_position = math.prod(kernel.shape[:-2])
        return 2.0 * per_position * out
    if kind in GATES:
        gates = GATES[kind]
        units = layer.units
        steps = in_shape[1] or 1
        features = in_shape[-1] or 1
        return 2.0 * gates * (features + units) * units * steps
    if kind == "MultiHeadAttention":
        weights = sum(math.prod(w.shape) for w in layer.trainable_weights if len(w.shape) >= 2)
        seq = out_shape[1] or 1
        width = out_shape[-1] or 1
        return 2.0 * weights * seq + 4.0 * seq * seq * width
    if kind in ("Embedding", "Dropout") or kind in RESHAPES:
        return 0.0
    return float(out)


GROUPS = ("dense", "conv", "rnn", "attention", "other")


def group_of(layer) -> str:
    """Layers whose FLOPs run at similar speed on a device (the estimator fits one rate per group)."""
    kind = type(layer).__name__
    if kind in ("Dense", "EinsumDense"):
        return "dense"
    if "Conv" in kind:
        return "conv"
    if kind in GATES:
        return "rnn"
    if kind == "MultiHeadAttention":
        return "attention"
    return "other"


def model_features(model) -> ModelFeatures:
    """Features of a built Keras model (built by an Input layer, a call, or fit)."""
    if not model.built:
        raise ValueError("the model is not built yet: give it an keras.Input, or call it on a batch first")
    layers = list(_leaf_layers(model))
    kinds: dict = {}
    groups = dict.fromkeys(GROUPS, 0.0)
    counts = dict.fromkeys(GROUPS, 0)
    traffic = dict.fromkeys(GROUPS, 0)
    weights = dict.fromkeys(GROUPS, 0)
    flops = activations = 0.0
    steps = longest = hidden = 0
    for layer in layers:
        kind, group = type(layer).__name__, group_of(layer)
        kinds[kind] = kinds.get(kind, 0) + 1
        layer_cost = layer_flops(layer)
        flops += layer_cost
        groups[group] += layer_cost
        counts[group] += kind not in RESHAPES
        weights[group] += sum(math.prod(w.shape) for w in layer.trainable_weights)
        try:
            kept = _elements(_shape(layer.output)) + _hidden_elements(layer)
            activations += kept
            if kind not in RESHAPES:
                traffic[group] += _elements(_shape(layer.input)) + kept
        except (AttributeError, ValueError):
            pass
        if group == "rnn":
            try:
                steps += _shape(layer.input)[1] or 0
                longest = max(longest, _shape(layer.input)[1] or 0)
                hidden += _hidden_elements(layer)
            except (AttributeError, ValueError, IndexError):
                pass
    try:
        input_size = _elements(_shape(model.inputs))
    except (AttributeError, ValueError, TypeError, IndexError):
        input_size = 0
    # Only recurrent layers loop. Every loop is taken to run as many steps as the longest recurrent layer (right for
    # stacked ones of one length); a model the tracer cannot take gets OPS_PER_STEP_GUESS operations a step and its kept
    # gates.
    per_step = _loop_work(model) if longest else (0, 0)
    if per_step:
        loop_launches, loop_elements = per_step[0] * longest, per_step[1] * longest
    else:
        loop_launches, loop_elements = OPS_PER_STEP_GUESS * steps, hidden
    return ModelFeatures(
        params=int(model.count_params()),
        trainable_params=int(sum(math.prod(w.shape) for w in model.trainable_weights)),
        flops_per_sample=flops,
        activations_per_sample=activations,
        input_size=int(input_size),
        layers=len(layers),
        kinds=kinds,
        flops_by_group=groups,
        sequential_steps=int(steps),
        layers_by_group=counts,
        traffic_by_group=traffic,
        loop_launches=int(loop_launches),
        loop_elements=int(loop_elements),
        params_by_group={g: int(n) for g, n in weights.items()},
    )


def optimizer_facts(model):
    """(constant learning rate or None, optimizer state values per weight) of a compiled model: Adam keeps 2, SGD
    with momentum 1, from the variables beyond its iteration count and rate; 2 before the optimizer is built."""
    optimizer = model.optimizer
    rate = getattr(optimizer, "learning_rate", None)
    learning_rate = float(rate.numpy()) if hasattr(rate, "numpy") else None
    if optimizer is None or not optimizer.built:
        return learning_rate, 2
    return learning_rate, round(max(0, len(optimizer.variables) - 2) / max(1, len(model.trainable_variables)))


def _hidden_elements(layer) -> int:
    """Elements a layer keeps for its backward pass beyond its output: attention's score matrices, a recurrent
    layer's gates and state at every time step."""
    kind = type(layer).__name__
    if kind in GATES:
        return (_shape(layer.input)[1] or 1) * (GATES[kind] + 1) * layer.units
    if kind != "MultiHeadAttention":
        return 0
    seq = _shape(layer.output)[1] or 1
    return int(getattr(layer, "num_heads", 1)) * seq * seq


BOOKKEEPING = {"Const", "Identity", "IdentityN", "NoOp", "Placeholder", "ReadVariableOp", "StopGradient"}


def _loop_work(model):
    """(operations, elements per sample they write) of one iteration of every loop in a traced forward pass in
    training mode, without the graph's bookkeeping nodes: what a recurrent layer costs per time step beyond its
    FLOPs, a few dozen small kernels (cells differ: a Keras GRU step runs more of them than an LSTM step) on
    batch x units elements each. None when the model cannot be traced from its inputs' shapes."""
    try:
        import tensorflow as tf

        specs = [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs]
        graph = (
            tf.function(lambda *x: model(x[0] if len(x) == 1 else list(x), training=True))
            .get_concrete_function(*specs)
            .graph.as_graph_def(add_shapes=True)
        )
    except Exception:  # any model the tracer cannot take falls back to counts by layer
        return None
    bodies = {f.signature.name: f.node_def for f in graph.library.function}
    return _count_ops(graph.node, bodies, in_loop=False)


def _count_ops(nodes, bodies, in_loop):
    ops = elements = 0
    for node in nodes:
        if node.op in BOOKKEEPING:
            continue
        if node.op in ("While", "StatelessWhile"):
            # a loop inside a loop counts once per outer step: an approximation
            body_ops, body_elements = _count_ops(bodies.get(node.attr["body"].func.name, []), bodies, in_loop=True)
            ops, elements = ops + body_ops, elements + body_elements
        elif in_loop:
            ops += 1
            elements += sum(_known_elements(shape) for shape in node.attr["_output_shapes"].list.shape)
    return ops, elements


def _known_elements(shape):
    """Elements per sample of a traced tensor shape: the product of its known dimensions (the batch is unknown)."""
    if shape.unknown_rank:
        return 0
    return math.prod(d.size for d in shape.dim if d.size >= 0)


def _leaf_layers(model):
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:
            yield from _leaf_layers(layer)
        else:
            yield layer
