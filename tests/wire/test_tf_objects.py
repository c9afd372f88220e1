"""TensorFlow objects on the wire, in one process (no engines): dataset iterators with their position, checkpoints
and their managers over the receiver's own objects, summary writers by their settings, and a functional model
rebuilt over the receiver's own models. The distributed cases are in test_tutorial_guides.py."""

import cloudpickle
import numpy as np
import pytest

from jupyter_dl.wire import dataset_iterators, keras_objects, payload, summary_writers, tf_checkpoints

pytestmark = pytest.mark.fast

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _travel(value):
    return cloudpickle.loads(cloudpickle.dumps(value))


def test_an_iterator_travels_with_its_position_shuffle_buffer_included():
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(40)).shuffle(40, seed=3).repeat().batch(4)
    iterator = iter(dataset)
    for _ in range(3):
        next(iterator)
    arrived = dataset_iterators.loads(_travel(dataset_iterators.dumps(iterator)), resolve=None)
    # The rest of the epoch, buffer and order, as the notebook's iterator would give it. (The next epoch's reshuffle
    # draws from the rebuilt pipeline's own seed: another order, the same on every rank.)
    for _ in range(7):
        np.testing.assert_array_equal(next(arrived).numpy(), next(iterator).numpy())
    # ...and back: the notebook's iterator moves to where the arrived one stands.
    next(arrived)
    dataset_iterators.move_to(iterator, dataset_iterators.position(arrived))
    np.testing.assert_array_equal(next(iterator).numpy(), next(arrived).numpy())


def test_a_checkpoint_is_rebuilt_over_the_receiver_s_objects():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam()
    step = tf.Variable(7)
    checkpoint = tf.train.Checkpoint(step=step, optimizer=optimizer, net=model, data=iter(tf.data.Dataset.range(5)))
    checkpoint.save_counter.assign(4)
    namespace = {"model": model, "optimizer": optimizer, "checkpoint": checkpoint}
    sent = _travel(tf_checkpoints.dumps(checkpoint, namespace, {id(model): "model", id(optimizer): "optimizer"}))
    their_model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    theirs = {"model": their_model, "optimizer": keras.optimizers.SGD()}
    rebuilt = tf_checkpoints.loads(sent, theirs.__getitem__)
    assert rebuilt.net is theirs["model"] and rebuilt.optimizer is theirs["optimizer"]
    assert int(rebuilt.step) == 7 and rebuilt.step is not step and int(rebuilt.save_counter) == 4
    assert int(next(rebuilt.data)) == 0


def test_a_checkpoint_holding_what_cannot_travel_is_refused_saying_what_to_do():
    checkpoint = tf.train.Checkpoint(lock=_Unpicklable())
    with pytest.raises(TypeError, match=r"its lock= \(_Unpicklable\) cannot travel"):
        tf_checkpoints.dumps(checkpoint, {}, {})


class _Unpicklable(tf.Module):
    def __reduce__(self):
        raise TypeError("no")


def test_a_manager_keeps_what_it_knows_of_its_saves(tmp_path):
    checkpoint = tf.train.Checkpoint(step=tf.Variable(1))
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path / "ckpts"), max_to_keep=2)
    for _ in range(3):
        manager.save()
    sent = _travel(payload.dumps("manager", manager, {"manager": manager, "checkpoint": checkpoint}))
    rebuilt, problems = payload.unpack({"manager": sent})
    assert not problems, problems
    assert rebuilt["manager"].checkpoints == manager.checkpoints and len(manager.checkpoints) == 2


def test_a_summary_writer_travels_by_its_settings_into_the_same_folder(tmp_path, monkeypatch):
    summary_writers.record_settings_when_tensorflow_loads()
    monkeypatch.chdir(tmp_path)
    writer = tf.summary.create_file_writer("logs/train", flush_millis=500)
    sent = _travel(summary_writers.dumps(writer))
    assert sent.settings["logdir"] == str(tmp_path / "logs" / "train") and sent.settings["flush_millis"] == 500
    monkeypatch.chdir("/")  # the receiver makes its writer elsewhere: the folder is absolute
    with summary_writers.loads(sent).as_default():
        tf.summary.scalar("loss", 0.5, step=1)
    summary_writers.flush([writer, summary_writers.loads(sent), object()])
    assert len(list((tmp_path / "logs" / "train").glob("events.out.tfevents.*"))) >= 1


def test_a_functional_model_over_the_receiver_s_own_models_is_rebuilt_over_them():
    """The classic GAN: `combined = Model(z, discriminator(generator(z)))` after the notebook's models. Rebuilt on the
    receiver, whose models were already called in the original graph, Keras took a tensor of the old graph ("The name
    input_layer_2 is used 2 times in the model")."""
    generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)], name="generator")
    discriminator = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)], name="discriminator")
    z = keras.Input((4,))
    combined = keras.Model(z, discriminator(generator(z)))
    namespace = {"generator": generator, "discriminator": discriminator, "combined": combined}
    sent = keras_objects.dumps(combined, namespace, {id(generator): "generator", id(discriminator): "discriminator"})
    rebuilt = keras_objects.loads(_travel(sent), {}, namespace.__getitem__)
    assert rebuilt.layers[1] is generator and rebuilt.layers[2] is discriminator
    x = np.random.default_rng(0).random((3, 4)).astype("float32")
    np.testing.assert_allclose(rebuilt.predict(x, verbose=0), combined.predict(x, verbose=0), rtol=1e-6)
    # Both graphs still describe themselves (each layer's calls renumbered), and the old one's outputs stand.
    assert rebuilt.get_config()["layers"][1]["name"] == "generator" and combined.get_config()
    assert generator.output is generator._inbound_nodes[0].output_tensors[0]
    keras_objects.loads(keras_objects.dumps(rebuilt, namespace, {id(generator): "generator"}), {}, namespace.get)
