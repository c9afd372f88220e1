"""The TensorFlow backend: the same two halves as backends/horovod.py, on TensorFlow's own collective ops
(backends/tf_ops.py). Nothing to build: every TensorFlow wheel has them.

- kernel side: no server of its own; each rank's engine names the address its collective server has (or will
  have), and the kernel hands every rank the same ordered list;
- engine side: forming the group, and the collectives the Keras hooks need, with Horovod's signatures.
"""

import os
import random
import socket

from jupyter_dl.backends import tf_ops
from jupyter_dl.backends.counting import counting_calls
from jupyter_dl.backends.gradients import average_present, value_of

NAME = "tf"
SETUP_HINT = "TensorFlow's collectives need only TensorFlow (pip install tensorflow)"
# Not from a host cut off: aborting collectives that wait on it blocks in TensorFlow with the GIL held (the process
# freezes until the cut host's RPCs time out); the coordination service's heartbeats end them within HEARTBEAT_S.
RELEASED_FROM_SILENT_HOSTS = False
# Seconds without a heartbeat before a rank counts as gone and every rank's collectives are aborted.
HEARTBEAT_S = 10.0
REGISTER_MIN_S = 60.0  # seconds every rank may take to join a new group


def check_installed():
    import importlib.util

    from jupyter_dl.errors import BackendMissing

    # Found, not imported: importing takes the kernel seconds the first cell would wait for, and the engines import
    # it anyway (a TensorFlow that fails to load is reported by them, in the job).
    try:
        found = importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise BackendMissing(f"TensorFlow is not installed; {SETUP_HINT}")


def preload():
    """Import TensorFlow and Keras on an idle engine, in the background, so the first job starts at once."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras  # noqa: F401
    import tensorflow  # noqa: F401
    from keras.src.optimizers import base_optimizer  # noqa: F401  (what the zero-code hooks patch)
    from keras.src.trainers import trainer  # noqa: F401


# ----------------------------------------------------------------------------------------------- kernel side


class Rendezvous:
    """The group's addresses for one job: what each rank's engine reports (`remote.TF_ADDRESS`), kept when every
    rank still belongs to the same usable group (no new context: faster, nothing leaks), fresh otherwise."""

    port = None  # no server in the kernel: ranks reach each other, not the kernel

    def __init__(self, hosts_by_rank, timeout_s, client=None, ids=()):
        self._timeout_s = timeout_s
        self._client, self._ids = client, list(ids)

    @property
    def peer_loss_s(self) -> float:
        """Seconds before the other ranks see that a rank is gone (its heartbeats stop): an elastic job's
        survivors are left that long to leave on their own before they are killed."""
        return min(HEARTBEAT_S, self._timeout_s)

    def environments(self, address, interfaces):
        from jupyter_dl.wire import remote

        asked = [  # every engine at once: one round trip, not one per rank
            self._client[eid].apply_async(remote.TF_ADDRESS, interface) for eid, interface in zip(self._ids, interfaces)
        ]
        reports = [answer.get(timeout=self._timeout_s) for answer in asked]
        size = len(reports)
        groups = [None if r["formed"] is None else (list(r["formed"][0]), r["formed"][1]) for r in reports]
        kept = groups[0][0] if groups[0] is not None else None
        reuse = kept is not None and len(kept) == size and all(g == (kept, rank) for rank, g in enumerate(groups))
        addresses = kept if reuse else [r["fresh"] for r in reports]
        return [
            {
                "JDL_TF_ADDRESSES": ",".join(addresses),
                "JDL_TF_RANK": str(rank),
                "JDL_TF_REUSE": "1" if reuse else "0",
                # Forming a group waits for every rank, a fresh engine still importing TensorFlow included: not
                # less than a minute, however short the collective timeout.
                "JDL_TF_REGISTER_S": str(max(self._timeout_s, REGISTER_MIN_S)),
                # A peer that stops answering counts as gone after a heartbeat, or sooner when the collective
                # timeout is shorter (c.JobRunner.collective_timeout, as gloo's bounds Horovod's wait).
                "JDL_TF_HEARTBEAT_S": str(min(HEARTBEAT_S, self._timeout_s)),
            }
            for rank in range(size)
        ]

    def stop(self):
        pass


# ----------------------------------------------------------------------------------------------- engine side


def address(interface=""):
    """Where this engine's collective server is, if it has a usable group, and a fresh address for a new one."""
    return {"formed": tf_ops.formed(), "fresh": f"{_host(interface)}:{_free_port()}"}


_ports = random.Random()  # its own generator: the notebook's seeded `random` state is the cell's, on every rank


def _free_port() -> int:
    """A port free now, which the new server binds moments (or, while a group forms, seconds) later. Below the
    ephemeral range: a port bound to 0 comes from that range, where any process's next outgoing connection may take
    it first ("Could not start gRPC server" under load)."""
    low = _ephemeral_range()[0]
    for _ in range(50):
        port = _ports.randrange(20000, low) if low > 20000 else 0
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _ephemeral_range() -> tuple:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            low, high = (int(p) for p in ports.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _host(interface):
    """The address other ranks reach this engine at: loopback when every rank is on this host ("lo"), the named
    interface's, or else the one this host uses on its route to the controller (every engine reaches the controller,
    so that network joins the hosts, as the kernel's route does for Horovod)."""
    if interface == "lo":
        return "127.0.0.1"
    if interface:
        import psutil

        for entry in psutil.net_if_addrs().get(interface, []):
            if entry.family == socket.AF_INET:
                return entry.address
    return _source_address_toward(_controller_host()) or socket.gethostbyname(socket.gethostname())


def _controller_host():
    from urllib.parse import urlparse

    from ipyparallel.engine.app import IPEngine

    if not IPEngine.initialized():  # not in an ipyparallel engine (a test calling this directly)
        return None
    return urlparse(IPEngine.instance().registration_url).hostname


def _source_address_toward(host):
    """This host's address on its route to `host` (a UDP connect sends nothing; it only picks the route)."""
    if not host:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((host, 9))
        except OSError:
            return None
        return probe.getsockname()[0]


def init(environment: dict) -> bool:
    """Join this job's group. Returns True when that took a new TensorFlow context: objects built before it (models
    received earlier) must be rebuilt."""
    addresses = environment["JDL_TF_ADDRESSES"].split(",")
    kept = tf_ops.form(
        int(environment["JDL_TF_RANK"]),
        len(addresses),
        addresses,
        heartbeat_s=float(environment.get("JDL_TF_HEARTBEAT_S", HEARTBEAT_S)),
        register_s=float(environment.get("JDL_TF_REGISTER_S", 120)),
        reuse=environment.get("JDL_TF_REUSE") == "1",
    )
    if not kept:
        import keras

        keras.backend.clear_session()  # Keras' global state (its random generator) belonged to the old context
    return not kept


def shutdown(failed=False):
    tf_ops.leave(failed)


def release_peers(message):
    """A peer's engine died (the kernel saw it): end this rank's collectives now.
    TensorFlow notices a peer gone outside a collective only when its heartbeats have stopped for HEARTBEAT_S.
    Callable from any thread."""
    if tf_ops.formed() is None:
        return False
    tf_ops.abort(message)
    return True


def rank_and_size():
    group = tf_ops.current()
    return group.rank, group.size


def average_gradients(grads, weight=None, name="jdl_grads", timer=None):
    """As Horovod's, on one packed allreduce per dtype (collectives match by order: `name` is not needed)."""
    return average_present(grads, lambda dense: tf_ops.allreduce(dense, "average"), weight, timer)


def broadcast_from_root(variables, root_rank=0):
    variables = list(variables)
    if not variables:
        return
    values = tf_ops.broadcast([value_of(v) for v in variables], root_rank)
    for variable, value in zip(variables, values):
        variable.assign(value)


def allgather_object(obj, name=None):
    return tf_ops.allgather_object(obj)


def broadcast_object(obj, root_rank=0, name=None):
    return tf_ops.broadcast_object(obj, root_rank)


def average_scalars(values, name="jdl.metrics"):
    import tensorflow as tf

    return [float(v) for v in tf_ops.allreduce(tf.constant(values, dtype=tf.float64), "average").numpy()]


def allreduce(value, op="average", name=None):
    import tensorflow as tf

    return tf_ops.allreduce(tf.convert_to_tensor(value), op).numpy()


def counting_collectives(on_call):
    """Call `on_call()` each time an eager collective starts (the stall watch's progress signal)."""
    return counting_calls(tf_ops, ("allreduce", "broadcast", "allgather"), on_call)


# TensorFlow's generated op wrappers: a rank's main thread inside one of these is in a collective.
COLLECTIVE_OPS = {
    "collective_reduce_v2": "allreduce",
    "collective_gather_v2": "allgather",
    "collective_bcast_send_v2": "broadcast",
    "collective_bcast_recv_v2": "broadcast",
}


def measure_allreduce(megabytes=8, repeats=5):
    """On two ranks: allreduce bandwidth (bytes/s) of a large tensor and latency (s) of a tiny one."""
    import time

    import tensorflow as tf

    big, small = tf.zeros([megabytes * 2**20 // 4]), tf.zeros([2])
    tf_ops.allreduce(big).numpy()
    start = time.perf_counter()
    for _ in range(repeats):
        tf_ops.allreduce(big).numpy()
    per_big = (time.perf_counter() - start) / repeats
    start = time.perf_counter()
    for _ in range(repeats * 4):
        tf_ops.allreduce(small).numpy()
    per_small = (time.perf_counter() - start) / (repeats * 4)
    size = tf_ops.current().size
    moved = 2 * (size - 1) / size * megabytes * 2**20
    return moved / max(per_big - per_small, 1e-6), per_small / (2 * (size - 1))
