"""Engine side: Horovod's own elastic API in a jupyter-dl job, written as Horovod's elastic examples write it in a
`--manual` cell (`state = hvd.elastic.KerasState(model, epoch=0)`, `@hvd.elastic.run def train(state): ...`,
`state.commit()` or `hvd.elastic.CommitStateCallback(state)`).

Under horovodrun, Horovod's elastic driver tells the workers of new and lost hosts, and `run` re-initialises Horovod
in place. A jupyter-dl job has no such driver: an elastic job (`-n MIN:MAX`) changes its group by running the cell
again on the new group (runtime/elastic.py). So in a job:
- `state.commit()` is one of the elastic job's commit points: what the state saved is also kept in this engine's
  memory beside the job's other commits, and when the kernel asks for a change every rank leaves at the same commit;
- `@hvd.elastic.run` syncs the state and calls the function. On the next group's run of the cell, the state the cell
  makes again is first put back to its last commit (on the ranks that hold one; the sync gives everyone rank 0's)
  and its reset callbacks run, as after a reset under horovodrun: they rescale the learning rate for the new size;
- a lost peer's error is not caught to re-initialise Horovod in place (nothing could re-form the group that way): it
  ends this run of the cell, and the kernel forms the next group from the survivors.
In a job of fixed size a commit only saves, as under horovodrun with no host changes.
"""

import functools

import numpy as np

from jupyter_dl.runtime import elastic
from jupyter_dl.runtime.job_backend import backend

# What each of Horovod's TensorFlow states keeps when it saves: ObjectState its attributes (epoch, batch, ...), the
# Keras state its model's and optimizer's values, TensorFlowState its variables' values.
_SAVED_FIELDS = ("_saved_state", "_saved_model_state", "_saved_optimizer_state", "_values")

_installed = False


def install():
    """Patch the imported Horovod elastic modules for this engine's jobs. Safe to call again."""
    global _installed
    if _installed:
        return
    import horovod.common.elastic as common
    import horovod.tensorflow.elastic as tf_elastic
    import horovod.tensorflow.keras.elastic as keras_elastic

    for module in (tf_elastic, keras_elastic):
        module.run = run
    try:
        import horovod.keras.elastic as plain_keras_elastic

        plain_keras_elastic.run = run
    except ImportError:  # horovod.keras is optional
        pass
    common.State.commit = _commit
    common.State.check_host_updates = _check_for_a_change
    _installed = True


def run(func):
    """`@hvd.elastic.run` in a jupyter-dl job (see the module's docstring)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if elastic.running_job() is not None:
            _resume(state)
        state.sync()
        return func(state, *args, **kwargs)

    return wrapper


def _commit(state):
    state.save()
    if elastic.running_job() is not None:
        elastic.keep(_key(state), {field: _copied(getattr(state, field)) for field in _fields(state)})
    state.check_host_updates()


def _check_for_a_change(state):
    """No driver sends host updates here; in an elastic job the kernel's request is the change."""
    job = elastic.running_job()
    if job is not None:
        point, where = f"{_key(state)}.{_commits_seen(state)}", f"at a commit of {type(state).__name__}"
        elastic.leave_if_asked(job[1], backend().rank_and_size()[0], point, where)


def _resume(state):
    """Put the state back to its commit on the ranks that hold one; if rank 0 did, this is a new group going on from
    it, and every rank runs the state's reset callbacks before the sync."""
    commit = elastic.kept(_key(state))
    if commit is not None:
        for field, value in commit.items():
            setattr(state, field, _copied(value))
        state.restore()
    if backend().broadcast_object(commit is not None, name=f"jdl.hvd_elastic.{_key(state)}"):
        state.on_reset()


def _key(state) -> str:
    """The state's name among the job's commits: the n-th Horovod state this run of the cell made."""
    if getattr(state, "_jdl_index", None) is None:
        state._jdl_index = elastic.next_index("hvd_state")
    return f"hvd-state-{state._jdl_index}"


def _commits_seen(state) -> int:
    state._jdl_checks = getattr(state, "_jdl_checks", 0) + 1
    return state._jdl_checks


def _fields(state) -> list:
    return [field for field in _SAVED_FIELDS if hasattr(state, field)]


def _copied(value):
    """A saved value held apart from the live objects: tensors as arrays, containers copied."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_copied(item) for item in value)
    if hasattr(value, "numpy"):
        return np.array(value.numpy())
    return value
