"""A seeded notebook's random state travels with the job, so the ranks draw what one process would draw.

`keras.utils.set_random_seed(1)` in an earlier cell seeds the kernel's Python, NumPy, TensorFlow and Keras
generators; a model the %%distribute cell builds takes its initial weights from them (rank 0's, which the other
ranks receive). The kernel sends the generators' current state with the job, every rank takes it just before the
cell, and rank 0's state at the end comes back, so the next cell goes on from where one process would be. An
unseeded notebook sends nothing and its ranks forget any seed an earlier job left on the engine.

Kernel and engines both import this module; it never imports Keras itself (only reads it where it is loaded).
"""

import random
import sys

_SEED = "global_random_seed"  # where keras.utils.set_random_seed records its seed (keras.src.utils.rng_utils)
_GENERATOR = "global_seed_generator"  # Keras' generator for keras.random calls without a seed


def capture() -> dict | None:
    """This process's random state when Keras is loaded and seeded; None otherwise, also where this Keras keeps
    its seed elsewhere (these are Keras' and TensorFlow's internals: a job must not fail for a seed it cannot read)."""
    if "keras" not in sys.modules:
        return None
    try:
        return _capture()
    except (ImportError, AttributeError):
        return None


def _capture() -> dict | None:
    import numpy as np
    from keras.src.backend.common import global_state

    seed = global_state.get_global_attribute(_SEED)
    if seed is None:
        return None
    generator = global_state.get_global_attribute(_GENERATOR)
    return {
        "seed": seed,
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "tensorflow": _tensorflow_op_seeds(),
        "keras_generator": None if generator is None else np.asarray(generator.state.numpy()),
    }


def restore(state: dict | None):
    """Takes a state from capture(); None (an unseeded notebook) forgets a seed set here before."""
    if state is None:
        if "keras" in sys.modules:
            from keras.src.backend.common import global_state

            global_state.set_global_attribute(_SEED, None)
        return
    import keras
    import numpy as np
    from keras.src.backend.common import global_state

    keras.utils.set_random_seed(state["seed"])  # the TensorFlow seed, and Keras' own record of the seed
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if state["tensorflow"] is not None:
        _tensorflow_context()._rng.setstate(state["tensorflow"])
    if state["keras_generator"] is not None:
        generator = keras.random.SeedGenerator(seed=0)
        generator.state.assign(state["keras_generator"])
        global_state.set_global_attribute(_GENERATOR, generator)


def _tensorflow_context():
    from tensorflow.python.eager import context

    return context.context()


def _tensorflow_op_seeds():
    """The state of the generator TensorFlow draws op seeds from (a shuffle or tf.random call with no seed)."""
    if "tensorflow" not in sys.modules:
        return None
    generator = getattr(_tensorflow_context(), "_rng", None)
    return generator.getstate() if generator is not None else None
