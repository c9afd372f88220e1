"""What zero-code mode says when it cannot do what a cell asks: ranks that trained apart are reported, names that
could not come back are named and never keep an older value, and rank counts the machine cannot run are refused
before anything starts. Real engines, real Horovod."""

import os

import pytest

from jupyter_dl.errors import UsageError

# Weights updated by hand (no optimizer), from a random initialisation that differs per rank (as without a seed;
# the engines' generators may share a state left by an earlier seeded cell, so each seeds from its pid): nothing
# jupyter-dl can average, so the ranks end apart.
UPDATED_BY_HAND = """
import os
import keras
import tensorflow as tf
keras.utils.set_random_seed(os.getpid() % 100000)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
for start in range(0, 1400, 100):
    with tf.GradientTape() as tape:
        logits = model(x_train[start:start + 100])
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y_train[start:start + 100], logits,
                                                                           from_logits=True))
    for variable, gradient in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables)):
        variable.assign_sub(0.1 * gradient)
"""


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_ranks_that_trained_apart_are_reported(shell, digits, capsys, backend):
    shell.user_ns.update(digits)
    result = shell.run_cell(f"%%distribute -n 2 --backend {backend}\n" + UPDATED_BY_HAND, store_history=False)
    assert result.success, result.error_in_exec
    err = capsys.readouterr().err
    assert "the ranks trained apart: model 'model' differs on rank 1" in err, err
    assert "outside a Keras optimizer" in err
    assert shell.user_ns["model"] is not None  # rank 0's model still comes back, with the warning


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_the_same_cell_through_an_optimizer_is_not_reported(shell, digits, capsys, backend):
    shell.user_ns.update(digits)
    through_optimizer = UPDATED_BY_HAND.replace(
        "model = keras.Sequential", "optimizer = keras.optimizers.SGD(0.1)\nmodel = keras.Sequential"
    ).replace(
        """    for variable, gradient in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables)):
        variable.assign_sub(0.1 * gradient)""",
        "    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))",
    )
    assert "apply_gradients" in through_optimizer
    result = shell.run_cell(f"%%distribute -n 2 --backend {backend}\n" + through_optimizer, store_history=False)
    assert result.success, result.error_in_exec
    assert "trained apart" not in capsys.readouterr().err


def test_a_model_that_cannot_come_back_is_named_and_its_old_value_removed(shell, digits, capsys):
    shell.user_ns.update(digits)
    shell.user_ns["model"] = "the model from an earlier cell"
    # A subclass built from a value that cannot leave the process (a lock): it cannot be rebuilt on the other side.
    cell = """
import threading
import keras
class Wrapper(keras.Model):
    def __init__(self, inner, lock):
        super().__init__()
        self.inner = inner
        self.lock = lock
    def call(self, x):
        return self.inner(x)
model = Wrapper(keras.layers.Dense(10, activation="softmax"), lock=threading.Lock())
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x_train, y_train, epochs=1, verbose=0)
trained = True
"""
    result = shell.run_cell("%%distribute -n 2\n" + cell, store_history=False)
    assert result.success, result.error_in_exec
    err = capsys.readouterr().err
    assert "'model' did not come back from the engines" in err, err
    assert "argument 'lock' of Wrapper()" in err  # names what could not travel
    assert "older value was removed" in err
    assert "model" not in shell.user_ns  # no stale value that looks like the result
    assert shell.user_ns["trained"] is True  # the other names came back


def test_too_many_ranks_for_this_machine_are_refused_before_anything_starts(dl_session):
    import jupyter_dl
    from jupyter_dl.cluster.size_checks import cpu_rank_limit
    from jupyter_dl.kernel import api

    engines_before = len(dl_session.cluster.engine_ids())
    jobs_before = len(api.session().jobs.all())
    limit = cpu_rank_limit(dl_session.cluster.max_cpu_ranks)
    assert limit == 2 * os.cpu_count()
    with pytest.raises(UsageError, match=rf"more than this machine can run.*at most {limit} ranks.*connect a bigger"):
        jupyter_dl.distribute("x = 1\n", n=99, namespace={})
    assert len(dl_session.cluster.engine_ids()) == engines_before
    assert len(api.session().jobs.all()) == jobs_before


def test_local_cluster_start_refuses_too_many_cpu_engines():
    from jupyter_dl.cluster.engines import EngineCluster

    cluster = EngineCluster()
    with pytest.raises(UsageError, match="more than this machine can run"):
        cluster.start(n=64)
    assert cluster.client is None and cluster.cluster is None


SAVES = {
    # (file name, the cell's save line, how it reads the file back into `reloaded`)
    "model.save": ("digits.keras", "model.save(path)", "reloaded = keras.models.load_model(path)"),
    "keras.saving.save_model": (
        "digits.keras",
        "keras.saving.save_model(model, path)",
        "reloaded = keras.models.load_model(path)",
    ),
    "tf.keras.models.save_model": (
        "digits.keras",
        "import tensorflow as tf; tf.keras.models.save_model(model, path)",
        "reloaded = keras.models.load_model(path)",
    ),
    "model.export": (
        "digits_saved_model",
        "model.export(path, verbose=False)",
        "import tensorflow as tf; served = tf.saved_model.load(path); "
        "reloaded = keras.Sequential([keras.Input((64,)), keras.layers.Lambda(lambda x: served.serve(x))])",
    ),
    "keras.saving.save_weights": (
        "digits.weights.h5",
        "keras.saving.save_weights(model, path)",
        "reloaded = keras.models.clone_model(model); reloaded.load_weights(path)",
    ),
}


@pytest.mark.parametrize("how", list(SAVES))
def test_a_save_to_a_shared_path_is_written_by_rank_0_and_readable_by_all(shell, digits, tmp_path, how):
    """However the cell saves (Model.save or Keras' saving functions), a path the ranks share is written once, by
    rank 0, and the other ranks wait for it: two ranks writing one file at once would leave a torn file."""
    file_name, save, load = SAVES[how]
    shell.user_ns.update(digits)
    shell.user_ns["path"] = str(tmp_path / file_name)
    cell = f"""
import os
import keras
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x_train, y_train, epochs=1, verbose=0)
{save}
written = os.stat(path)
{load}          # every rank reads the file back at once
import horovod.tensorflow as hvd_check
import numpy as np
same = hvd_check.allgather_object(bool(np.allclose(reloaded.predict(x_test, verbose=0),
                                                   model.predict(x_test, verbose=0))))
versions = hvd_check.allgather_object((written.st_ino, written.st_mtime_ns, written.st_size))
"""
    result = shell.run_cell("%%distribute -n 2\n" + cell, store_history=False)
    assert result.success, result.error_in_exec
    assert shell.user_ns["same"] == [True, True]  # rank 1 waited for rank 0's write and read a whole file
    versions = shell.user_ns["versions"]
    assert versions[0] == versions[1], versions  # one write: both ranks saw the same file after the save
    assert os.path.exists(shell.user_ns["path"])
