"""TensorFlow's own cross-process collective ops, used directly (the ones MultiWorkerMirroredStrategy runs on: ring
all-reduce over gRPC on CPU, NCCL on GPU), without the strategy, whose Keras integration is broken on Keras 3.

One process per rank, one device per process. How a group is formed, and why each step (tried here, TF 2.21):
- `collective_group_leader` is set in the ServerDef's session config: without a leader every task takes itself for
  the leader and the first collective waits forever (`configure_collective_ops`, the strategy's way, raises in a
  process whose context already runs);
- TF's coordination service, led by rank 0, with heartbeats: forming the group waits for every rank (bounded), and a
  rank that dies or hangs aborts every rank's collectives (a killed peer is seen in ~0.1 s, a hung one within the
  heartbeat timeout) instead of leaving them blocked; `abort` reports through it;
- an eager context's collective server is fixed: another group (a new size, another rank, after an abort) needs a new
  context (`context._reset_context()`) and a new port; the old server cannot be stopped (~100 threads and ~65 MB stay
  with the process), so a group is kept as long as jobs reuse it, each job on a new group key;
- instance keys come from a counter variable, drawn at run time in eager and traced code alike, so every execution
  of a collective (in a loop, a cond branch, Keras' steps_per_execution) takes the next key in program order: ranks
  running the same sequence of collectives agree, as with Horovod's names;
- `jit_compile` must stay off (XLA has no CPU collectives); the Keras hooks already keep it off.
"""

import contextlib
import copy
import logging
import pickle

JOB = "worker"
_OPS = {
    "average": ("Add", "Div"),
    "mean": ("Add", "Div"),
    "sum": ("Add", "Id"),
    "min": ("Min", "Id"),
    "max": ("Max", "Id"),
}
# More subdivisions of the ring per device: 1.5-2x TF's default bandwidth at 100 MiB on CPU (bench/backends.py).
MAX_SUBDIVS_CPU = 16


class _Group:
    """The collective group this process belongs to: its devices, keys and counter."""

    def __init__(self, rank, size, addresses, device, group_key):
        import tensorflow as tf
        from tensorflow.python.framework import ops

        self.rank, self.size, self.addresses = rank, size, tuple(addresses)
        self.device = device
        self.group_key = group_key
        self.order = list(range(size))  # gathered position -> rank (set when the group forms)
        self.subdivs = MAX_SUBDIVS_CPU if "CPU" in device else -1
        with ops.init_scope(), ops.device(device.replace("GPU", "CPU")):  # keys live in host memory
            self.counter = tf.Variable(0, dtype=tf.int32, trainable=False, name="jdl_collective_key")
        self.usable = True


_group: "_Group | None" = None
_contexts_started = 0


def form(rank, size, addresses, *, heartbeat_s=10.0, register_s=120.0, reuse=False):
    """Join the group of `size` processes at `addresses` ('host:port' by rank, the same list on every rank). With
    `reuse`, a usable group of the same members and rank is kept (no new context: objects built since stay valid)
    and only its key changes; every rank must decide alike (the kernel does, from what each engine reports).
    Returns whether the group was kept (False: a new context, in which objects built before do not work)."""
    global _group, _contexts_started
    if reuse and _group is not None and _group.usable and (_group.addresses, _group.rank) == (tuple(addresses), rank):
        order = _group.order  # the same members: the same device-name order (the new key resolves at first use)
        _group = _Group(rank, size, addresses, _group.device, _group.group_key + 1)
        _group.order = order
        return True
    import tensorflow as tf
    from tensorflow.core.protobuf import tensorflow_server_pb2
    from tensorflow.python.eager import context

    _group = None
    ctx = context.context()
    if _contexts_started or ctx._collective_ops_server_def is not None:
        threads = ctx.intra_op_parallelism_threads, ctx.inter_op_parallelism_threads
        context._reset_context()
        ctx = context.context()
        ctx.intra_op_parallelism_threads, ctx.inter_op_parallelism_threads = threads
    leader = f"/job:{JOB}/replica:0/task:0"
    config = copy.deepcopy(ctx.config)
    config.experimental.collective_group_leader = leader
    del config.device_filters[:]
    config.device_filters.append(f"/job:{JOB}/task:{rank}")
    coordination = config.experimental.coordination_config
    coordination.service_type = "standalone"
    coordination.service_leader = leader
    coordination.enable_health_check = True
    coordination.heartbeat_timeout_in_ms = int(heartbeat_s * 1000)
    coordination.cluster_register_timeout_in_ms = int(register_s * 1000)
    coordination.shutdown_barrier_timeout_in_ms = 1000
    del coordination.coordinated_job_list[:]
    job = coordination.coordinated_job_list.add()
    job.name, job.num_tasks = JOB, size
    server_def = tensorflow_server_pb2.ServerDef(
        cluster=tf.train.ClusterSpec({JOB: list(addresses)}).as_cluster_def(),
        default_session_config=config,
        job_name=JOB,
        task_index=rank,
        protocol="grpc",
        port=int(addresses[rank].rsplit(":", 1)[1]),
    )
    with _without_startup_warning():
        ctx.enable_collective_ops(server_def)
    # TensorFlow keeps how it resolved partial device names ("cpu:0" -> /job:localhost/...) in a module-level cache
    # that enabling collective ops on a running context does not clear: a `tf.device("cpu:0")` seen by an earlier
    # job on another backend (Keras' TensorBoard callback makes one) would name a device this context no longer has.
    context._device_parsing_cache.clear()
    _contexts_started += 1
    ctx.ensure_initialized()  # starts the server and the coordination agent; waits for every rank (register_s)
    kind = "GPU" if ctx.num_gpus() else "CPU"
    _group = _Group(rank, size, addresses, f"/job:{JOB}/replica:0/task:{rank}/device:{kind}:0", 1)
    _learn_order(_group, register_s)
    return False


def _not_the_startup_warning(record) -> bool:
    return "Enabling collective ops after program startup" not in record.getMessage()


@contextlib.contextmanager
def _without_startup_warning():
    """TensorFlow warns that tensors made before collective ops were enabled may fail. The engine rebuilds what it
    received before (`form` returns False), so the warning is not the user's news, yet it reached the cell's output
    on the first job of each group."""
    quiet = logging.getLogger("absl")  # where TensorFlow's context logs it (absl.logging)
    quiet.addFilter(_not_the_startup_warning)
    try:
        yield
    finally:
        quiet.removeFilter(_not_the_startup_warning)


def contexts_started() -> int:
    """How many collective contexts this process has made. TensorFlow cannot stop a collective server: each context
    leaves its threads and memory behind (about 100 threads and 40 MB here), so the kernel replaces worn engines."""
    return _contexts_started


def release() -> bool:
    """Back to a plain local context, for a job on another backend: devices here are named for the group
    (/job:worker/...), which other backends' ops do not know. Returns whether the context changed (objects built in
    the old one must be rebuilt)."""
    global _group
    if not _contexts_started:
        return False
    from tensorflow.python.eager import context

    if context.context()._collective_ops_server_def is None:
        return False
    _group = None
    threads = context.context().intra_op_parallelism_threads, context.context().inter_op_parallelism_threads
    context._reset_context()
    context.context().intra_op_parallelism_threads, context.context().inter_op_parallelism_threads = threads
    return True


def _learn_order(group, timeout_s):
    """The first collective resolves the group; it also says in which order a gather concatenates (sorted device
    names: 'task:10' before 'task:2'), which `allgather` undoes."""
    import tensorflow as tf

    gathered = allgather(tf.constant([group.rank], tf.int64), timeout=timeout_s, in_rank_order=False)
    group.order = [int(r) for r in gathered.numpy()]


def current() -> _Group:
    if _group is None:
        raise RuntimeError("no collective group: this engine is not running a job on TensorFlow's collectives")
    return _group


def formed() -> tuple | None:
    """(addresses, rank) of the usable group this process belongs to, or None."""
    return (list(_group.addresses), _group.rank) if _group is not None and _group.usable else None


def leave(failed=False, message="a peer left the job"):
    """End this rank's part in the job. After a failure, every peer's collectives are aborted (they get an error at
    once instead of waiting out the heartbeat), and this group is not used again."""
    if _group is None:
        return
    if failed:
        abort(message)


def abort(message="aborted"):
    """Abort every pending and future collective of this group, here and (through the coordination service) on
    every rank; callable from another thread while the main one is blocked in a collective."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import errors

    group = current()
    group.usable = False
    ctx = context.context()
    if group.size > 1:
        try:
            ctx.report_error_to_cluster(errors.UNAVAILABLE, message)
        except Exception:  # the service may be gone already
            pass
    ctx.abort_collective_ops(errors.UNAVAILABLE, message)


def _next_key(group):
    return group.counter.assign_add(1)


def allreduce(values, op="average", timeout=0.0):
    """Reduce a tensor or a list of tensors across ranks (a list goes as one collective per dtype); same structure
    back. Eager or traced."""
    import tensorflow as tf
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import collective_ops

    group = current()
    single = not isinstance(values, (list, tuple))
    tensors = [tf.convert_to_tensor(t) for t in ([values] if single else values)]
    merge, final = _OPS[op]
    out = [None] * len(tensors)
    with ops.device(group.device):
        for indices in _by_dtype(tensors).values():
            parts = [tensors[i] for i in indices]
            flat = tf.concat([tf.reshape(t, [-1]) for t in parts], 0)
            if group.size > 1:
                flat = collective_ops.all_reduce_v2(
                    flat,
                    group.size,
                    group.group_key,
                    _next_key(group),
                    merge_op=merge,
                    final_op=final,
                    timeout=timeout,
                    max_subdivs_per_device=group.subdivs,
                )
            for i, piece in zip(indices, tf.split(flat, _split_sizes(parts), 0)):
                out[i] = tf.ensure_shape(tf.reshape(piece, tf.shape(tensors[i])), tensors[i].shape)
    return out[0] if single else out


def _split_sizes(parts):
    """Each part's element count: static where every shape is known, else computed when the op runs (a traced
    train step can hold gradients whose static shape is unknown, e.g. an embedding's densified IndexedSlices)."""
    import tensorflow as tf

    counts = [t.shape.num_elements() for t in parts]
    return counts if None not in counts else tf.stack([tf.size(t, out_type=tf.int64) for t in parts])


def broadcast(values, root=0, timeout=0.0):
    """Root's tensors on every rank (others' give only shapes and dtypes); one collective per dtype."""
    import tensorflow as tf
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import collective_ops

    group = current()
    single = not isinstance(values, (list, tuple))
    tensors = [tf.convert_to_tensor(t) for t in ([values] if single else values)]
    out = [None] * len(tensors)
    with ops.device(group.device):
        for dtype, indices in _by_dtype(tensors).items():
            parts = [tensors[i] for i in indices]
            sizes = [_elements(t) for t in parts]
            if group.size == 1:
                flat = tf.concat([tf.reshape(t, [-1]) for t in parts], 0)
            elif group.rank == root:
                flat = collective_ops.broadcast_send_v2(
                    tf.concat([tf.reshape(t, [-1]) for t in parts], 0),
                    group.size,
                    group.group_key,
                    _next_key(group),
                    timeout=timeout,
                )
            else:
                flat = collective_ops.broadcast_recv_v2(
                    [sum(sizes)], dtype, group.size, group.group_key, _next_key(group), timeout=timeout
                )
            for i, piece in zip(indices, tf.split(flat, sizes, 0)):
                out[i] = tf.reshape(piece, tf.shape(tensors[i]))
    return out[0] if single else out


def allgather(tensor, timeout=0.0, in_rank_order=True):
    """Every rank's tensor concatenated along axis 0, in rank order; the first dimension may differ between ranks."""
    import tensorflow as tf
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import collective_ops

    group = current()
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])
    if group.size == 1:
        return tf.identity(tensor)

    def gather(x):
        return collective_ops.all_gather_v2(x, group.size, group.group_key, _next_key(group), timeout=timeout)

    with ops.device(group.device):
        length = tf.shape(tensor, out_type=tf.int64)[:1]
        lengths = gather(length)
        longest = tf.reduce_max(lengths)
        padded = tf.pad(tensor, [[0, longest - length[0]]] + [[0, 0]] * (tensor.shape.rank - 1))
        rows = tf.reshape(
            gather(padded), tf.concat([[group.size, longest], tf.shape(tensor, out_type=tf.int64)[1:]], 0)
        )
        position = {r: p for p, r in enumerate(group.order)} if in_rank_order else {r: r for r in range(group.size)}
        return tf.concat([rows[position[r], : lengths[position[r]]] for r in range(group.size)], 0)


def allgather_object(obj):
    """Every rank's picklable object, in rank order (eager). Two collectives: every rank's byte count, then the
    bytes padded to the longest (end-of-job checks and metrics call this on every job)."""
    import numpy as np

    length, words = _words(obj)
    lengths = [int(n) for n in _gather_rows(np.array([length], np.int64))[:, 0]]
    longest = (max(lengths) + 7) // 8
    rows = _gather_rows(np.pad(words, (0, longest - len(words))))
    return [pickle.loads(rows[r].tobytes()[:n]) for r, n in enumerate(lengths)]


def _gather_rows(array):
    """Every rank's 1-D array of the same length, as rows of a NumPy array in rank order (eager)."""
    import tensorflow as tf
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import collective_ops

    group = current()
    if group.size == 1:
        return array[None]
    with ops.device(group.device):
        gathered = collective_ops.all_gather_v2(
            tf.constant(array), group.size, group.group_key, _next_key(group)
        ).numpy()
    rows = gathered.reshape(group.size, -1)
    position = {r: p for p, r in enumerate(group.order)}  # a gather concatenates in device-name order
    return rows[[position[r] for r in range(group.size)]]


def broadcast_object(obj, root=0):
    """Root's picklable object on every rank (eager)."""
    import tensorflow as tf

    group = current()
    if group.rank == root:
        length, words = _words(obj)
        broadcast(tf.constant([length], tf.int64), root)
        broadcast(tf.constant(words), root)
        return obj
    length = int(broadcast(tf.zeros([1], tf.int64), root).numpy()[0])
    words = broadcast(tf.zeros([(length + 7) // 8], tf.int64), root).numpy()
    return pickle.loads(words.tobytes()[:length])


def _words(obj):
    import numpy as np

    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data), np.frombuffer(data + b"\0" * (-len(data) % 8), dtype=np.int64)


def _elements(tensor):
    count = tensor.shape.num_elements()
    if count is None:  # a receiving rank must know what arrives before it does
        raise ValueError("a broadcast needs tensors of a known shape")
    return count


def _by_dtype(tensors):
    groups: dict = {}
    for i, tensor in enumerate(tensors):
        groups.setdefault(tensor.dtype, []).append(i)
    return groups
