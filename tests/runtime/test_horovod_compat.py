"""Horovod's own TF2 and Keras APIs on Keras 3 (issue 13): cells written the way Horovod's examples are, run as
`%%distribute --manual -n 2` on real engines with real Horovod over gloo, and the same code as a script under
`horovodrun -np 2 --gloo` with `import jupyter_dl.horovod_compat` on top. Each rank starts from different weights
on purpose (seeded by rank), so identical weights at the end prove the broadcast and the gradient reduction."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

EPOCHS = 12
ACCURACY_TOLERANCE = 0.03  # |2-rank test accuracy - single-process test accuracy| on digits (397 test samples)

# Loads digits exactly like tests/conftest.py's `digits` fixture (the horovodrun script has no fixtures).
DIGITS = """
import numpy as np
from sklearn.datasets import load_digits
_data = load_digits()
_x, _y = (_data.data / 16.0).astype("float32"), _data.target.astype("int64")
_order = np.random.default_rng(0).permutation(len(_x))
_x, _y = _x[_order], _y[_order]
x_train, y_train, x_test, y_test = _x[:1400], _y[:1400], _x[1400:], _y[1400:]
"""

# Horovod's tensorflow2_mnist.py, on digits: DistributedGradientTape in a tf.function, broadcast after step one.
CUSTOM_LOOP = f"""
import keras
import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd

hvd.init()  # as in Horovod's examples; in a --manual cell Horovod is initialised already and this is a no-op
keras.utils.set_random_seed(hvd.rank())  # different initial weights on each rank: the broadcast must fix that
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
loss_fn = keras.losses.SparseCategoricalCrossentropy()
opt = keras.optimizers.Adam(0.001 * hvd.size())
dataset = tf.data.Dataset.from_tensor_slices((x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]))
dataset = dataset.batch(32)


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        loss_value = loss_fn(labels, model(images, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss_value, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
    return loss_value


step = 0
for epoch in range({EPOCHS}):
    for images, labels in dataset:
        loss_value = training_step(images, labels, step == 0)
        step += 1
loop_weights = hvd.allgather_object(model.get_weights(), name="loop_weights")
loop_accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), axis=1) == y_test))
"""

# Horovod's keras_mnist.py, on digits: DistributedOptimizer + the callbacks, through compile and fit.
KERAS_FIT = f"""
import keras
import numpy as np
import horovod.keras as hvd
import horovod.tensorflow as hvd_tf  # allgather_object, to compare the ranks' results

hvd.init()
keras.utils.set_random_seed(hvd.rank())
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
scaled_lr = 0.001 * hvd.size()
opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2, steps_per_epoch=22, verbose=1),
]
history = model.fit(x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()], batch_size=32,
                    epochs={EPOCHS}, callbacks=callbacks, verbose=1 if hvd.rank() == 0 else 0)
fit_weights = hvd_tf.allgather_object(model.get_weights(), name="fit_weights")
fit_histories = hvd_tf.allgather_object(history.history, name="fit_histories")
fit_accuracy = float(model.evaluate(x_test, y_test, verbose=0)[1])
"""

# Horovod's tensorflow2_synthetic_benchmark.py, small: random data, fp16 compression, timed steps. An Embedding
# gives sparse gradients (tf.IndexedSlices), which sparse_as_dense turns dense before the allreduce.
SYNTHETIC = """
import timeit
import keras
import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd

hvd.init()
keras.utils.set_random_seed(hvd.rank())
model = keras.Sequential([keras.Input((16,), dtype="int32"), keras.layers.Embedding(100, 8),
                          keras.layers.Flatten(), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
opt = keras.optimizers.SGD(0.01)
data = tf.random.uniform([32, 16], maxval=100, dtype=tf.int32)
target = tf.random.uniform([32], maxval=10, dtype=tf.int64)


@tf.function
def benchmark_step(first_batch):
    with tf.GradientTape() as tape:
        probs = model(data, training=True)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(target, probs, from_logits=True))
    tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16, sparse_as_dense=True)
    gradients = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(gradients, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)


benchmark_step(first_batch=True)
img_secs = [32 * 5 / timeit.timeit(lambda: benchmark_step(first_batch=False), number=5) for _ in range(3)]
synthetic_weights = hvd.allgather_object(model.get_weights(), name="synthetic_weights")
"""


def _run(shell, code):
    result = shell.run_cell("%%distribute --manual -n 2\n" + code, store_history=False)
    assert result.success, result.error_in_exec
    return shell.user_ns


def _assert_identical(per_rank_weights):
    assert len(per_rank_weights) == 2
    rank0, rank1 = per_rank_weights
    assert len(rank0) == len(rank1) > 0
    for w0, w1 in zip(rank0, rank1):
        np.testing.assert_array_equal(w0, w1)


@pytest.fixture(scope="module")
def single_process_accuracy(digits):
    """The same model trained in this process, without Horovod: what the distributed runs are compared with."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(digits["x_train"], digits["y_train"], batch_size=32, epochs=EPOCHS, verbose=0)
    accuracy = float(model.evaluate(digits["x_test"], digits["y_test"], verbose=0)[1])
    assert accuracy > 0.9
    return accuracy


def test_custom_loop_with_distributed_gradient_tape(shell, digits, single_process_accuracy):
    shell.user_ns.update(digits)
    ns = _run(shell, CUSTOM_LOOP)
    _assert_identical(ns["loop_weights"])
    print(f"custom loop: 2-rank accuracy {ns['loop_accuracy']:.4f}, single process {single_process_accuracy:.4f}")
    assert abs(ns["loop_accuracy"] - single_process_accuracy) <= ACCURACY_TOLERANCE


def test_keras_fit_with_distributed_optimizer_and_callbacks(shell, digits, single_process_accuracy, capsys):
    shell.user_ns.update(digits)
    ns = _run(shell, KERAS_FIT)
    _assert_identical(ns["fit_weights"])
    print(f"fit: 2-rank accuracy {ns['fit_accuracy']:.4f}, single process {single_process_accuracy:.4f}")
    assert abs(ns["fit_accuracy"] - single_process_accuracy) <= ACCURACY_TOLERANCE
    history0, history1 = ns["fit_histories"]
    assert history0 == history1  # MetricAverageCallback: both ranks' epoch logs are the average
    lr = history0["lr"]  # the warmup ramps from 0.001 (= 0.002 / 2 ranks) to 0.002 over 2 epochs, then holds
    assert lr[0] == pytest.approx(0.0015, rel=0.05) and lr[1] == pytest.approx(0.002) and lr[-1] == pytest.approx(0.002)
    assert "finished gradual learning rate warmup" in capsys.readouterr().out
    import keras

    assert isinstance(ns["model"], keras.Model)  # the trained model came back to the notebook, usable
    assert ns["model"].evaluate(digits["x_test"], digits["y_test"], verbose=0)[1] == pytest.approx(ns["fit_accuracy"])


def test_synthetic_benchmark_loop_with_compression_and_sparse_gradients(shell):
    ns = _run(shell, SYNTHETIC)
    _assert_identical(ns["synthetic_weights"])
    assert all(rate > 0 for rate in ns["img_secs"])


def test_optimizer_options_schedule_callback_and_load_model(shell, digits, tmp_path):
    """horovod.tensorflow.keras (the other module name): backward_passes_per_step, op=Sum, the schedule callback,
    and load_model restoring a saved model with its optimizer state as a Horovod optimizer."""
    shell.user_ns.update(digits, path=str(tmp_path / "model.keras"))
    ns = _run(
        shell,
        """
import keras
import numpy as np
import horovod.tensorflow.keras as hvd
from horovod.tensorflow import allgather_object

def build(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])

x, y = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
model = build(hvd.rank())
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), backward_passes_per_step=2,
                               average_aggregated_gradients=True)
model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
schedule = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.05, multiplier=0.5, start_epoch=1,
                                                      momentum_correction=False)
history = model.fit(x, y, batch_size=50, epochs=3, verbose=0,
                    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), schedule])
accumulated_weights = allgather_object(model.get_weights(), name="accumulated")
iterations = int(model.optimizer.iterations.numpy())
if hvd.rank() == 0:
    model.save(path)
hvd.allreduce(np.zeros(1), name="saved")  # a barrier: rank 1 loads after rank 0 has written
loaded = hvd.load_model(path)
loaded_iterations = int(loaded.optimizer.iterations.numpy())
loaded.fit(x, y, batch_size=50, epochs=1, verbose=0)
loaded_weights = allgather_object(loaded.get_weights(), name="loaded")

summed = build(hvd.rank())
summed.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01), op=hvd.Sum),
               loss="sparse_categorical_crossentropy")
summed.fit(x, y, batch_size=50, epochs=1, verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
summed_weights = allgather_object(summed.get_weights(), name="summed")
""",
    )
    _assert_identical(ns["accumulated_weights"])
    _assert_identical(ns["loaded_weights"])
    _assert_identical(ns["summed_weights"])
    assert ns["history"].history["lr"] == pytest.approx([0.05, 0.05, 0.025])
    assert ns["iterations"] == 3 * 14 // 2  # 14 micro-batches an epoch (700 per rank / 50); an update every 2
    assert ns["loaded_iterations"] == ns["iterations"]  # the optimizer's state came back with the model


REFUSALS = """
import keras
import numpy as np
import horovod.tensorflow as hvd
import horovod.keras as hvd_keras

refusals = {}
def attempt(name, fn):
    try:
        fn()
    except Exception as exc:
        refusals[name] = (type(exc).__name__, str(exc))

def adasum_tape():
    import tensorflow as tf
    v = keras.Variable(1.0)
    with tf.GradientTape() as tape:
        loss = v * 2.0
    hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(loss, [v])

attempt("tape Adasum", adasum_tape)
attempt("optimizer Adasum", lambda: hvd_keras.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum))
attempt("broadcast_global_variables", lambda: hvd_keras.broadcast_global_variables(0))
attempt("legacy load_model", lambda: hvd_keras.load_model("unused.keras", legacy_opts=True))
attempt("not a Keras optimizer", lambda: hvd_keras.DistributedOptimizer(object()))
def xla():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD()), loss="mse", jit_compile=True)
attempt("jit_compile=True", xla)
def schedule_and_callback():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    lr = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(lr)), loss="mse")
    callback = hvd_keras.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=0.5)
    model.fit(np.zeros((4, 2)), np.zeros((4, 1)), verbose=0, callbacks=[callback])
attempt("LearningRateSchedule + callback", schedule_and_callback)
"""


def test_refused_apis_say_so_in_one_line(shell):
    ns = _run(shell, REFUSALS)
    refusals = ns["refusals"]
    assert sorted(refusals) == sorted(
        [
            "tape Adasum",
            "optimizer Adasum",
            "broadcast_global_variables",
            "legacy load_model",
            "not a Keras optimizer",
            "jit_compile=True",
            "LearningRateSchedule + callback",
        ]
    )
    for name, (ename, message) in refusals.items():
        assert ename == "Keras3Unsupported", (name, ename, message)
        assert "\n" not in message and len(message) < 200, (name, message)
        assert "; use " in message, (name, message)  # what to do instead


def test_refusal_reaches_the_notebook_without_a_deep_traceback(shell):
    from jupyter_dl.errors import RankError

    result = shell.run_cell(
        "%%distribute --manual -n 2\nimport horovod.keras as hvd\nhvd.broadcast_global_variables(0)\n",
        store_history=False,
    )
    err = result.error_in_exec
    assert isinstance(err, RankError), err
    assert err.ename == "Keras3Unsupported" and "BroadcastGlobalVariablesCallback" in err.evalue
    rendered = "\n".join(err._render_traceback_())
    assert rendered.count('File "') <= 2, rendered  # the user's line and the one that raised, nothing deeper


SCRIPT = (
    "import jupyter_dl.horovod_compat  # the one line a horovodrun script needs\n"
    + DIGITS
    + CUSTOM_LOOP
    + KERAS_FIT.replace("import horovod.keras as hvd", "import horovod.tensorflow.keras as hvd")
    + textwrap.dedent("""
          import json, sys
          if hvd.rank() == 0:
              with open(sys.argv[1], "w") as out:
                  json.dump({"loop_weights": [[w.tolist() for w in ws] for ws in loop_weights],
                             "fit_weights": [[w.tolist() for w in ws] for ws in fit_weights],
                             "loop_accuracy": loop_accuracy, "fit_accuracy": fit_accuracy,
                             "fit_histories": fit_histories}, out)
          """)
)


def test_same_code_under_horovodrun_with_the_compat_import(tmp_path, single_process_accuracy):
    script = tmp_path / "train_hvd.py"
    script.write_text(SCRIPT)
    results = tmp_path / "results.json"
    horovodrun = Path(sys.executable).parent / "horovodrun"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script), str(results)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0 and results.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(results.read_text())
    _assert_identical([[np.array(w) for w in ws] for ws in data["loop_weights"]])
    _assert_identical([[np.array(w) for w in ws] for ws in data["fit_weights"]])
    assert data["fit_histories"][0] == data["fit_histories"][1]
    print(
        f"horovodrun: custom loop {data['loop_accuracy']:.4f}, fit {data['fit_accuracy']:.4f}, "
        f"single process {single_process_accuracy:.4f}"
    )
    assert abs(data["loop_accuracy"] - single_process_accuracy) <= ACCURACY_TOLERANCE
    assert abs(data["fit_accuracy"] - single_process_accuracy) <= ACCURACY_TOLERANCE


# Horovod's Keras elastic example (KerasState, its three callbacks, @hvd.elastic.run) under plain horovodrun: no
# host ever changes, so it must train as a fixed job does and end with the state's epoch count moved on.
ELASTIC_SCRIPT = DIGITS + textwrap.dedent("""
    import json, sys
    import jupyter_dl.horovod_compat  # noqa: F401
    import keras
    import horovod.tensorflow.keras as hvd

    hvd.init()
    keras.utils.set_random_seed(hvd.rank())
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size())),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        shard = slice(hvd.rank(), None, hvd.size())
        model.fit(x_train[shard], y_train[shard], batch_size=32, callbacks=callbacks, epochs=5 - state.epoch,
                  verbose=0)

    train(state)
    with open(sys.argv[1] + f".{hvd.rank()}", "w") as out:
        json.dump({"weights": [w.tolist() for w in model.get_weights()], "epoch": state.epoch,
                   "accuracy": float(model.evaluate(x_test, y_test, verbose=0)[1])}, out)
    """)


def test_horovods_elastic_keras_state_under_horovodrun_with_the_compat_import(tmp_path):
    """Before the compat's elastic part: "'list' object is not callable" (optimizer.variables() on Keras 3)."""
    script = tmp_path / "train_elastic.py"
    script.write_text(ELASTIC_SCRIPT)
    horovodrun = Path(sys.executable).parent / "horovodrun"
    proc = subprocess.run(
        [str(horovodrun), "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, str(script), str(tmp_path / "r")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    ranks = [tmp_path / f"r.{rank}" for rank in (0, 1)]
    assert proc.returncode == 0 and all(r.exists() for r in ranks), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = [json.loads(r.read_text()) for r in ranks]
    _assert_identical([[np.array(w) for w in d["weights"]] for d in data])  # seeded apart: the sync made them equal
    assert [d["epoch"] for d in data] == [5, 5]
    assert data[0]["accuracy"] > 0.85
