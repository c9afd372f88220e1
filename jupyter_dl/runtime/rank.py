"""Engine side: what one rank does for one job. Called through ipyparallel `apply` from the kernel's job runner.

The engine process persists across jobs; each job re-initialises Horovod, runs in a fresh namespace built from the
values the kernel shipped, and returns a structured outcome instead of raising, so the kernel can tell the first
failing rank from the peers that only failed because it left.
"""

import _thread
import ast
import builtins
import contextlib
import importlib
import itertools
import linecache
import os
import signal
import socket
import sys
import threading
import time
import traceback

from jupyter_dl.backends import named, tf_ops
from jupyter_dl.host import stack_dumps
from jupyter_dl.host.processes import pid_running
from jupyter_dl.runtime import cell_figures, divergence, elastic, job_backend
from jupyter_dl.runtime.job_backend import backend
from jupyter_dl.runtime.native_stderr import NativeStderr
from jupyter_dl.runtime.probe import ProbeDone
from jupyter_dl.runtime.publish import engine_publisher
from jupyter_dl.runtime.resources import ResourceSampler
from jupyter_dl.runtime.stall_watch import StallWatch
from jupyter_dl.wire import held_keras, keras_objects, object_state, payload, random_state, summary_writers
from jupyter_dl.wire.spec import OUT_NAME, RankSpec

# Values the kernel shipped, kept across jobs so that large arrays travel once: name -> (fingerprint, value).
_BLOBS: dict = {}  # name -> the blob it was built from
_SHIPPED: dict = {}


_ORPHAN_WATCH: list = []  # the thread that ends this engine when the kernel that owns its cluster is gone
_PRELOAD: list = []  # the thread importing TensorFlow and Horovod while the engine waits for its first job


def describe(exit_with_kernel=None, niceness=0):
    """Who this engine is: used to place ranks on hosts. exit_with_kernel=(pid, host): this engine belongs to that
    kernel's own cluster and exits when the kernel is gone, so an orphan never keeps a GPU's memory; on the
    kernel's host it also takes `niceness`, so that the notebook goes first when both want the cores."""
    beside_kernel = bool(exit_with_kernel) and exit_with_kernel[1] == socket.gethostname()
    if beside_kernel and niceness:
        _lower_priority(niceness)  # before the import below starts TensorFlow's threads: they inherit it
    if beside_kernel and not _ORPHAN_WATCH:
        watch = threading.Thread(
            target=_exit_when_gone, args=(exit_with_kernel[0],), daemon=True, name="jdl-orphan-watch"
        )
        _ORPHAN_WATCH.append(watch)
        watch.start()
    stack_dumps.enable()  # where this engine was, should it ever have to be killed
    if not _PRELOAD:  # the first job should not wait ~10 s for TensorFlow and Horovod to import
        preload = threading.Thread(target=_preload, daemon=True, name="jdl-preload")
        _PRELOAD.append(preload)
        preload.start()
    # The GPU an engine was pinned to when it started (one per engine), to place ranks on the GPUs a pool granted.
    return {"hostname": socket.gethostname(), "pid": os.getpid(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES") or None}


def _lower_priority(niceness):
    """Every thread of this engine to at least `niceness`. On Linux a priority is a thread's own (threads made
    later inherit their maker's), so each running thread is set; elsewhere it is the process's."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(niceness, os.getpriority(os.PRIO_PROCESS, tid)))
        except OSError:  # a thread that ended meanwhile
            pass


def _preload():
    for name in ("horovod", "tf"):  # Horovod where it is installed (it imports TensorFlow too)
        try:
            named(name).preload()
            return
        except Exception:  # the first job imports again and reports what is wrong, in its cell
            continue


def _wait_for_preload():
    """A job waits for the background import instead of importing TensorFlow from a second thread beside it."""
    if _PRELOAD:
        _PRELOAD[0].join()


def preloaded() -> bool:
    """Whether this engine has TensorFlow and Horovod imported (after describe() started the import)."""
    return bool(_PRELOAD) and not _PRELOAD[0].is_alive()


def manifest():
    """Fingerprints of the values this engine already holds."""
    return {name: fp for name, (fp, _) in _SHIPPED.items()}


def receive(blobs: dict, fingerprints: dict):
    """Store shipped values. Raises naming the variable when one cannot be rebuilt here."""
    _wait_for_preload()
    # A model's classes that travel with it win over older ones this engine kept from earlier jobs (the notebook
    # may have redefined them since); classes shipped in this same batch win over both.
    # Keras objects built from values shipped earlier (an array kept here by fingerprint) refer to them by name.
    values, problems = payload.unpack(blobs, known={name: value for name, (_, value) in _SHIPPED.items()})
    for name, why in problems.items():
        raise RuntimeError(f"variable '{name}' could not be loaded on {socket.gethostname()}: {why}")
    for name, value in values.items():
        _SHIPPED[name] = (fingerprints.get(name), value)
        _BLOBS[name] = blobs[name]  # to build it again in a new TensorFlow context (backends/tf.py)
    return len(blobs)


def _rebuild_shipped(names):
    """Build the shipped values again from what arrived: objects built in a TensorFlow context that a backend has
    since replaced (a new collective group) no longer work in the new one."""
    kept = [name for name in names if name in _BLOBS]
    others = {name: value for name, (_, value) in _SHIPPED.items() if name not in kept}
    values, problems = payload.unpack({name: _BLOBS[name] for name in kept}, known=others)
    for name, why in problems.items():
        raise RuntimeError(f"variable '{name}' could not be loaded on {socket.gethostname()}: {why}")
    for name, value in values.items():
        _SHIPPED[name] = (_SHIPPED[name][0], value)


def _is_induced(exc) -> bool:
    """True when this rank failed only because a peer left the job (Horovod shut everyone down, or TensorFlow's
    coordination service aborted the group's collectives)."""
    text = f"{type(exc).__name__}: {exc}"
    return (
        "HorovodInternalError" in text
        or "Horovod has been shut down" in text
        or ("UnavailableError" in text and "ollective" in text)
        or "a peer left the job" in text
        or "stopped sending heartbeats" in text
        # The coordination service lost a task's heartbeats (its host cut off) and aborted every collective
        or "Collective ops is aborted by" in text
        or ("gloo" in text.lower() and ("connection closed" in text.lower() or "timed out" in text.lower()))
    )


def run(spec: RankSpec) -> dict:
    """Run one rank of a job (see RankSpec) and return its outcome; never raises."""
    timings = {}
    t0 = time.perf_counter()
    rank = spec.rank
    previous_handler = None
    in_end_check = False  # in jupyter-dl's own collective after the user's code ended
    outcome = dict(rank=rank, ok=True, hostname=socket.gethostname())
    elastic.forget_release()
    # Setup is not interruptible: a KeyboardInterrupt inside `import tensorflow` leaves the engine half-imported,
    # and one inside Horovod's rendezvous strands the peer rank in native code. The kernel repeats its interrupt,
    # so a stop requested now lands as soon as the user's code starts.
    watch = _KernelWatch(spec.kernel_pid, spec.kernel_host)
    _wait_for_preload()
    setup_handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            # A job on another backend after one on TensorFlow's collectives needs the plain context back.
            new_context = spec.options.backend != "tf" and tf_ops.release()
            new_context = job_backend.use(spec.options.backend).init(spec.env) or new_context
            # An elastic job's next group: a survivor's shipped objects may hold what the cell's last run did to them
            # (a list it appended to, a metric), while a new engine's are fresh; all ranks start from the shipped ones.
            if new_context or spec.segment:
                _rebuild_shipped(spec.names_in)
        finally:
            signal.signal(signal.SIGINT, setup_handler)
        timings["init_s"] = time.perf_counter() - t0
        elastic.forget_other_jobs(spec.job_id)
        keras_objects.record_constructor_arguments_when_keras_loads()  # subclassed models built here can go back
        os.environ.update(spec.secret_values)  # for this job only; removed below
        _follow_the_notebook(spec.kernel_cwd, spec.kernel_sys_path)
        # get_ipython: IPython puts it in a cell's globals, ipyparallel's apply does not; here it is the engine's shell
        # (a cell asking whether it runs in Colab, or calling a magic by hand, works as in the notebook).
        namespace = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": _engine_shell}
        namespace.update({name: _SHIPPED[name][1] for name in spec.names_in})
        payload.bind_functions(namespace)
        keras_objects.register_again(spec.keras_registrations, namespace)
        arrived = _trained_states(spec, namespace)
        hooks = _hooks_for(spec)
        t1 = time.perf_counter()
        stall_watch = StallWatch(rank, spec.stall_s, _stall_reporter(rank))
        sampler = ResourceSampler(rank, spec.resource_interval, engine_publisher())
        with (
            NativeStderr(sys.stderr),
            stall_watch,
            sampler,
            _dtype_policy(spec.dtype_policy),
            _notebook_env(spec),
            hooks if hooks is not None else contextlib.nullcontext(),
            elastic.running(spec.job_id, spec.elastic_board, rank) if spec.elastic_board else contextlib.nullcontext(),
        ):
            random_state.restore(spec.random_state)  # last before the cell: setting up draws nothing after it
            if spec.mode == "cell":
                try:
                    _exec_cell(spec, namespace)
                finally:  # a figure drawn before an error shows too, as in one process
                    cell_figures.show_and_close(show=spec.rank == 0)
                    summary_writers.flush(namespace.values())  # the notebook may read the events next
                result = None
                if spec.rank == 0:  # a policy or a seed the cell set goes back to the notebook, as in one process
                    outcome["dtype_policy"] = keras_objects.global_dtype_policy()
                    outcome["random_state"] = random_state.capture()
            else:  # called here, not in a helper: a function's traceback starts at this frame, as before
                with keras_objects.quiet_rebuild():  # a model among the arguments is rebuilt here, as in a cell
                    fn, args, kwargs = payload.cloudpickle.loads(spec.fn)
                result = fn(*args, **kwargs)
        timings["run_s"] = time.perf_counter() - t1
        if hooks is not None:
            in_end_check = True
            apart = _ranks_apart(hooks, namespace if spec.mode == "cell" else {})
            in_end_check = False
            if apart:
                outcome["diverged"] = divergence.warning(apart)
        t2 = time.perf_counter()
        _pack_results(spec, namespace, result, outcome, arrived)
        timings["pack_s"] = time.perf_counter() - t2
    except ProbeDone as done:  # --recommend: the cell's fit was profiled, not run
        outcome["probe"] = done.payload
    except elastic.MembershipChange as change:  # every rank left at the same commit point; the kernel goes on
        outcome["membership_change"], outcome["membership_at"] = change.reason, change.where
    except BaseException as exc:  # KeyboardInterrupt included: an interrupted rank must still leave the job
        # The kernel repeats its interrupt until every rank has stopped; from here on it must not cut our cleanup.
        previous_handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
        outcome.update(
            ok=False,
            ename=type(exc).__name__,
            evalue=str(exc),
            # This rank's code had ended well: the check's collective fails only because a peer left the job.
            # (or the kernel said a peer was lost and this rank's collectives were ended for it: whatever they raised)
            induced=in_end_check or _is_induced(exc) or elastic.released_for_a_lost_peer(),
            traceback=_user_traceback(exc),
        )
    finally:
        watch.stop()
        _leave_job(spec, previous_handler, failed=not outcome["ok"])
    timings["total_s"] = time.perf_counter() - t0
    outcome["timings"] = timings
    outcome["tf_contexts"] = tf_ops.contexts_started()
    if spec.elastic_board:
        outcome["commits"] = elastic.commit_count(spec.job_id)
    return outcome


def _follow_the_notebook(cwd, sys_path):
    """The notebook's working directory and import path, where they exist on this host: relative paths and helper
    modules beside the notebook mean the same on every rank as in the notebook."""
    if cwd and os.path.isdir(cwd) and os.getcwd() != cwd:
        os.chdir(cwd)
    missing = [entry for entry in sys_path if entry not in sys.path and os.path.isdir(entry)]
    if missing:
        sys.path[:0] = missing
        importlib.invalidate_caches()


@contextlib.contextmanager
def _notebook_env(spec: RankSpec):
    """The variables the notebook's cells set, for this job only; the job's own (its rendezvous, its secrets)
    win over them."""
    mine = {k: v for k, v in spec.notebook_env.items() if k not in spec.env and k not in spec.secret_values}
    kept = {name: os.environ.get(name) for name in mine}
    os.environ.update(mine)
    try:
        yield
    finally:
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _dtype_policy(name):
    """The notebook's global Keras dtype policy while the job runs; the engine's own again afterwards."""
    if name is None:
        yield
        return
    import keras

    kept = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(kept)


def _hooks_for(spec: RankSpec):
    """Zero-code mode's Keras hooks for this rank, or None for a --manual cell (which gets the Keras 3 shim)."""
    if spec.options.manual:
        if spec.options.backend == "horovod":
            from jupyter_dl.backends import horovod_keras3
            from jupyter_dl.runtime import horovod_elastic

            horovod_keras3.install()  # the cell's own Horovod TF2/Keras code works on Keras 3
            horovod_elastic.install()  # and its hvd.elastic code in a job, where the kernel changes the group
        return None
    from jupyter_dl.runtime.keras_hooks import KerasHooks

    return KerasHooks(
        spec.rank,
        spec.size,
        spec.options,
        attempt=spec.attempt,
        balance=spec.balance_batches,
        elastic=(spec.job_id, spec.elastic_board, spec.segment, spec.commit_pace) if spec.elastic_board else None,
    )


def _engine_shell():
    from IPython import get_ipython

    return get_ipython()


def _exec_cell(spec: RankSpec, namespace):
    """Run the cell's code in `namespace`, under a filename that tracebacks and the stall report recognise."""
    filename = f"<distribute-cell {spec.job_name}>"
    linecache.cache[filename] = (len(spec.code), None, spec.code.splitlines(True), filename)
    if OUT_NAME not in spec.names_out:
        exec(compile(spec.code, filename, "exec"), namespace)
        return
    # The cell ends in an expression: run the rest, then keep the expression's value, as IPython shows it.
    tree = ast.parse(spec.code, filename)
    last = tree.body.pop()
    assert isinstance(last, ast.Expr)  # the kernel asked for OUT_NAME only then (kernel/cell.py)
    exec(compile(tree, filename, "exec"), namespace)
    namespace[OUT_NAME] = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)


def _trained_states(spec: RankSpec, namespace) -> dict:
    """On rank 0 of a cell: the state of each model and optimizer the cell reads, as it arrived; of each Keras
    callback and metric, under ("object", name, index); and each model or optimizer the cell also binds, under
    ("itself", name), to tell `model = train_model(model)` (the same object again) from a new one; and of each
    model or optimizer a notebook class's object holds (`agent.model`), under ("held", name, index, path)."""
    if spec.mode != "cell" or spec.rank != 0:
        return {}
    states = {n: _trained_state(namespace[n]) for n in spec.names_in if payload.trained_in_place(namespace[n])}
    for name in spec.names_in:
        if name in spec.names_out and payload.trained_in_place(namespace[name]):
            states[("itself", name)] = namespace[name]
    model_names = payload.names_by_id(spec.names_in, namespace)
    named_ids = {id(namespace[n]) for n in spec.names_in}
    for name in spec.names_in:
        if name not in spec.names_out:
            for index, value in object_state.tracked_in(namespace[name]):
                states[("object", name, index)] = object_state.state_of(value, model_names)
                for path, held in held_keras.held(value, named_ids).items():
                    states[("held", name, index, path)] = _trained_state(held)
    return states


def _state_now(namespace, name, index, model_names):
    return object_state.state_of(object_state.at(namespace, name, index), model_names)


def _trained_state(value):
    """What a cell may change in a model or optimizer without rebinding it: its variables, its optimizer's, how it
    is compiled. Only what changed goes back: these are separate copies here, and an unchanged copy written back
    over the notebook's objects would undo training that reached them through another name (a sub-model's
    layers, `opt` after `model.compile(optimizer=opt)`)."""
    if type(value) in (list, tuple, dict):  # models kept in a list or dict: each model's state
        items = value.values() if type(value) is dict else value
        return tuple(_trained_state(v) if payload.trained_in_place(v) else None for v in items)
    try:
        optimizer = value if keras_objects.is_optimizer(value) else getattr(value, "optimizer", None)
        # Also when not built: a wrapper trained through its parts (a GAN's train_step) is never called itself.
        variables = list(value.variables)
        optimizers = [optimizer, *keras_objects.other_optimizers(value).values()]
        for held in optimizers:
            if held is not None and held is not value and held.built:
                variables += list(held.variables)
        compiled = value.get_compile_config() if hasattr(value, "get_compile_config") else None
        return divergence.fingerprint(variables).tobytes(), repr(compiled), getattr(optimizer, "built", None)
    except Exception:  # an object this does not know how to read: always changed, so it goes back as before
        return object()


def _pack_results(spec: RankSpec, namespace, result, outcome, arrived):
    """Put what goes back to the kernel into the outcome: a function's result, or rank 0's bound names."""
    if spec.mode == "fn":
        outcome["result"] = payload.cloudpickle.dumps(result) if (spec.rank == 0 or spec.all_ranks) else None
    elif spec.rank == 0:
        # Names the cell bound, plus the models and optimizers it changed without rebinding them.
        models = {n: state for n, state in arrived.items() if not isinstance(n, tuple)}
        changed = [n for n in models if n not in spec.names_out and _trained_state(namespace[n]) != models[n]]
        held = _held_changed(namespace, arrived)
        outcome["held"] = [entry for entry, _ in held]
        namespace_and_held = {**namespace, **{entry[0]: value for entry, value in held}} if held else namespace
        outcome["values"] = payload.pack(
            list(spec.names_out) + changed + [entry[0] for entry, _ in held],
            namespace_and_held,
            also_known=spec.names_in,
        )
        # Bound again to the object it arrived as: the notebook's own object takes the training, as in one process.
        outcome["rebound_to_itself"] = [
            key[1] for key, value in arrived.items() if key[:1] == ("itself",) and namespace.get(key[1]) is value
        ]
        # Callbacks and metrics it used: what changed, for the notebook's own objects (a callback's model by name).
        model_names = payload.names_by_id([*spec.names_in, *spec.names_out], namespace)
        moved = [
            (name, index, object_state.changed(before, _state_now(namespace, name, index, model_names)))
            for (_, name, index), before in ((key, s) for key, s in arrived.items() if key[:1] == ("object",))
        ]
        outcome["object_states"] = [entry for entry in moved if entry[2]]
        outcome["environment"] = _environment()


def _held_changed(namespace, arrived) -> list:
    """[((travel name, name, index, path), object)] for each model or optimizer held by a notebook class's object
    that the cell changed (held_keras)."""
    found = []
    for key, before in arrived.items():
        if key[:1] == ("held",):
            _, name, index, path = key
            try:
                value = held_keras.value_at(object_state.at(namespace, name, index), path)
            except (KeyError, IndexError, TypeError, AttributeError):  # the cell took it out
                continue
            if _trained_state(value) != before:
                found.append(((held_keras.travel_name(name, index, path), name, index, path), value))
    return found


def _leave_job(spec: RankSpec, previous_handler, failed):
    """Clean up after the job, whatever happened. Leaving tells the peers: if we failed, they stop waiting on us in
    their next collective."""
    for name in spec.secret_values:
        os.environ.pop(name, None)
    try:
        backend().shutdown(failed)
    except Exception:
        pass
    if previous_handler is not None:
        signal.signal(signal.SIGINT, previous_handler)
    sys.stdout.flush()
    sys.stderr.flush()


def _environment() -> dict:
    """What this rank ran with, kept with the job's results."""
    import platform

    found: dict = {"python": platform.python_version()}
    for name in ("tensorflow", "keras", "horovod"):
        module = sys.modules.get(name)
        found[name] = getattr(module, "__version__", None) if module else None
    if "tensorflow" in sys.modules:
        found["devices"] = [d.name for d in sys.modules["tensorflow"].config.list_physical_devices()]
    return found


def _ranks_apart(hooks, namespace):
    """Compare the ranks' weights at the end of a zero-code job (every rank calls this at the same point)."""
    updated = hooks.updates.updated_variables()
    return divergence.check(divergence.groups_to_check(namespace, updated), {id(v) for v in updated})


def _stall_reporter(rank):
    """Tell the kernel (through ipyparallel's data publication) and this rank's log that the rank is stuck."""
    publish = engine_publisher()
    sent = itertools.count()

    def report(record):
        where = f" at {record['where']}" if record["where"] else ""
        print(
            f"[jupyter-dl] rank {rank} has waited {record['waited_s']:.0f}s in {record['what']}{where}",
            file=sys.stderr,
            flush=True,
        )
        if publish is not None:
            publish({f"jdl.{rank}.stall.{next(sent)}": [record]})

    return report


def _gone(pid) -> bool:
    """Whether process `pid` on this host has exited (another user's live process is not gone)."""
    return not pid_running(pid)


def _exit_when_gone(pid, interval=2.0):
    while True:
        time.sleep(interval)
        if _gone(pid):
            os._exit(0)  # a running job was already interrupted by its _KernelWatch and recorded as lost


class _KernelWatch:
    """While a job runs, interrupt it if the kernel that launched it dies: orphaned ranks must not train on.
    Only possible when the kernel is on this host (its pid means something here)."""

    def __init__(self, pid, host, interval=1.0):
        self._stop = threading.Event()
        self._thread = None
        if pid and host == socket.gethostname():
            self._thread = threading.Thread(target=self._watch, args=(pid, interval), daemon=True)
            self._thread.start()

    def _watch(self, pid, interval):
        while not self._stop.wait(interval):
            if _gone(pid):
                _thread.interrupt_main()  # repeated: one sent during setup (interrupts ignored) is dropped

    def stop(self):
        self._stop.set()


def _user_traceback(exc) -> str:
    """The traceback from the user's code down, without our own frames on top."""
    tb = exc.__traceback__
    frames = traceback.extract_tb(tb)
    start = next((i for i, f in enumerate(frames) if f.filename.startswith("<distribute-cell")), 0)
    while start > 0 and tb is not None:
        tb = tb.tb_next
        start -= 1
    return "".join(traceback.format_exception(type(exc), exc, tb))
