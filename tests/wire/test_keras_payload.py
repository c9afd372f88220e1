"""Keras objects through the wire format in one process (no engines): what the other side rebuilds keeps its
dtype policy, registered classes and optimizer state, and in-place updates keep the receiver's objects. The
end-to-end versions of these run on real engines in test_state_comes_back.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from jupyter_dl.wire import payload

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

X = np.random.default_rng(0).random((32, 4)).astype("float32")
Y = np.random.default_rng(1).integers(0, 3, 32)


def _travel(names, namespace, receiver=None, in_place=()):
    values, problems = payload.unpack(payload.pack(names, namespace), receiver or {}, in_place=set(in_place))
    assert problems == {}
    return values


def _dense_model(name=None):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")], name=name)


@pytest.fixture
def float32_after():
    yield
    keras.config.set_dtype_policy("float32")


def test_mixed_precision_model_is_rebuilt_under_its_own_policy(float32_after):
    keras.config.set_dtype_policy("mixed_float16")
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3), keras.layers.Activation("softmax", dtype="float32")]
    )
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(X, Y, epochs=1, verbose=0)
    keras.config.set_dtype_policy("float32")  # the receiver's global policy
    back = _travel(["model"], {"model": model})["model"]
    assert type(back.optimizer).__name__ == "LossScaleOptimizer"
    assert int(back.optimizer.iterations.numpy()) == 1  # its state fits, so it came along
    assert keras.config.dtype_policy().name == "float32"  # and the receiver's policy is left as it was


def test_a_registered_class_is_found_by_its_registered_name():
    @keras.saving.register_keras_serializable(package="jdltest")
    class Registered(keras.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.head = keras.layers.Dense(3)

        def call(self, x):
            return self.head(x)

    Registered.__module__ = "__main__"  # as when defined in a notebook cell
    model = Registered()
    model(X)
    packed = payload.pack(["model"], {"model": model})
    keras.saving.get_custom_objects().pop("jdltest>Registered")  # the receiver never ran the decorator
    values, problems = payload.unpack(packed, {})
    assert problems == {} and type(values["model"]).__name__ == "Registered"


def test_a_model_trained_in_place_updates_the_receiver_s_objects():
    opt = keras.optimizers.Adam(1e-3)
    model = _dense_model()
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    remote = _travel(["model"], {"model": model})["model"]
    remote.fit(X, Y, epochs=2, batch_size=16, verbose=0)
    back = _travel(["model"], {"model": remote}, {"model": model, "opt": opt}, in_place={"model"})
    assert back["model"] is model and model.optimizer is opt
    assert int(opt.iterations.numpy()) == 4
    np.testing.assert_allclose(model.get_weights()[0], remote.get_weights()[0])


def test_a_recompiled_model_is_compiled_again_in_place_and_a_rebound_name_is_replaced():
    """`model.compile(SGD)` above the cell's fit compiles the notebook's own model, as in one process: same object,
    the cell's optimizer with its state, moved over to the notebook's variables (it goes on training them)."""
    model = _dense_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    remote = _travel(["model"], {"model": model})["model"]
    remote.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    remote.fit(X, Y, epochs=1, verbose=0)
    back = _travel(["model"], {"model": remote}, {"model": model}, in_place={"model"})
    assert back["model"] is model and type(model.optimizer).__name__ == "SGD"
    steps = int(remote.optimizer.iterations.numpy())
    assert int(model.optimizer.iterations.numpy()) == steps > 0
    for mine, theirs in zip(model.get_weights(), remote.get_weights()):
        np.testing.assert_array_equal(mine, theirs)
    model.fit(X, Y, epochs=1, verbose=0)  # the optimizer trains the notebook's variables now
    assert int(model.optimizer.iterations.numpy()) == 2 * steps
    assert not np.array_equal(model.get_weights()[0], remote.get_weights()[0])
    back = _travel(["model"], {"model": remote}, {"model": model})  # not in place: the cell bound `model`
    assert back["model"] is not model


def test_a_custom_loop_s_optimizer_is_built_over_the_models_that_travel_with_it():
    net, opt = _dense_model("loopnet"), keras.optimizers.Adam(1e-3)
    there = _travel(["net", "opt"], {"net": net, "opt": opt})
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(there["net"](X) ** 2)
        grads = tape.gradient(loss, there["net"].trainable_variables)
        there["opt"].apply_gradients(zip(grads, there["net"].trainable_variables))
    back = _travel(["net", "opt"], there, {"net": net, "opt": opt}, in_place={"net", "opt"})
    assert back["opt"] is opt and opt.built and int(opt.iterations.numpy()) == 3
    assert opt._trainable_variables[0] is net.trainable_variables[0]
    again = _travel(["net", "opt"], {"net": net, "opt": opt})  # the next cell: it arrives built, with its state
    assert int(again["opt"].iterations.numpy()) == 3
    assert again["opt"]._trainable_variables[0] is again["net"].trainable_variables[0]


def test_a_notebook_pipeline_travels_as_its_graph_with_its_arrays_beside_it():
    """A tf.data pipeline built in the notebook goes to the engines as its graph; the array it was built from is
    taken out of the graph and travels as a content-hashed value (sent to an engine once), and the rebuilt
    pipeline yields the same batches and shards."""
    from jupyter_dl.kernel.job.work import CellWork, prepare

    x = np.arange(20000, dtype="float32").reshape(1000, 20)
    ds = tf.data.Dataset.from_tensor_slices((x, np.arange(1000))).map(lambda a, b: (a * 2, b)).batch(32)
    shipment = prepare(CellWork("model.fit(ds)", {"ds": ds}))
    arrays = [n for n in shipment.values if n != "ds"]
    assert len(arrays) == 1 and shipment.values[arrays[0]][0] is not None  # fingerprinted, like notebook arrays
    assert len(shipment.values["ds"][1]) < 20000  # the 80 kB array is not inside the graph
    blobs = {"ds": shipment.values["ds"][1], arrays[0]: payload.cloudpickle.dumps(shipment.values[arrays[0]][1])}
    values, problems = payload.unpack(blobs)
    assert problems == {}
    there = values["ds"]
    assert int(there.cardinality()) == 32 and int(there.shard(2, 1).cardinality()) == 16
    first, expected = next(iter(there)), next(iter(ds))
    np.testing.assert_array_equal(first[0], expected[0])


def test_a_pipeline_running_python_is_refused_in_one_line_naming_the_step():
    from jupyter_dl.errors import ShipError
    from jupyter_dl.kernel.job.work import CellWork, prepare

    def rows():
        yield from range(3)

    generated = tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec((), tf.int64))
    with pytest.raises(ShipError) as sent:
        prepare(CellWork("model.fit(ds)", {"ds": generated}))
    message = str(sent.value)
    assert "Dataset.from_generator" in message and "build the dataset inside the %%distribute cell" in message
    assert "\n" not in message
    mapped = tf.data.Dataset.range(3).map(lambda v: tf.py_function(lambda q: q, [v], tf.int64))
    with pytest.raises(ShipError, match=r"tf.py_function in Dataset.map"):
        prepare(CellWork("model.fit(ds)", {"ds": mapped}))


def test_a_pipeline_built_on_the_ranks_stays_there_with_advice_that_agrees_with_the_way_there():
    ds = tf.data.Dataset.from_tensor_slices(np.arange(4)).batch(2)
    back = payload.pack(["ds"], {"ds": ds})["ds"]
    assert "built on the ranks stays there" in back.reason and "build it in the notebook" in back.reason


def test_a_model_s_optimizer_travels_as_that_model_s_optimizer():
    """`opt` compiled into `model` is one object on both sides (two copies would train apart): it travels as a
    reference to the model, and comes back as the model's optimizer even when the model itself was replaced."""
    opt = keras.optimizers.Adam(1e-3)
    model = _dense_model()
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    there = _travel(["model", "opt"], {"model": model, "opt": opt})
    assert there["opt"] is there["model"].optimizer
    bare, bare_opt = _dense_model(), keras.optimizers.Adam(1e-3)  # compiled only in the cell, over there
    bare.compile(optimizer=bare_opt, loss="sparse_categorical_crossentropy")
    bare.fit(X, Y, epochs=1, verbose=0)
    back = _travel(["bare", "bare_opt"], {"bare": bare, "bare_opt": bare_opt}, in_place={"bare", "bare_opt"})
    assert back["bare_opt"] is back["bare"].optimizer and int(back["bare_opt"].iterations.numpy()) == 1


def test_a_learning_rate_schedule_callback_does_not_stop_the_in_place_update():
    opt = keras.optimizers.SGD(0.1)
    model = _dense_model()
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    remote = _travel(["model"], {"model": model})["model"]
    remote.fit(X, Y, epochs=2, verbose=0, callbacks=[keras.callbacks.LearningRateScheduler(lambda e, lr: 0.01)])
    back = _travel(["model"], {"model": remote}, {"model": model}, in_place={"model"})
    assert back["model"] is model and model.optimizer is opt
    assert np.isclose(float(opt.learning_rate.numpy()), 0.01)


def test_an_alias_of_the_loop_s_model_does_not_lose_the_optimizer_state():
    """`_` (IPython's last result) or `same = net` name the same model twice: still one variable per path."""
    net, opt = _dense_model("aliased"), keras.optimizers.Adam(1e-3)
    there = _travel(["net", "opt"], {"net": net, "opt": opt})
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(there["net"](X) ** 2)
    there["opt"].apply_gradients(
        zip(tape.gradient(loss, there["net"].trainable_variables), there["net"].trainable_variables)
    )
    back = _travel(["net", "opt"], there, {"net": net, "opt": opt, "_": net, "same": net}, in_place={"net", "opt"})
    assert back["opt"] is opt and opt.built and int(opt.iterations.numpy()) == 1


class SizedNet(keras.Model):
    """A subclass without **kwargs or get_config: it travels by its construction record."""

    def __init__(self, sizes):
        super().__init__()
        self.hidden = [keras.layers.Dense(units) for units in sizes]

    def call(self, x):
        for layer in self.hidden:
            x = layer(x)
        return x


SizedNet.__module__ = "__main__"  # as when defined in a notebook cell


def test_a_model_compiled_with_a_notebook_optimizer_travels_with_it():
    """The cell reads `net` and `opt` (net.compile(optimizer=opt)): the optimizer travels as the model's, and the
    model's recorded compile does not refer to it by name (it would get the reference, not an optimizer)."""
    opt = keras.optimizers.Adam(1e-3)
    net = SizedNet([4, 2])
    net.compile(optimizer=opt, loss="mse")
    net.fit(X, np.zeros((len(X), 2), "float32"), epochs=1, verbose=0)
    there = _travel(["net", "opt"], {"net": net, "opt": opt})
    assert type(there["net"]) is SizedNet and there["opt"] is there["net"].optimizer
    assert int(there["opt"].iterations.numpy()) == int(opt.iterations.numpy())


def test_a_constructor_argument_changed_later_is_recorded_as_given():
    """A list passed to the constructor and changed afterwards (by the user or the constructor) does not change
    how the object is rebuilt."""
    sizes = [4, 2]
    net = SizedNet(sizes)
    net(X[:2])
    sizes[0] = 16
    there = _travel(["net"], {"net": net})
    assert [layer.units for layer in there["net"].hidden] == [4, 2]
    np.testing.assert_allclose(there["net"].predict(X[:3], verbose=0), net.predict(X[:3], verbose=0), rtol=1e-6)


def test_a_pipeline_holding_a_variable_is_refused_before_it_travels():
    from jupyter_dl.errors import ShipError
    from jupyter_dl.kernel.job.work import CellWork, prepare

    scale = tf.Variable(2.0)
    ds = tf.data.Dataset.from_tensor_slices(np.arange(4.0, dtype="float32")).map(lambda v: v * scale)
    with pytest.raises(ShipError, match="holds state of this process"):
        prepare(CellWork("model.fit(ds)", {"ds": ds}))


def test_a_pipeline_that_draws_whether_to_augment_travels_but_not_a_variable_in_a_branch():
    """keras.io SimSiam's `random_apply`: `if tf.random.uniform([]) < p:` in a map becomes a stateful `If` whose
    branches hold only random ops, and travels; a notebook variable read inside such a branch is still refused."""
    from jupyter_dl.errors import ShipError
    from jupyter_dl.kernel.job.work import CellWork, prepare

    def random_apply(x):
        if tf.random.uniform([], minval=0, maxval=1) < 0.5:
            return tf.image.random_flip_left_right(x)
        return x

    images = tf.data.Dataset.from_tensor_slices(np.zeros((4, 8, 8, 3), "float32"))
    shipment = prepare(CellWork("model.fit(ds)", {"ds": images.map(random_apply).batch(2)}))
    values, problems = payload.unpack({"ds": shipment.values["ds"][1]})
    assert problems == {} and next(iter(values["ds"])).shape == (2, 8, 8, 3)
    scale = tf.Variable(2.0)

    def random_scale(x):
        if tf.random.uniform([]) < 0.5:
            return x * scale
        return x

    with pytest.raises(ShipError, match="holds state of this process"):
        prepare(CellWork("model.fit(ds)", {"ds": images.map(random_scale)}))


def test_callback_files_are_skipped_off_rank_0_but_buffers_are_written(tmp_path):
    """Off rank 0 inside fit, np.save to a path is skipped; np.save into a buffer (read back by the callback)
    still writes."""
    import io

    from jupyter_dl.runtime import file_writes

    (owner, name, guarded) = next(p for p in file_writes.patches(lambda: True) if p[1] == "save" and p[0] is np)
    guarded(str(tmp_path / "a.npy"), np.arange(3))
    assert not (tmp_path / "a.npy").exists()
    buffer = io.BytesIO()
    guarded(buffer, np.arange(3))
    assert buffer.getvalue()
    (_, _, writing) = next(p for p in file_writes.patches(lambda: False) if p[1] == "save" and p[0] is np)
    writing(str(tmp_path / "b.npy"), np.arange(3))
    assert (tmp_path / "b.npy").exists()


def test_callbacks_come_back_naming_their_model_and_the_receiver_s_own_callbacks():
    """A callback fit gave its model comes back naming the receiver's model, not with a copy of it, and so does
    each callback of a list made in the cell (none is left holding a reference placeholder)."""
    model = _dense_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    early = keras.callbacks.EarlyStopping(patience=2)
    monitor = keras.callbacks.LambdaCallback()
    model.fit(X, Y, epochs=1, verbose=0, callbacks=[early, monitor])
    callbacks = [early, monitor]
    namespace = {"model": model, "early": early, "monitor": monitor, "callbacks": callbacks}
    receiver = {"model": model, "early": early}
    packed = payload.pack(["monitor", "callbacks"], namespace, also_known=["model", "early"])
    values, problems = payload.unpack(packed, receiver)
    assert problems == {}
    assert values["monitor"].model is model and values["monitor"] is not monitor
    back_early, back_monitor = values["callbacks"]
    assert isinstance(back_early, keras.callbacks.EarlyStopping) and back_early.patience == 2
    assert back_early.model is model and back_monitor.model is model
