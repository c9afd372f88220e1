"""The one Horovod seam. Everything that names Horovod lives here; the job runner and Keras hooks stay backend-neutral.

Two halves, imported lazily so neither side pays for the other:
- kernel side: a rendezvous server and the per-rank environment (what horovodrun would set for each process);
- engine side: (re)initialisation and the three collectives the Keras hooks need.
"""

import contextlib
import os

from jupyter_dl.backends.counting import counting_calls
from jupyter_dl.backends.gradients import average_present, value_of

NAME = "horovod"
SETUP_HINT = "run `jupyter-dl install-horovod` to build Horovod against this TensorFlow with gloo"
# An elastic job's survivors can end their waits on a host cut off (release_peers cuts gloo's connections)
RELEASED_FROM_SILENT_HOSTS = True


def check_installed():
    """Raise BackendMissing with the fix when Horovod cannot run TensorFlow jobs over gloo. The check imports
    TensorFlow into the kernel (seconds the first cell of every new kernel waited for, the engines importing it
    anyway), so a build that passed once is not checked again: the same Horovod library, TensorFlow files and
    Python (a rebuild or upgrade is checked anew; the engines report whatever fails in the job)."""
    from jupyter_dl.errors import BackendMissing

    build = _build_fingerprint()
    if build is not None and build in _passed_builds():
        return
    try:
        import horovod  # noqa: F401
    except ImportError:
        raise BackendMissing(f"Horovod is not installed; {SETUP_HINT}") from None
    try:
        with _native_stderr_muted():
            import horovod.tensorflow as hvd
    except Exception as exc:  # built without TF, or against another TF: the extension fails to load
        raise BackendMissing(f"Horovod cannot load its TensorFlow ops ({exc}); {SETUP_HINT}") from None
    if not hvd.gloo_built():
        raise BackendMissing(f"Horovod was built without gloo; {SETUP_HINT}")
    if build is not None:
        _remember_passed(build)


def _build_fingerprint():
    """What a passed check holds for: Horovod's TensorFlow library and TensorFlow's own files (size, time) and the
    Python running them; None when they cannot be found without importing them."""
    import glob
    import importlib.util
    import sys

    try:
        horovod_tf = importlib.util.find_spec("horovod.tensorflow")
        tensorflow = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return None
    if horovod_tf is None or tensorflow is None or not horovod_tf.submodule_search_locations or not tensorflow.origin:
        return None
    libraries = sorted(glob.glob(os.path.join(horovod_tf.submodule_search_locations[0], "mpi_lib*.so")))
    if not libraries:
        return None
    files = [os.stat(path) for path in (libraries[0], tensorflow.origin)]
    return "|".join([sys.executable, libraries[0], tensorflow.origin, *(f"{s.st_size}:{s.st_mtime_ns}" for s in files)])


def _checks_file() -> str:
    from jupyter_dl.host import cache

    return os.path.join(cache.cache_dir(), "checks", "horovod-passed.json")


def _passed_builds() -> list:
    import json

    try:
        with open(_checks_file()) as f:
            return list(json.load(f))
    except (OSError, ValueError):
        return []


def _remember_passed(build: str):
    import json

    path = _checks_file()
    builds = [b for b in _passed_builds() if b != build][-9:] + [build]  # a few environments each
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}"  # two kernels may write at once: each replaces the file whole
        with open(partial, "w") as f:
            json.dump(builds, f)
        os.replace(partial, path)
    except OSError:  # a read-only home: the check runs again next time
        pass


@contextlib.contextmanager
def _native_stderr_muted():
    """TensorFlow's C++ start-up chatter goes to file descriptor 2, which a notebook kernel shows in the cell.
    Mute that descriptor while TF loads for the first time; Python errors are raised, not printed, so none is lost."""
    import sys

    if "tensorflow" in sys.modules:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def preload():
    """Import TensorFlow, Keras and Horovod on an idle engine, in the background, so the first job starts at once.
    Outside a job the engine's native stderr goes to its own log, so nothing needs muting here."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod.tensorflow  # noqa: F401  (imports TensorFlow)
    import keras
    import tensorflow as tf
    from keras.src.optimizers import base_optimizer  # noqa: F401  (what the zero-code hooks patch)
    from keras.src.trainers import trainer  # noqa: F401

    keras.ops.convert_to_numpy(tf.constant(0.0) + 1.0)  # the eager context and its devices start on the first op


# ----------------------------------------------------------------------------------------------- kernel side


class Rendezvous:
    """A gloo rendezvous server in the kernel for one job; ranks find each other through it. It listens on every
    address of this host; which one the ranks use is decided afterwards (kernel/job/route.py), once it runs."""

    def __init__(self, hosts_by_rank, timeout_s, client=None, ids=()):
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.gloo_run import create_slot_env_vars
        from horovod.runner.http.http_server import RendezvousServer

        slots = {}
        for host in hosts_by_rank:
            slots[host] = slots.get(host, 0) + 1
        # Horovod's own assignment keeps each host's ranks contiguous; ranks are then matched to engines by host.
        plan = get_host_assignments(parse_hosts(",".join(f"{h}:{n}" for h, n in slots.items())), len(hosts_by_rank))
        from jupyter_dl.backends.horovod_rendezvous import WaitingRendezvousHandler

        self._server = RendezvousServer(verbose=0)
        self.port = self._server.start(handler_cls=WaitingRendezvousHandler)
        self._server.init(plan)
        self.slots = plan
        self._timeout_s = timeout_s
        self._slot_environments = [create_slot_env_vars(slot) for slot in plan]

    # gloo sees a dead peer's closed connection at once; its collective timeout bounds the rest (a lost host).
    peer_loss_s = 0.0

    def environments(self, address, interfaces):
        """Each rank's environment (what horovodrun would set): the server's address, and the rank's own interface
        for gloo, which may be named differently on every host."""
        from horovod.runner.gloo_run import create_run_env_vars

        environments = []
        for slot_environment, interface in zip(self._slot_environments, interfaces):
            common = create_run_env_vars(address, [interface], self.port)
            common["HOROVOD_GLOO_TIMEOUT_SECONDS"] = int(self._timeout_s)
            environments.append({k: str(v) for k, v in {**common, **slot_environment}.items()})
        return environments

    def stop(self):
        # socketserver's shutdown waits out its 0.5 s poll: a third of a short job. Nobody needs to wait for it.
        import threading

        def stop_and_close():
            self._server.stop()
            httpd = getattr(self._server, "_httpd", None)
            if httpd is not None:
                httpd.server_close()  # shutdown alone leaves the listening socket open until collected

        threading.Thread(target=stop_and_close, daemon=True, name="jdl-rendezvous-stop").start()


# ----------------------------------------------------------------------------------------------- engine side


_GROUP_CONNECTIONS: set = set()  # (local, remote) of the TCP connections the last hvd.init opened: gloo's pairs


def init(environment: dict) -> bool:
    """(Re)initialise Horovod on this engine for a new job. Persistent engines run many jobs in turn. Objects built
    before stay valid (returns False: nothing to rebuild)."""
    with _native_stderr_muted():  # TensorFlow's start-up chatter would land in the first job's cell
        import horovod.tensorflow as hvd

    if hvd.is_initialized():
        hvd.shutdown()
    from jupyter_dl.backends import peer_connections

    os.environ.update(environment)
    before = peer_connections.established()
    hvd.init()
    # gloo connects every pair of ranks inside init (the rendezvous' own connections are closed by then)
    _GROUP_CONNECTIONS.clear()
    _GROUP_CONNECTIONS.update(peer_connections.established() - before)
    return False


def shutdown(failed=False):
    """Leave the job. Horovod tells every other rank, so peers blocked in a collective get an error, not a hang."""
    import horovod.tensorflow as hvd

    if hvd.is_initialized():
        hvd.shutdown()


def release_peers(message):
    """A peer was lost (the kernel saw its engine die or its host go silent): end this rank's waits on any peer now,
    by cutting the connections this group's init opened (backends/peer_connections.py). Gloo sees a dead peer's
    connections close at once, but not a silent host's, nor those of a survivor that left before this rank.
    Callable from any thread."""
    from jupyter_dl.backends import peer_connections

    return peer_connections.cut(_GROUP_CONNECTIONS) > 0


def rank_and_size():
    import horovod.tensorflow as hvd

    return hvd.rank(), hvd.size()


def average_gradients(grads, weight=None, name="jdl_grads", timer=None):
    """Average a list of gradients (None kept in place) across ranks in one fused collective. `weight` (a scalar
    variable) scales this rank's gradients first: its share of the global batch when ranks' batches differ. `timer`
    (a float64 variable) accumulates the seconds this rank spent in the collective: waiting for the other ranks'
    gradients, then exchanging them (the summary's compute vs allreduce split)."""
    import horovod.tensorflow as hvd

    # Horovod matches tensors across ranks by name. Left to itself it derives names from Keras' auto-generated
    # layer names, which differ between engines with different histories (`dense_3` here, `dense` on a fresh
    # engine) and then every rank waits forever. A fixed name, outside any name scope, is the same everywhere; each
    # optimizer has its own (two updates in one traced step, as in a GAN, would otherwise collide).
    return average_present(
        grads,
        lambda dense: hvd.grouped_allreduce(dense, op=hvd.Average, name=name, ignore_name_scope=True),
        weight,
        timer,
    )


# One Horovod op per variable costs a negotiation cycle each, in turn: 160 variables took 2.1-3.1 s to broadcast
# one by one against 0.3-0.8 s packed (2 ranks, this machine under load); a ResNet-50 has over 300. Packs are
# bounded so a large model is not copied whole at once.
PACK_BYTES = 64 << 20


def broadcast_from_root(variables, root_rank=0):
    """Overwrite each variable with rank 0's value (eager; Keras 3 variables, not tf.Variable refs): one broadcast
    per pack of same-dtype variables, at most PACK_BYTES each."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    for n, pack in enumerate(_packs([(var, value_of(var)) for var in variables])):
        flat = tf.concat([tf.reshape(value, [-1]) for _, value in pack], 0)
        flat = hvd.broadcast(flat, root_rank=root_rank, name=f"jdl.bcast.{n}")
        sizes = [value.shape.num_elements() for _, value in pack]
        for (var, value), piece in zip(pack, tf.split(flat, sizes, 0)):
            var.assign(tf.reshape(piece, value.shape))


def _packs(pairs):
    """(variable, value) pairs grouped by dtype, in their order, cut where a pack would pass PACK_BYTES."""
    packs: list = []
    open_pack: dict = {}  # dtype -> (the pack being filled, its bytes)
    for var, value in pairs:
        size = value.shape.num_elements() * value.dtype.size
        pack, filled = open_pack.get(value.dtype, (None, 0))
        if pack is None or (pack and filled + size > PACK_BYTES):
            pack, filled = [], 0
            packs.append(pack)
        pack.append((var, value))
        open_pack[value.dtype] = (pack, filled + size)
    return packs


def allgather_object(obj, name=None):
    """Every rank's picklable object, in rank order, on every rank."""
    import horovod.tensorflow as hvd

    return hvd.allgather_object(obj, name=name)


def broadcast_object(obj, root_rank=0, name=None):
    """Rank 0's picklable object, on every rank."""
    import horovod.tensorflow as hvd

    return hvd.broadcast_object(obj, root_rank=root_rank, name=name)


def average_scalars(values, name="jdl.metrics"):
    """Average a list of floats across ranks."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    reduced = hvd.allreduce(tf.constant(values, dtype=tf.float64), op=hvd.Average, name=name)
    return [float(v) for v in reduced.numpy()]


def allreduce(value, op="average", name=None):
    """Plain allreduce of an array-like, for users' and tests' own code."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    ops = {"average": hvd.Average, "sum": hvd.Sum, "min": hvd.Min, "max": hvd.Max}
    return hvd.allreduce(tf.convert_to_tensor(value), op=ops[op], name=name).numpy()


def counting_collectives(on_call):
    """Call `on_call()` each time an eager Horovod op starts, for the duration (the stall watch's progress signal:
    a new collective call is progress, however its frame object's identity happens to repeat)."""
    from horovod.tensorflow import mpi_ops

    return counting_calls(mpi_ops.MPI_LIB, COLLECTIVE_OPS, on_call)


# The generated wrappers of Horovod's TensorFlow ops: a rank's main thread inside one of these is in a collective.
COLLECTIVE_OPS = {
    "horovod_allreduce": "allreduce",
    "horovod_grouped_allreduce": "allreduce",
    "horovod_broadcast": "broadcast",
    "horovod_allgather": "allgather",
    "horovod_grouped_allgather": "allgather",
    "horovod_alltoall": "alltoall",
    "horovod_reducescatter": "reducescatter",
    "horovod_grouped_reducescatter": "reducescatter",
    "horovod_join": "join",
    "horovod_barrier": "barrier",
}


def measure_allreduce(megabytes=8, repeats=5):
    """On two ranks: allreduce bandwidth (bytes/s) of a large tensor and latency (s) of a tiny one."""
    import time

    import horovod.tensorflow as hvd
    import tensorflow as tf

    big = tf.zeros([megabytes * 2**20 // 4])
    small = tf.zeros([2])
    hvd.allreduce(big, name="jdl.bw.warm")
    start = time.perf_counter()
    for i in range(repeats):
        hvd.allreduce(big, name=f"jdl.bw.{i}")
    per_big = (time.perf_counter() - start) / repeats
    start = time.perf_counter()
    for i in range(repeats * 4):
        hvd.allreduce(small, name=f"jdl.lat.{i}")
    per_small = (time.perf_counter() - start) / (repeats * 4)
    size = hvd.size()
    moved = 2 * (size - 1) / size * megabytes * 2**20
    return moved / max(per_big - per_small, 1e-6), per_small / (2 * (size - 1))
