"""Zero-code-change mode, engine side: make an unchanged single-GPU Keras cell train data-parallel.

While a cell runs:
- every Keras optimizer update averages gradients across ranks, wherever the optimizer was created or compiled
  (optimizer_hooks: a model compiled in an earlier cell, one that came back from a previous job, custom loops);
- `compile` and `fit` keep XLA off (Horovod's ops are not XLA ops), and a train step traced before this cell (so
  without the averaging) is traced again;
- fit: in-memory arrays, tf.data datasets, PyDatasets and generators are sharded by rank to equal sizes (a rank with
  one batch more would wait forever in the last allreduce); rank 0's initial variables are broadcast; epoch metrics
  are averaged across ranks before History, callbacks and the progress bar see them; only rank 0 prints and writes
  files (callbacks that write, and `model.save`/`save_weights`); learning-rate callbacks work in single-rank units.
Everything is restored when the cell ends, including learning rates and the dtype policy, so the model that comes
back to the notebook is an ordinary Keras model.
"""

import collections
import contextlib
import functools
import itertools
import math
import socket
import sys

from jupyter_dl.runtime import batch_counts, downloads, elastic_batches, file_writes, lr_callbacks, stall_watch
from jupyter_dl.runtime.job_backend import backend
from jupyter_dl.runtime.optimizer_hooks import DistributedUpdates
from jupyter_dl.wire.lr_scale import lr_scale_factor
from jupyter_dl.wire.options import RunOptions

_ROOT_ONLY_CALLBACKS = ("ModelCheckpoint", "BackupAndRestore", "TensorBoard", "CSVLogger")


def _saving_functions():
    """(module, name, function) for every module attribute that is Keras' save_model or save_weights:
    `keras.saving.save_model`, `keras.models.save_model`, tf.keras' copies and saving_api's own, which
    `Model.save`/`Model.save_weights` call. A cell may save through any of these names."""
    from keras.src.saving import saving_api

    originals = (saving_api.save_model, saving_api.save_weights)
    found = []
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith(("keras", "tensorflow", "tf_keras")):
            continue
        namespace = getattr(module, "__dict__", {})
        for name in ("save_model", "save_weights"):
            value = namespace.get(name)
            if any(value is original for original in originals):
                found.append((module, name, value))
    return found


def _path_argument(*keywords):
    """path_of(owner, args, kwargs) for a writer whose path is its first argument after the owner, or one of these
    keywords: `model.save(filepath)`, `checkpoint.save(file_prefix)`, `tf.saved_model.save(model, export_dir)`."""

    def path_of(owner, args, kwargs):
        return args[0] if args else next((kwargs[k] for k in keywords if k in kwargs), "")

    return path_of


_first_argument = _path_argument("filepath")


def _checkpoint_saves():
    """(owner, name, function, path_of, skipped) for TensorFlow's checkpoint and SavedModel writers, where
    TensorFlow is loaded. `skipped(owner)` does, on the ranks that do not write, what the save changes besides the
    files: a checkpoint's save count, what a manager knows of its saves (a later restore in the cell on any rank
    then finds rank 0's newest)."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return []
    checkpoint, manager = tf.train.Checkpoint, tf.train.CheckpointManager

    prefix = _path_argument("file_prefix")

    def folder(owner, args, kwargs):
        return owner.directory

    def count(owner):
        owner.save_counter.assign_add(1)

    def reread(owner):
        saved = tf.train.get_checkpoint_state(owner.directory)
        if saved is not None:
            owner._latest_checkpoint = saved.model_checkpoint_path
            paths, times = saved.all_model_checkpoint_paths, saved.all_model_checkpoint_timestamps
            owner._maybe_delete = collections.OrderedDict(zip(paths, times))
        count(owner._checkpoint)

    return [
        (checkpoint, "save", checkpoint.save, prefix, count),
        (checkpoint, "write", checkpoint.write, prefix, None),
        (manager, "save", manager.save, folder, reread),
        (tf.saved_model, "save", tf.saved_model.save, _path_argument("export_dir"), None),  # save(obj, export_dir)
    ]


def _summaries_off():
    """A context in which TensorFlow records no summaries (where TensorFlow is loaded)."""
    tf = sys.modules.get("tensorflow")
    return tf.summary.record_if(False) if tf is not None else contextlib.nullcontext()


class KerasHooks:
    """Patch Keras for the duration of one cell on one rank; use as a context manager."""

    def __init__(
        self, rank: int, size: int, options: RunOptions, attempt: int = 0, balance: bool = False, elastic=None
    ):
        self.rank = rank
        self.size = size
        self.options = options  # the job's options, as the user gave them (wire/options.py)
        self.attempt = attempt  # 0 for a job's first run, then one more per restart
        self.balance = balance  # measure rank speeds at fit start and split the global batch by them
        # An elastic job's (job id, board URL, segment, (commit steps, commit seconds) inside an epoch): commits in
        # memory (elastic.py).
        self.elastic = elastic
        self.updates = DistributedUpdates(lr_scale_factor(options.lr_scale, size) * options.lr_multiplier, rank)
        self._fits = 0  # fit calls so far in this cell: each has its own checkpoint
        self._traced_here: set = set()  # ids of train functions traced under these hooks (with the averaging)
        self._saves = itertools.count()  # model.save calls so far: each waits for rank 0's write
        self._downloads = itertools.count()  # keras get_file calls so far: each in turns (downloads.py)
        self._restores = itertools.count()  # fits with a BackupAndRestore so far: each agrees on its first epoch
        self._fit_ends = itertools.count()  # fit calls that returned: each ends with every rank together
        self._validation_share = 1.0  # this rank's weight in the average of validation metrics (sharding.py)
        self._saving = False  # inside a guarded save (a save that saves again must not wait a second time)
        self._told_whole = False  # said once a cell that a fit on fewer samples than ranks ran whole on each

    def __enter__(self):
        import keras
        from keras.src.trainers.trainer import Trainer

        self._keras = keras
        self._dtype_policy = keras.config.dtype_policy()
        self._orig_compile = Trainer.compile
        self._orig_fit = keras.Model.fit
        hooks = self

        def compile(model, *args, **kwargs):
            kwargs["jit_compile"] = False
            return hooks._orig_compile(model, *args, **kwargs)

        def fit(model, x=None, y=None, *args, **kwargs):
            return hooks._fit(model, x, y, args, kwargs)

        def on_rank0_only(original, path_of=_first_argument, skipped=None):
            # Every rank runs the cell's `model.save(path)`: a path shared by the ranks is written once, by rank 0
            # (the ranks' models are equal), and the others wait for it, since the cell may read it back on the
            # next line. A path of the rank's own (a temporary folder made in the cell) is written by its rank.
            def save(owner, *args, **kwargs):
                if hooks.updates.in_fit or hooks._saving:
                    # A callback (ModelCheckpoint, BackupAndRestore: only rank 0 has it), or a save inside a save.
                    return original(owner, *args, **kwargs) if hooks.rank == 0 or hooks._saving else None
                path = str(path_of(owner, args, kwargs))
                k = next(hooks._saves)
                shared = backend().broadcast_object(path, name=f"jdl.save.{k}") == path
                hooks._saving = True
                try:
                    result = original(owner, *args, **kwargs) if hooks.rank == 0 or not shared else None
                finally:
                    hooks._saving = False
                # What rank 0 wrote (a checkpoint's path, which the cell may print or restore from) is every rank's.
                written = backend().broadcast_object(result if isinstance(result, str) else None, name=f"jdl.saved.{k}")
                if shared and hooks.rank != 0:
                    if skipped is not None:  # the rest of what the save does, so the ranks' counts agree
                        skipped(owner)
                    return written
                return result

            return save

        self.updates.__enter__()
        # compile on Trainer, where Keras looks for it: a Model class whose compile differs counts as customised,
        # and keras.models.load_model then leaves the model uncompiled.
        self._patches = [
            (Trainer, "compile", compile),
            (keras.Model, "fit", fit),
            # Model.save and Model.save_weights call these too, so every way to save goes through one guard.
            *((module, name, on_rank0_only(original)) for module, name, original in _saving_functions()),
            (keras.Model, "export", on_rank0_only(keras.Model.export)),  # a SavedModel folder for serving
            # TensorFlow's checkpoints (the DCGAN tutorial's `checkpoint.save(file_prefix=...)` in a custom loop).
            *((owner, name, on_rank0_only(*writer)) for owner, name, *writer in _checkpoint_saves()),
            # A callback's own files (images, plots, arrays) are written by rank 0 alone while fit runs.
            *file_writes.patches(lambda: hooks.rank != 0 and hooks.updates.in_fit),
            # `keras.datasets.mnist.load_data()` in the cell: one rank writes each cached download.
            *downloads.get_file_patches(lambda: next(hooks._downloads)),
        ]
        self._patches = [(owner, name, getattr(owner, name), patched) for owner, name, patched in self._patches]
        for owner, name, _, patched in self._patches:
            setattr(owner, name, patched)
        # A custom loop's `tf.summary.scalar(...)` into the notebook's log folder: rank 0's alone (summary_writers).
        self._no_summaries = _summaries_off() if self.rank != 0 else contextlib.nullcontext()
        self._no_summaries.__enter__()
        return self

    def __exit__(self, *exc):
        self._no_summaries.__exit__(*exc)
        for owner, name, original, _ in reversed(self._patches):
            setattr(owner, name, original)
        self.updates.__exit__(*exc)
        # A cell's mixed-precision policy must not leak into the next job on this engine.
        self._keras.config.set_dtype_policy(self._dtype_policy)
        return False

    # -------------------------------------------------------------------------------------------------- fit
    def _fit(self, model, x, y, args, kwargs):
        from jupyter_dl.runtime.sharding import array_samples, shard_fit_inputs, split_off_validation

        if self.options.probe:  # --recommend: profile the cell's fit instead of running it
            from jupyter_dl.runtime.probe import probe_fit

            probe_fit(model, x, y, kwargs)  # raises ProbeDone with what it measured
        if self.options.batch_size:  # the recommended per-rank batch, replacing the cell's
            kwargs = dict(kwargs, batch_size=self.options.batch_size)

        samples = array_samples(x)
        if samples is not None and samples < self.size:
            return self._fit_whole_on_every_rank(model, x, y, args, kwargs, samples)
        balanced = self._balanced_inputs(model, x, y, kwargs) if self.balance else None
        shares = {"validation": 1.0}
        whole = None  # an elastic fit's arrays before sharding, for a global order (elastic_batches.py)
        if balanced is None:
            self.updates.gradient_weight.assign(1.0)
            if self.elastic is not None and not args:
                whole = split_off_validation(x, y, kwargs)
            x, y, kwargs = shard_fit_inputs(x, y, kwargs, self.rank, self.size, shares)
        else:
            x, y, kwargs = balanced
        self._validation_share = shares["validation"]
        checkpoint, resume = self._checkpoint_for_this_fit()
        epochs = kwargs["epochs"] if "epochs" in kwargs else (args[1] if len(args) > 1 else 1)  # fit(x, y, 32, 10)
        if resume is not None and resume["meta"].get("complete"):
            kwargs["initial_epoch"] = epochs  # an elastic job's finished fit (EarlyStopping may have ended it early)
        elif resume is not None:
            kwargs["initial_epoch"] = max(kwargs.get("initial_epoch") or 0, resume["meta"]["epoch"] + 1)
            if self.rank == 0 and self.elastic is None:  # an elastic job's kernel says where it resumes
                print(f"[jupyter-dl] resuming from {resume['path']} (epoch {resume['meta']['epoch'] + 1} done)")
        callbacks = _cell_callbacks(kwargs.get("callbacks"))
        if model.optimizer is not None:
            self.updates.scale_for_sharded_data(model.optimizer)  # before any callback reads or sets the rate
        extra = self._our_callbacks(model, x, kwargs, checkpoint, resume)
        order = self._global_order(whole, resume) if whole is not None else None
        within = elastic_batches.resume_point(resume)
        if order is not None:  # this rank's share of each step of the global order, from where the commit left it
            first = kwargs.get("initial_epoch") or 0
            start = within.get("position", 0) if within.get("epoch") == first else 0
            x, y = order.dataset(first, start), None
            kwargs = {k: v for k, v in kwargs.items() if k not in ("batch_size", "sample_weight")}
            kwargs.setdefault("validation_batch_size", order.batch)  # Keras would validate in batches of 32
            kwargs["shuffle"] = False  # the order shuffles; Keras would warn that it cannot shuffle a dataset
            kwargs["steps_per_epoch"] = order.steps(0)
        elif self.rank == 0 and within.get("position"):
            # The last group stopped inside an epoch; this one (a --balance split) cannot take the rest of it.
            print(f"[jupyter-dl] epoch {kwargs['initial_epoch'] + 1} starts again from its beginning on this group")
        kept = list(enumerate(callbacks))  # (index in the cell's list, callback): commits name them by index
        # Rank 0's BackupAndRestore may resume an interrupted fit from a later epoch: every rank starts there.
        restores = any(_is_a(cb, ("BackupAndRestore",)) for cb in callbacks)
        if self.rank != 0:
            kept = [(i, cb) for i, cb in kept if not _is_a(cb, _ROOT_ONLY_CALLBACKS)]
            callbacks = [cb for _, cb in kept]
            kwargs["verbose"] = 0
        # First in the list: later callbacks (user's, History, progress bar) see the averaged epoch logs.
        # Last of ours, before Keras' History: logged learning rates in single-rank units, like the cell's.
        last = [lr_callbacks.learning_rate_logs_callback(self._keras, self.updates)]
        if restores:
            last.insert(0, _rank_0_s_initial_epoch(self._keras, next(self._restores)))
        if self.elastic is not None:  # after the user's callbacks: a commit holds what they did with the epoch
            last.append(self._commit_callback(model, epochs, checkpoint, resume, kept, order))
        kwargs["callbacks"] = extra + callbacks + last
        with (
            lr_callbacks.in_single_rank_units(callbacks, self.updates, model.optimizer),
            batch_counts.in_one_process_batches(callbacks, self.size),
            self._traced_with_hooks(model, order.seen_by_fit if order is not None else None),
            elastic_batches.resumed_epochs_quiet() if order is not None else contextlib.nullcontext(),
        ):
            history = self._orig_fit(model, x, y, *args, **kwargs)
        # Rank 0's callbacks may still be writing (ModelCheckpoint's best model): no rank goes on, perhaps to read
        # that file, before they are done.
        backend().broadcast_object(None, name=f"jdl.fit_end.{next(self._fit_ends)}")
        if resume is not None:
            _prepend_history(history, resume["meta"]["history"])
        if checkpoint is not None and self.elastic is not None:  # every rank's own, as the fit ended
            checkpoint.finish(model, {"epochs": list(history.epoch), "logs": history.history})
        elif checkpoint is not None and self.rank == 0:
            checkpoint.mark_complete()
        return history

    def _fit_whole_on_every_rank(self, model, x, y, args, kwargs, samples):
        """A fit on fewer samples than ranks (DQN's `self.model.fit(state, target_f)` for each replayed transition):
        every rank trains on all of them at the cell's own rate, so the averaged update is one process's."""
        if self.rank == 0 and not self._told_whole:
            self._told_whole = True
            print(
                f"[jupyter-dl] fit on {samples} sample(s), fewer than the {self.size} ranks: every rank "
                "trained on all of them at the cell's learning rate, as one process does (no speed-up from the ranks)",
                flush=True,
            )
        factor, self.updates.lr_factor = self.updates.lr_factor, 1.0
        try:
            self.updates.gradient_weight.assign(1.0)
            self._validation_share = 1.0
            callbacks = _cell_callbacks(kwargs.get("callbacks"))
            extra = self._our_callbacks(model, x, kwargs, None, None)
            if self.rank != 0:
                callbacks = [cb for cb in callbacks if not _is_a(cb, _ROOT_ONLY_CALLBACKS)]
                kwargs["verbose"] = 0
            kwargs["callbacks"] = extra + callbacks
            with batch_counts.in_one_process_batches(callbacks, 1), self._traced_with_hooks(model):
                history = self._orig_fit(model, x, y, *args, **kwargs)
            backend().broadcast_object(None, name=f"jdl.fit_end.{next(self._fit_ends)}")
            return history
        finally:
            self.updates.lr_factor = factor

    def _our_callbacks(self, model, x, kwargs, checkpoint, resume):
        """The callbacks every rank's fit gets first: the first-step sync, the checkpoint, the metrics stream."""
        ours = [
            _make_sync_callback(
                self._keras,
                model,
                self.rank,
                checkpoint,
                resume,
                float(self.updates.gradient_weight.numpy()),
                self.updates.mark_synced,
                self._validation_share,
                functools.partial(_assigned_by_the_step, model, self.updates),
            )
        ]
        if checkpoint is not None and self.elastic is None:
            ours.append(_make_checkpoint_callback(self._keras, model, checkpoint, resume, self.rank))
        if self.options.stream_metrics:
            from jupyter_dl.runtime.metrics_callback import LiveMetrics

            batch_size, samples = _samples_per_epoch(x, kwargs)
            ours.append(
                LiveMetrics(
                    self.rank,
                    samples,
                    batch_size,
                    initial_epoch=kwargs.get("initial_epoch") or 0,
                    allreduce_seconds=lambda: float(self.updates.allreduce_seconds.numpy()),
                )
            )
        return ours

    @contextlib.contextmanager
    def _traced_with_hooks(self, model, show_epoch_iterator=None):
        """Run fit with a train step traced under these hooks, without XLA; the model's own settings come back.
        `show_epoch_iterator`, when given, is called with fit's epoch iterator once Keras has built the model."""
        jit = model._jit_compile  # None until "auto" is resolved, which picks XLA on a GPU
        model._jit_compile = False
        if model.train_function is not None and id(model.train_function) not in self._traced_here:
            model.train_function = None  # traced before this cell: it would update without averaging
        unbuilt = any(not layer.built for layer in model._flatten_layers(include_self=False))
        if unbuilt:
            # A model with no Input (a Sequential of layers, a subclass) would make its layers' variables inside the
            # traced step, where rank 0's values cannot be read for the first broadcast. Keras builds it from the
            # first batch before tracing under a tf.distribute strategy; the same here, so every rank starts equal.
            # (A VAE or a GAN over built parts has nothing to build: it trains through its own train_step.)
            model._maybe_symbolic_build = functools.partial(_build_before_tracing, model)
        if show_epoch_iterator is not None:
            build = model._maybe_symbolic_build

            def build_and_show(iterator=None, data_batch=None):
                build(iterator=iterator, data_batch=data_batch)
                show_epoch_iterator(iterator)

            model._maybe_symbolic_build = build_and_show
        self.updates.in_fit = True
        try:
            yield
        finally:
            if unbuilt or show_epoch_iterator is not None:
                model.__dict__.pop("_maybe_symbolic_build", None)
            self.updates.in_fit = False
            self.updates.unscale_all()  # code after fit in the cell reads the same batches on every rank
            if model.train_function is not None:
                self._traced_here.add(id(model.train_function))
            model._jit_compile = jit

    def _balanced_inputs(self, model, x, y, kwargs):
        """(x, y, kwargs) with this rank's balanced share and batch size, or None to split evenly."""
        from jupyter_dl.runtime import balance
        from jupyter_dl.runtime.sharding import shard_arrays

        batch = kwargs.get("batch_size") or 32
        if self.size == 1 or y is None or not (hasattr(x, "shape") and hasattr(y, "shape")):
            return None
        if kwargs.get("validation_split"):
            if self.rank == 0:
                print(
                    "[jupyter-dl] --balance: kept the even split (validation_split would cut ranks' shares into "
                    "different numbers of steps; pass validation_data instead)"
                )
            return None
        probe_x, probe_y, _ = shard_arrays((x, y, None), self.rank, self.size)
        calls = iter(range(balance.MAX_STEPS + 1))

        def step_barrier(spent):
            return float(backend().allreduce(spent, op="max", name=f"jdl.balance.step.{next(calls)}"))

        median, spread = balance.summarize(balance.measure(model, probe_x, probe_y, batch, step_barrier))
        reports = backend().allgather_object((socket.gethostname(), median, spread), name="jdl.balance")
        speeds = balance.speeds_to_split_by(reports, auto=self.options.balance == "auto")
        if speeds is None:
            return None
        batches = balance.split_batch(batch * self.size, speeds)
        x, y, sample_weight = balance.take_columns((x, y, kwargs.get("sample_weight")), self.rank, batches)
        kwargs = dict(kwargs, batch_size=batches[self.rank])
        if sample_weight is not None:
            kwargs["sample_weight"] = sample_weight
        val = kwargs.get("validation_data")
        if isinstance(val, tuple) and val:
            kwargs["validation_data"] = shard_arrays(val, self.rank, self.size)
        self.updates.gradient_weight.assign(batches[self.rank] / batch)
        if self.rank == 0:
            rates = ", ".join(f"{s:,.0f}" for s in speeds)
            basis = "each host's median rank" if self.options.balance == "auto" else "each rank's median step"
            print(
                f"[jupyter-dl] --balance: per-rank batch sizes {batches} (global {batch * self.size}) for measured "
                f"speeds of {rates} samples/s ({basis})"
            )
        return x, y, kwargs

    def _commit_callback(self, model, epochs, checkpoint, resume, kept, order):
        from jupyter_dl.runtime import elastic

        _, board, _, (steps, seconds) = self.elastic
        within = (order, elastic.CommitPace(steps, seconds, self.rank)) if order is not None else None
        return elastic.commit_callback(self._keras, model, checkpoint, resume, kept, board, self.rank, epochs, within)

    def _global_order(self, whole, resume):
        """An elastic fit over plain arrays: the global sample order that lets a group change inside an epoch (its
        seed rank 0's, or the commit's when resuming), or None where commits stay at epoch ends."""
        x, y, kwargs = whole
        steps, seconds = self.elastic[3]
        weights = kwargs.get("sample_weight")
        if (
            (steps <= 0 and seconds <= 0)
            or kwargs.get("steps_per_epoch")
            or (y is None and weights is not None)  # (x, weights) would read as (x, y)
            or not elastic_batches.plain_arrays(x, y, weights)
        ):
            return None
        seed = elastic_batches.resume_point(resume).get("seed")
        if seed is None:
            seed = backend().broadcast_object(elastic_batches.seed_from_numpy(), name=f"jdl.elastic.seed.{self._fits}")
        batch = kwargs.get("batch_size") or 32
        shuffle = kwargs.get("shuffle", True) is not False
        largest = self.options.n if isinstance(self.options.n, int) else self.size  # -n MIN:MAX's MAX
        return elastic_batches.EpochOrder(x, y, weights, batch, self.rank, self.size, shuffle, seed, largest)

    def _checkpoint_for_this_fit(self):
        """This fit's checkpoint, and what to resume from (a dict with path and meta, the same on every rank)."""
        if not self.options.checkpoint_dir and self.elastic is None:
            return None, None
        index = self._fits
        self._fits += 1
        if self.elastic is not None:
            from jupyter_dl.runtime.elastic import MemoryCommits

            job_id, _, segment, _ = self.elastic
            checkpoint, again = MemoryCommits(job_id, index, self.updates), segment > 0
        else:
            from jupyter_dl.runtime.checkpoints import FitCheckpoint

            checkpoint, again = FitCheckpoint(self.options.checkpoint_dir, index), self.attempt > 0
        found = None
        if self.rank == 0:
            # A restart of this job also restores fits it had finished; a new run only resumes an unfinished one.
            hit = checkpoint.find(include_complete=again)
            found = {"path": hit[0], "meta": hit[1]} if hit else None
        # Every rank must start at the same epoch, or one would wait forever for the others' last allreduce.
        return checkpoint, backend().broadcast_object(found, name=f"jdl.ckpt.{index}")


def _cell_callbacks(callbacks) -> list:
    """The cell's `fit(callbacks=...)` as a list: Keras also takes one callback on its own (the audio tutorial's
    `callbacks=tf.keras.callbacks.EarlyStopping(...)`) or nested lists, and flattens them."""
    import keras

    return list(keras.tree.flatten(callbacks)) if callbacks else []


def _samples_per_epoch(x, kwargs):
    """(batch size, training samples per epoch on this rank) for in-memory inputs; (None, None) otherwise."""
    from jupyter_dl.runtime.sharding import _is_array_like, _length

    if not _is_array_like(x):
        return None, None
    n = _length(x)
    split = kwargs.get("validation_split") or 0.0
    if split and kwargs.get("validation_data") is None:
        n = int(math.ceil(n * (1.0 - split)))  # Keras keeps the first part for training
    return kwargs.get("batch_size") or 32, n


def _prepend_history(history, saved):
    """Make the History of a resumed fit whole: the epochs before the restart, then the ones trained now."""
    history.epoch = list(saved["epochs"]) + list(history.epoch)
    for key, values in saved["logs"].items():
        history.history[key] = list(values) + list(history.history.get(key, []))


def _make_checkpoint_callback(keras, model, checkpoint, resume, rank):
    class EpochCheckpoint(keras.callbacks.Callback):
        """Rank 0 saves the model, the optimizer and the history so far at every epoch end."""

        def __init__(self):
            super().__init__()
            saved = resume["meta"]["history"] if resume else {"epochs": [], "logs": {}}
            self.history = {"epochs": list(saved["epochs"]), "logs": {k: list(v) for k, v in saved["logs"].items()}}

        def on_epoch_end(self, epoch, logs=None):
            self.history["epochs"].append(epoch)
            for key, value in (logs or {}).items():
                self.history["logs"].setdefault(key, []).append(float(value))
            if rank == 0:
                checkpoint.save(model, epoch, self.history)

    return EpochCheckpoint()


def _build_before_tracing(model, iterator=None, data_batch=None):
    """Keras' own build from the first batch's shapes (what fit does under a tf.distribute strategy)."""
    built, shapes = model.built, getattr(model, "_build_shapes_dict", None)
    try:
        type(model)._symbolic_build(model, iterator=iterator, data_batch=data_batch)
    except Exception:  # a call() that cannot take the training batch: left to build in the step, as before
        # Keras marks a model whose build failed built, with no input shape (keras.io's contrastive model has no
        # call()): it would not come back, as its build config cannot be replayed. Unbuilt, as in one process.
        if not built:
            model.built, model._build_shapes_dict = False, shapes


def _assigned_by_the_step(model, updates):
    """The model's trainable float variables no hooked optimizer updated: EMA copies, and state a train_step
    assigns from its own batch (keras.io's ADA augmenter's `probability`, which follows the discriminator's accuracy
    on each rank's real images)."""
    updated = {id(v) for v in updates.updated_variables()}
    return [v for v in model.trainable_variables if id(v) not in updated and v.dtype.startswith("float")]


def _average_where_apart(variables, name):
    """Average across ranks those of `variables` whose values differ between ranks (one small gather of
    fingerprints; variables equal everywhere, as an EMA copy of averaged weights is, are left untouched). A train
    step that assigns a variable from its own batch moves it on each rank's data: averaging gives every rank, and
    the notebook, the value a step over the whole global batch would (exactly so for an update linear in the batch's
    statistic)."""
    if not variables:
        return
    from jupyter_dl.runtime.divergence import fingerprint

    everyone = backend().allgather_object(fingerprint(variables), name=f"{name}.fingerprints")
    for i, variable in enumerate(variables):
        if any((theirs[i] != everyone[0][i]).any() for theirs in everyone[1:]):
            averaged = backend().allreduce(variable.numpy(), op="average", name=f"{name}.{i}")
            variable.assign(averaged.astype(variable.dtype))


def _counted_names(keras, model):
    """Names of the model's metrics whose result is a count over the samples seen (the imbalanced-data tutorial's
    TruePositives, FalsePositives, TrueNegatives, FalseNegatives; Sum): summed across ranks, not averaged."""
    kinds = tuple(
        kind
        for kind in (
            getattr(keras.metrics, name, None)
            for name in ("TruePositives", "FalsePositives", "TrueNegatives", "FalseNegatives", "Sum")
        )
        if isinstance(kind, type)
    )
    names, pending, seen = set(), list(getattr(model, "metrics", None) or []), set()
    while pending:
        metric = pending.pop()
        if id(metric) in seen:
            continue
        seen.add(id(metric))
        if isinstance(metric, kinds):
            names.add(metric.name)
        try:
            inner = getattr(metric, "metrics", None)
        except Exception:  # a container not built yet
            inner = None
        if isinstance(inner, (list, tuple)):
            pending.extend(inner)
    return names


def _is_a(callback, class_names) -> bool:
    """Whether the callback is of one of these Keras classes (by name: tf.keras' and keras' alike), or a subclass."""
    return any(c.__name__ in class_names for c in type(callback).__mro__)


def _rank_0_s_initial_epoch(keras, number):
    """After the cell's callbacks began (BackupAndRestore lives on rank 0 alone, which writes its backups): the
    epoch rank 0 resumes from is every rank's, else the ranks would run different epochs and wait on each other.
    Rank 0's restored weights reach the others with the first step's broadcast."""

    class InitialEpochOfRank0(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            epoch = backend().broadcast_object(self.model._initial_epoch, name=f"jdl.initial_epoch.{number}")
            self.model._initial_epoch = epoch

    return InitialEpochOfRank0()


def _make_sync_callback(
    keras,
    model,
    rank,
    checkpoint=None,
    resume=None,
    weight=1.0,
    mark_synced=None,
    validation_weight=1.0,
    assigned_by_the_step=None,
):
    class RankSync(keras.callbacks.Callback):
        """Broadcast rank 0's variables when training starts (restored from the checkpoint when resuming);
        average epoch metrics, and trainable variables the train step assigned apart, across ranks."""

        def __init__(self):
            super().__init__()
            self._optimizer_synced = False

        def on_train_begin(self, logs=None):
            stall_watch.fit_started()
            if resume is not None:
                # The optimizer's slots must exist on every rank before its state can be broadcast.
                if model.optimizer is not None and not model.optimizer.built:
                    model.optimizer.build(model.trainable_variables)
                if rank == 0:
                    checkpoint.restore(resume["path"], model)
                optimizer_variables = list(model.optimizer.variables) if model.optimizer is not None else []
                backend().broadcast_from_root(list(model.variables) + optimizer_variables)
                mark_synced(model.variables)
            elif model.built:
                backend().broadcast_from_root(model.variables)
                mark_synced(model.variables)

        def on_train_batch_end(self, batch, logs=None):
            stall_watch.step_done()
            # Optimizer slots and lazily built layers exist only after the first step: bring them in line once.
            if not self._optimizer_synced:
                backend().broadcast_from_root(list(model.variables) + list(model.optimizer.variables))
                mark_synced(model.variables)
                self._optimizer_synced = True

        def on_epoch_end(self, epoch, logs=None):
            if assigned_by_the_step is not None:
                _average_where_apart(assigned_by_the_step(), f"jdl.step_state.{epoch}")
            if logs:
                keys = sorted(logs)
                # Each rank's metrics weigh by its share of the samples (of the global batch with --balance, of the
                # validation data, which is split whole): the mean over all samples, as with one rank. A count
                # (TruePositives & co., Sum) is the sum over the ranks' samples instead, as with one rank.
                counts = _counted_names(keras, self.model or model)
                size = backend().rank_and_size()[1]
                weights = [
                    size if k.removeprefix("val_") in counts else validation_weight if k.startswith("val_") else weight
                    for k in keys
                ]
                averaged = backend().average_scalars(
                    [float(logs[k]) * w for k, w in zip(keys, weights)], name=f"jdl.epoch.{epoch}"
                )
                logs.update(zip(keys, averaged))

    return RankSync()
