"""Engine side of an elastic job's `fit` over in-memory arrays: one global sample order per epoch, so that a group
can change in the middle of an epoch and the next group trains exactly the samples the last one had not reached.

Every rank draws the same permutation of all samples for epoch e (from a seed rank 0 chose, kept in the job's
commits), and each global step takes the next `size x batch` samples of it, rank r every size-th from the r-th: the
strided split of the fixed path (runtime/sharding.py), so without shuffling a group trains on exactly the batches a
fixed run of its size would. A commit records how many samples of the epoch the group has consumed; the next group,
of any size, starts its first epoch there. The last global step of an epoch splits what is left equally (at most
size-1 samples dropped, as the fixed path drops).

Keras' own shuffle of arrays draws inside TensorFlow and cannot be replayed on another group, hence this order. Other
inputs (datasets, PyDatasets, generators) keep epoch-level commits: their order is the pipeline's.
"""

import contextlib
import itertools
import warnings

import numpy as np

PARALLEL_GATHERS = 2  # batches gathered at once
PREFETCHED_BATCHES = 2  # batches ready ahead of the train step
# Keras' words when an epoch ends before steps_per_epoch: a resumed epoch does on purpose.
_RAN_OUT = "Your input ran out of data"


def plain_arrays(*structures) -> bool:
    """Whether every leaf of the given structures (x, y, sample_weight; None skipped) is a NumPy array or can be read
    as one (a frame, a tensor): what a global order can index. Nothing is converted to find out (NumPy would read a
    PyDataset whole as a sequence)."""
    import tensorflow as tf

    leaves = [leaf for s in structures if s is not None for leaf in tf.nest.flatten(s)]
    return bool(leaves) and all(_readable(leaf) for leaf in leaves)


def _readable(leaf) -> bool:
    if isinstance(leaf, np.ndarray):
        return leaf.dtype != object
    module = type(leaf).__module__
    return module.startswith(("pandas", "tensorflow")) and hasattr(leaf, "shape") and hasattr(leaf, "dtype")


def _as_tuples(structure, floatx):
    """Lists become tuples (tf.data reads a list as one tensor); leaves become NumPy arrays, floats in Keras' float
    type as Keras' own array input makes them (a float64 array from sklearn or pandas would reach a custom loss or
    train_step as float64, and take twice the memory)."""
    if isinstance(structure, dict):
        return {k: _as_tuples(v, floatx) for k, v in structure.items()}
    if isinstance(structure, (list, tuple)):
        return tuple(_as_tuples(v, floatx) for v in structure)
    array = structure if isinstance(structure, np.ndarray) else np.asarray(structure)
    return array.astype(floatx) if array.dtype.kind == "f" and array.dtype != floatx else array


def resume_point(resume) -> dict:
    """Where in an epoch a fit's commit left it ({"epoch", "position", "seed"}; empty for none): `resume` is the
    broadcast commit keras_hooks resumes from, or None."""
    return ((resume or {}).get("meta", {}).get("within")) or {}


def seed_from_numpy() -> int:
    """A seed for the global order from NumPy's global generator, without drawing from it: a notebook that seeded
    NumPy gets the same order on every run, and the cell's own draws stay as they would be."""
    import zlib

    state = np.random.get_state(legacy=False)  # {"state": {"key": ..., "pos": ...}, ...}
    return zlib.crc32(np.asarray(state["state"]["key"]).tobytes()) ^ int(state["state"]["pos"])


class EpochOrder:
    """The global order of one elastic fit's samples, and this rank's share of each step of it."""

    def __init__(self, x, y, sample_weight, batch, rank, size, shuffle, seed, max_size=None):
        import keras

        floatx = keras.config.floatx()
        self.data = tuple(_as_tuples(s, floatx) for s in (x, y, sample_weight) if s is not None)
        self.batch, self.rank, self.size, self.shuffle, self.seed = batch, rank, size, shuffle, seed
        self.max_size = max_size or size  # the largest group the job may have

        self.total = len(keras.tree.flatten(self.data)[0])
        if self.total // size == 0:
            raise ValueError(f"{self.total} samples cannot be split across {size} ranks; use fewer ranks (-n)")
        self.first_epoch, self.start = 0, 0  # where the fit begins: set by dataset()
        self._counting, self._epoch_iterator = False, None

    # ------------------------------------------------------------------------------------------------ positions
    def steps(self, position=0) -> int:
        """Global steps an epoch takes from `position` (samples of it already consumed) to its end."""
        left = self.total - position
        full, tail = divmod(left, self.size * self.batch)
        return full + (1 if tail // self.size else 0)

    def resumable_at(self, position) -> bool:
        """Whether a commit at `position` leaves every group the job may form (up to max_size ranks) at least one
        step of the epoch: not within the last max_size x batch samples."""
        return self.total - position >= self.max_size * self.batch

    def position_after(self, start, steps_done) -> int:
        """Samples of the epoch consumed once `steps_done` steps ran from `start` (the end: the whole epoch)."""
        if steps_done >= self.steps(start):
            return self.total
        return start + steps_done * self.size * self.batch

    def order(self, epoch) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.total)
        return np.random.default_rng([self.seed, epoch]).permutation(self.total)

    def rank_indices(self, epoch, start=0):
        """This rank's sample indices for each step of `epoch` from `start`."""
        order, step_samples = self.order(epoch), self.size * self.batch
        position = start
        while position < self.total:
            span = min(step_samples, self.total - position)
            each = span // self.size
            if each == 0:
                return
            yield order[position + self.rank : position + each * self.size : self.size]
            position += span

    # ------------------------------------------------------------------------------------------------- for fit
    def start_of(self, epoch) -> int:
        """Samples of `epoch` consumed before this fit trains it: the resumed one's commit position, else 0."""
        return self.start if epoch == self.first_epoch else 0

    def dataset(self, first_epoch, start):
        """A dataset Keras re-reads every epoch: the first read is `first_epoch` from `start`, each later read the
        next epoch whole. Reads count from the first one Keras makes after seen_by_fit() (not its look at the first
        batch while building the model)."""
        import tensorflow as tf

        self.first_epoch, self.start = first_epoch, start
        epochs = itertools.count(first_epoch)

        def index_batches():
            epoch = next(epochs) if self._counting else first_epoch
            yield from self.rank_indices(epoch, self.start_of(epoch))

        # Only the indices come from Python; the samples are gathered in TensorFlow, from one copy of the arrays
        # (as Keras' own array input does): a batch copied in Python each step made a small model's fit 1.3x slower.
        indices = tf.data.Dataset.from_generator(index_batches, output_signature=tf.TensorSpec((None,), tf.int64))
        arrays = tf.data.Dataset.from_tensors(self.data).repeat()
        gathered = tf.data.Dataset.zip((indices, arrays)).map(
            lambda i, data: tf.nest.map_structure(lambda a: tf.gather(a, i), data),
            num_parallel_calls=PARALLEL_GATHERS,
        )
        # No autotuning: its thread is the one an iterator's end waits for, and a survivor of a lost peer, leaving fit
        # mid-epoch, sometimes waited seconds there (past the stop grace, so it was killed: the host-loss soak, where
        # py-spy showed RootDataset's iterator waiting for its thread). Gathering a batch is cheap; a fixed depth does.
        options = tf.data.Options()
        options.autotune.enabled = False
        return gathered.prefetch(PREFETCHED_BATCHES).with_options(options)

    def seen_by_fit(self, epoch_iterator):
        """Keras built the model (perhaps reading a first batch): from now on each read of the dataset is the next
        epoch. `epoch_iterator` is fit's, whose epoch length set_epoch_length() sets (the first one seen: validation's
        evaluate comes through here too)."""
        self._counting = True
        if self._epoch_iterator is None:
            self._epoch_iterator = epoch_iterator

    def set_epoch_length(self, start):
        """The steps Keras takes in the epoch about to begin: the rest from `start`, then whole epochs. Keras'
        loop stops there, before asking for a batch the epoch does not have (running out of data would end the
        epoch inside a train step, where a TensorFlow collective's key may already have been drawn)."""
        iterator = self._epoch_iterator
        if iterator is None or not hasattr(iterator, "_num_batches"):
            raise RuntimeError(
                "this Keras version's fit did not show jupyter-dl its epoch iterator; an elastic fit over arrays "
                "needs it (install the Keras version jupyter-dl's requirements name)"
            )
        iterator._num_batches = self.steps(start)


@contextlib.contextmanager
def resumed_epochs_quiet():
    """Keras warns when an epoch ends before its steps_per_epoch: a resumed epoch does, by design."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_RAN_OUT)
        yield
