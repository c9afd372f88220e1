"""A `tf.data` pipeline built in the notebook goes to the ranks as its graph.

TensorFlow serialises a dataset's graph (every step, the functions `map` traced, the file names it reads); the
receiver rebuilds the dataset from that graph, and it is sharded there like one built in the cell. Arrays a
pipeline was built from (`from_tensor_slices(x)`) are constants inside the graph: large ones are taken out and
travel beside it as ordinary values, content-hashed, so an engine that has them already is not sent them again.

Python code inside a pipeline (`from_generator`, `py_function`, `numpy_function`) lives in this process only and
cannot travel: such a pipeline is refused before anything starts, naming the step.

Kernel and engines both import this module: it is the wire format for datasets.
"""

import hashlib
import os
import re
import socket
from dataclasses import dataclass, field

from jupyter_dl.wire.construction import first_line

ARRAY_PREFIX = "_jdl_array_"
_INLINE_BYTES = 64 * 1024  # smaller constants stay in the graph
_PYTHON_OPS = {"PyFunc": "py_function", "PyFuncStateless": "numpy_function", "EagerPyFunc": "py_function"}
# Stateful ops a pipeline may hold and still travel: random draws, and reading and advancing a Keras seed state.
_RANDOM_OPS = {
    "RandomUniform",
    "RandomUniformInt",
    "RandomStandardNormal",
    "TruncatedNormal",
    "RandomShuffle",
    "Multinomial",
    "RandomGamma",
    "RandomPoisson",
    "RandomPoissonV2",
    "RandomCrop",
    "Assert",
    "ReadVariableOp",
    "AssignVariableOp",
    "StatefulPartitionedCall",
}
# Control flow is stateful when a branch or body is (keras.io SimSiam's `if tf.random.uniform([]) < p:` in a map,
# an `If` under AutoGraph); those bodies are functions of the graph's library, checked with all the others.
_CONTROL_FLOW_OPS = {"If", "While", "Case"}


@dataclass
class DatasetPayload:
    graph: bytes  # a serialised GraphDef whose large constants are emptied
    element_spec: object
    arrays: dict = field(default_factory=dict)  # node name -> name of the array that travels beside the graph
    paths: list = field(default_factory=list)  # a few of the files it reads, to check on arrival


def is_dataset(value) -> bool:
    return any(c.__name__ == "DatasetV2" and c.__module__.startswith("tensorflow") for c in type(value).__mro__)


class PipelineError(TypeError):
    """A pipeline that cannot leave this process: why, and what to do."""

    def __init__(self, why: str, advice: str):
        self.why, self.advice = why, advice
        super().__init__(f"{why}; {advice}")


def pipeline_graph(dataset):
    """The dataset's pipeline as a GraphDef, its steps as nodes (state such as a map's variables left out)."""
    import tensorflow as tf
    from tensorflow.python.data.ops.options import ExternalStatePolicy

    serialized = dataset._as_serialized_graph(external_state_policy=ExternalStatePolicy.IGNORE).numpy()
    return tf.compat.v1.GraphDef.FromString(serialized)


def dumps(value) -> tuple[DatasetPayload, dict]:
    """(payload, {array name: array}) for a dataset; raises PipelineError naming a step that cannot travel."""
    import tensorflow as tf
    from tensorflow.python.data.ops.options import ExternalStatePolicy

    graph = pipeline_graph(value)
    step = _python_step(graph)
    if step is not None:
        raise PipelineError(
            f"its pipeline runs Python code ({step}), which cannot leave this process",
            "build the dataset inside the %%distribute cell, or from arrays or files (from_tensor_slices, "
            "TFRecordDataset, image_dataset_from_directory)",
        )
    try:
        # FAIL, not the default WARN: a map that captures a tf.Variable or a random Generator would be shipped and
        # break only at fit on the engines.
        value._as_serialized_graph(external_state_policy=ExternalStatePolicy.FAIL)
    except Exception as exc:
        if not _only_random_state(value, graph):
            found = re.search(r"pipeline graph: (.*?)( \[Op:|$)", str(exc))
            raise PipelineError(
                f"its pipeline holds state of this process ({found.group(1) if found else first_line(exc)})",
                "build the dataset inside the %%distribute cell, or without variables in its map functions",
            ) from None
    arrays, beside = {}, {}
    for node in graph.node:
        if node.op != "Const":
            continue
        tensor = node.attr["value"].tensor
        if len(tensor.tensor_content) < _INLINE_BYTES or tensor.dtype == tf.string.as_datatype_enum:
            continue  # strings (file names) stay: make_ndarray cannot read them from tensor_content
        array = tf.make_ndarray(tensor)
        name = ARRAY_PREFIX + _content_hash(array)
        beside[name] = array
        arrays[node.name] = name
        tensor.ClearField("tensor_content")
    payload = DatasetPayload(graph.SerializeToString(), value.element_spec, arrays, _file_paths(graph))
    return payload, beside


def loads(payload: DatasetPayload, resolve):
    """The dataset, rebuilt from its graph; `resolve(name)` gives an array that travelled beside it."""
    import tensorflow as tf
    from tensorflow.python.data.ops.dataset_ops import _VariantDataset

    graph = tf.compat.v1.GraphDef.FromString(payload.graph)
    if payload.arrays:
        for node in graph.node:
            if node.name in payload.arrays:
                node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(resolve(payload.arrays[node.name])))
    unseen = [p for p in payload.paths if not os.path.exists(p)]
    if unseen:
        raise FileNotFoundError(
            f"it reads {unseen[0]}, which {socket.gethostname()} cannot see; put the files where every host "
            "sees them at the same path (a shared filesystem)"
        )
    variant = tf.raw_ops.DatasetFromGraph(graph_def=graph.SerializeToString())
    return _VariantDataset(variant, payload.element_spec)


def _only_random_state(dataset, graph) -> bool:
    """Whether the only state of this process the pipeline's maps hold is randomness: random ops
    (`tf.image.random_flip_left_right`, as TensorFlow's augmentation tutorial maps) and Keras random layers' seed
    state (`RandomFlip`, `RandomRotation`... as keras.io's maps). Those travel as they are, a seed state as its
    current value, so each rank draws from its own copy as one process would draw on; a variable of the user's
    (or a tf.random.Generator) is refused: the cell could change the notebook's copy and the ranks would not see it."""
    from tensorflow.python.framework import op_def_registry

    variables, pending = [], [dataset]
    while pending:
        step = pending.pop()
        for function in step._functions():
            variables.extend(function.function.graph.variables)
        pending.extend(step._inputs())
    if not all(v.name.rsplit("/", 1)[-1].startswith("seed_generator_state") for v in variables):
        return False
    inside = {node.op for function in graph.library.function for node in function.node_def}
    stateful = {op for op in inside if getattr(op_def_registry.get(op), "is_stateful", True)}
    return stateful <= _RANDOM_OPS | _CONTROL_FLOW_OPS and "ReadVariableOp" not in {node.op for node in graph.node}


def _python_step(graph) -> str | None:
    """The first step that runs Python, in the user's words, or None."""
    functions = list(graph.library.function)
    if any("from_generator" in f.signature.name for f in functions):
        return "Dataset.from_generator"
    for function in functions:
        for node in function.node_def:
            if node.op in _PYTHON_OPS:
                return f"tf.{_PYTHON_OPS[node.op]} in {_step_name(function.signature.name)}"
    for node in graph.node:
        if node.op in _PYTHON_OPS:
            return f"tf.{_PYTHON_OPS[node.op]}"
    return None


def _step_name(function_name: str) -> str:
    """'__inference_Dataset_map_lambda_54' -> 'Dataset.map'."""
    parts = function_name.split("_Dataset_", 1)
    if len(parts) == 2:
        return "Dataset." + parts[1].split("_", 1)[0]
    return function_name


def _file_paths(graph, limit=3) -> list:
    """A few absolute file paths among the graph's string constants (the files a file dataset reads)."""
    import numpy as np
    import tensorflow as tf

    found = []
    for node in graph.node:
        tensor = node.attr["value"].tensor
        if node.op != "Const" or tensor.dtype != tf.string.as_datatype_enum:
            continue
        # parse_tensor reads a string tensor kept in either form (string_val or packed tensor_content).
        # A scalar comes back as bytes, not an array (a lookup table's '' mask token): np.asarray covers both.
        strings = np.asarray(tf.io.parse_tensor(tensor.SerializeToString(), tf.string).numpy()).reshape(-1)[:limit]
        for item in strings:
            text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            if os.path.isabs(text) and os.path.exists(text):
                found.append(text)
        if len(found) >= limit:
            break
    return found[:limit]


def _content_hash(array) -> str:
    import numpy as np

    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{array.shape}{array.dtype.str}".encode())
    digest.update(np.ascontiguousarray(array).data if array.dtype != object else repr(array.tolist()).encode())
    return digest.hexdigest()
