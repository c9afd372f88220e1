"""The second backend, TensorFlow's own collective ops (`--backend tf`), on real engines: an unchanged Keras cell
trains as it does on Horovod, a hand-written loop runs on either backend through `jupyter_dl.collectives`, a group
that changes size gets a new TensorFlow context (and the shipped model is built again in it), and a rank that dies
in a collective ends the job with one error naming it, without leaving the others waiting."""

import time

import numpy as np
import pytest

import jupyter_dl
from jupyter_dl.errors import RankError
from jupyter_dl.kernel import api

FIT = """
import keras
keras.utils.set_random_seed(3)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=3, batch_size=32, verbose=0)
"""


def _last_job():
    return api.session().jobs.all()[-1]


def test_an_unchanged_keras_cell_trains_on_tensorflows_collectives_as_on_horovod(dl_session, digits):
    losses = {}
    for backend in ("horovod", "tf"):
        namespace = dict(digits)
        api.distribute(FIT, 2, namespace=namespace, backend=backend, plot=False)
        job = _last_job()
        assert (job.state, job.options["backend"]) == ("succeeded", backend)
        losses[backend] = namespace["history"].history["loss"]
        assert namespace["model"].optimizer.iterations.numpy() == 3 * 22  # 700 samples a rank, batches of 32
    print("final loss, horovod vs tf:", losses["horovod"][-1], losses["tf"][-1])
    # Same seed, same sharding, the same averaged update: only the order of floating-point sums differs.
    np.testing.assert_allclose(losses["tf"], losses["horovod"], rtol=2e-3)
    assert losses["tf"][-1] < losses["tf"][0] * 0.5


def test_auto_is_horovod_where_it_is_installed(dl_session, digits):
    api.distribute(FIT.replace("epochs=3", "epochs=1"), 2, namespace=dict(digits), plot=False)
    assert _last_job().options["backend"] == "horovod"


MANUAL = """
import numpy as np
from jupyter_dl import collectives
me, n = collectives.rank(), collectives.size()
summed = collectives.allreduce(np.full(3, me + 1.0), op="sum")
averaged = collectives.allreduce(float(me))
largest = collectives.allreduce(np.array([me]), op="max")
config = collectives.broadcast({"lr": 0.1, "from": me}, root=1)
everyone = collectives.allgather({"rank": me})
collectives.barrier()
seen = (me, n, summed.tolist(), float(averaged), int(largest[0]), config, everyone)
"""


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_a_hand_written_loop_runs_on_either_backend_through_jupyter_dl_collectives(dl_session, backend):
    namespace = {}
    api.distribute(MANUAL, 2, namespace=namespace, backend=backend, manual=True, plot=False)
    me, n, summed, averaged, largest, config, everyone = namespace["seen"]  # rank 0's
    assert (me, n) == (0, 2)
    assert summed == [3.0, 3.0, 3.0] and averaged == 0.5 and largest == 1
    assert config == {"lr": 0.1, "from": 1}
    assert everyone == [{"rank": 0}, {"rank": 1}]


def test_a_new_group_gets_a_new_context_and_the_shipped_model_is_built_again(dl_session, digits):
    """A model built in the notebook travels to the engines once; after a job of another size (a new TensorFlow
    context on each engine, in which objects of the old one do not work) it is built again from what arrived."""
    import keras

    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train = "history = model.fit(x_train, y_train, epochs=1, batch_size=64, verbose=0)"
    for n in (2, 1, 2):
        namespace = {**digits, "model": model}
        api.distribute(train, n, namespace=namespace, backend="tf", plot=False)
        assert _last_job().state == "succeeded", n
        assert np.isfinite(namespace["history"].history["loss"][-1])


def test_the_next_job_on_the_same_engines_keeps_their_group(dl_session, digits):
    """A new group costs a TensorFlow context (its server cannot be stopped: ~100 threads and ~65 MB stay in the
    engine), so consecutive jobs on the same engines keep theirs: the engines report the same addresses after."""
    from jupyter_dl.wire import remote

    def groups():
        ids = _last_job().engine_ids
        return [dl_session.cluster.client[eid].apply_sync(remote.TF_ADDRESS, "lo")["formed"] for eid in ids]

    cell = FIT.replace("epochs=3", "epochs=1")
    api.distribute(cell, 2, namespace=dict(digits), backend="tf", plot=False)
    first = groups()
    api.distribute(cell, 2, namespace=dict(digits), backend="tf", plot=False)
    assert first[0] is not None and groups() == first
    assert [rank for _, rank in first] == [0, 1]


DIES_IN_ALLREDUCE = """
import os, time
import numpy as np
from jupyter_dl import collectives
if collectives.rank() == 1:
    time.sleep(0.5)
    os._exit(3)            # the engine process vanishes while rank 0 waits in the allreduce below
collectives.allreduce(np.ones(3))
"""


def test_a_rank_that_dies_in_a_collective_ends_the_job_with_one_error_naming_it(dl_session):
    assert jupyter_dl.distribute(_size, n=2, backend="tf", manual=True) == 2  # warm engines
    started = time.monotonic()
    with pytest.raises(RankError) as err:
        jupyter_dl.distribute(DIES_IN_ALLREDUCE, n=2, namespace={}, manual=True, backend="tf")
    took = time.monotonic() - started
    assert err.value.rank == 1 and err.value.ename == "EngineError"
    assert "rank 1" in str(err.value)
    assert took < 10, f"time to error {took:.1f}s"  # the same bound as Horovod's (tests/kernel/test_faults.py)
    print(f"TensorFlow backend: time to error after an engine died: {took:.2f}s")
    assert jupyter_dl.distribute(_size, n=2, backend="tf", manual=True) == 2  # replaced; a new group forms


def _size():
    from jupyter_dl import collectives

    return collectives.size()


def _contexts_and_pid():
    import os

    from jupyter_dl.backends import tf_ops

    return tf_ops.contexts_started(), os.getpid()


def test_an_engine_that_formed_max_tf_contexts_groups_is_replaced_after_the_job(dl_session, capsys):
    """Each new group leaves a collective server TensorFlow cannot stop (measured: about 100 threads and 41 MB per
    engine for every switch between the backends). Past JobRunner.max_tf_contexts the kernel replaces the engine
    once the job is over, and the next job runs on the fresh one."""
    runner = dl_session.runner
    kept = runner.max_tf_contexts
    try:
        before = jupyter_dl.distribute(_contexts_and_pid, n=2, backend="tf", all_ranks=True)
        runner.max_tf_contexts = before[0][0] + 1  # the next new group on these engines reaches it
        jupyter_dl.distribute("x = 1", n=2, backend="horovod", namespace={})  # back to a plain context
        after_switch = jupyter_dl.distribute(_contexts_and_pid, n=2, backend="tf", all_ranks=True)
        assert [c for c, _ in after_switch] == [before[0][0] + 1] * 2, (before, after_switch)
        assert "replacing engines" in capsys.readouterr().err
        fresh = jupyter_dl.distribute(_contexts_and_pid, n=2, backend="tf", all_ranks=True)
        assert {pid for _, pid in fresh}.isdisjoint(pid for _, pid in before), (before, fresh)
        assert [c for c, _ in fresh] == [1, 1]  # a fresh engine's first group
    finally:
        runner.max_tf_contexts = kept


# A fresh engine that ran a job on another backend first: its plain TensorFlow context resolved "cpu:0" then.
_DEVICE_SCOPE_ACROSS_BACKENDS = """
import os, socket
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
from jupyter_dl.backends import tf_ops

with tf.device("cpu:0"):  # as Keras' TensorBoard callback does when it makes its writer
    tf.constant(1.0)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
tf_ops.form(0, 1, [f"127.0.0.1:{port}"], register_s=30)
with tf.device("cpu:0"):
    print("placed on", tf.constant(2.0).device)
"""


def test_a_device_scope_seen_before_the_group_formed_names_the_group_s_device():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _DEVICE_SCOPE_ACROSS_BACKENDS], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "placed on /job:worker/replica:0/task:0/device:CPU:0" in done.stdout, done.stdout


@pytest.mark.fast
def test_a_fresh_collective_server_port_is_free_outside_the_ephemeral_range_and_leaves_random_alone():
    """A port bound to 0 comes from the range outgoing connections take theirs from: one taken between the probe and
    the server's bind failed a job with "Could not start gRPC server" while other tests ran."""
    import random
    import socket

    from jupyter_dl.backends import tf as tf_backend

    random.seed(7)
    expected = random.random()
    random.seed(7)
    low = tf_backend._ephemeral_range()[0]
    ports = {tf_backend._free_port() for _ in range(20)}
    assert random.random() == expected  # the cell's seeded generator is untouched
    assert len(ports) > 1 and all(20000 <= port < low for port in ports), ports
    with socket.socket() as server:
        server.bind(("", ports.pop()))
