"""Keras guides and TensorFlow tutorials, second pass: set up in plain cells, trained under `%%distribute -n 2`.

The optimizer options the guides reach for (a warm-up CosineDecay schedule, `use_ema`, `gradient_accumulation_steps`,
`global_clipnorm`, `steps_per_execution` with `jit_compile=True`), the RNN guide's own cell in `keras.layers.RNN`
(alone and stacked) next to GRU, Bidirectional and TimeDistributed layers and the masking guide's custom layers,
TensorFlow's DCGAN tutorial (a `@tf.function` train_step over notebook globals, a `train(dataset, epochs)` loop of an
earlier cell that saves a `tf.train.Checkpoint` and a figure per epoch, restored in a later cell) and the classic
`train_on_batch` GAN (a frozen discriminator inside a combined model). Each case runs in one process and on two
ranks; the notebook then goes on with what came back as one process would.
"""

import math
import os

import numpy as np
from notebook_cells import cell as _cell
from notebook_cells import close

# ---------------------------------------------------------------------------------------------- optimizer options

OPTIMIZERS = """
import numpy as np
import keras

keras.utils.set_random_seed(1)


def build(optimizer, **compile_options):
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], **compile_options)
    return model


schedule = keras.optimizers.schedules.CosineDecay(1e-3, decay_steps=100, warmup_target=1e-2, warmup_steps=20)
scheduled = build(keras.optimizers.Adam(schedule))
ema = build(keras.optimizers.Adam(1e-2, use_ema=True, ema_momentum=0.9))
accumulated = build(keras.optimizers.SGD(0.1, momentum=0.9, gradient_accumulation_steps=2))
clipped = build(keras.optimizers.AdamW(1e-2, global_clipnorm=1.0))
executed = build("adam", steps_per_execution=4, jit_compile=True)
"""

OPTIMIZERS_FIT = """histories = {}
for name, model in [("scheduled", scheduled), ("ema", ema), ("accumulated", accumulated), ("clipped", clipped),
                    ("executed", executed)]:
    histories[name] = model.fit(x_train, y_train, batch_size=32, epochs=4, verbose=0)
"""

OPTIMIZED = ("scheduled", "ema", "accumulated", "clipped", "executed")


def test_optimizer_options_the_guides_use(shell, digits):
    shell.user_ns.update(digits)
    single = _cell(shell, OPTIMIZERS)
    _cell(shell, OPTIMIZERS_FIT)
    expected = {name: single[name].evaluate(single["x_test"], single["y_test"], verbose=0)[1] for name in OPTIMIZED}
    ns = _cell(shell, OPTIMIZERS)
    models = {name: ns[name] for name in OPTIMIZED}
    ns = _cell(shell, OPTIMIZERS_FIT, distribute=True)
    for name, model in models.items():
        assert ns[name] is model, f"{name}: the notebook's model was replaced"
        accuracy = model.evaluate(ns["x_test"], ns["y_test"], verbose=0)[1]
        assert accuracy > expected[name] - 0.1, (name, accuracy, expected[name])
    assert ns["executed"].steps_per_execution == 4


# ---------------------------------------------------------------------------------------------------- RNN guide

RNNS = """
import numpy as np
import keras
from keras import layers, ops

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
sequences = rng.normal(size=(384, 12, 5)).astype("float32")
labels = (sequences[:, :, 0].sum(axis=1) > 0).astype("int64")
padded = sequences.copy()
padded[::3, 8:] = 0.0


class MinimalRNNCell(layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="uniform", name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units), initializer="uniform",
                                                name="recurrent_kernel")

    def call(self, inputs, states):
        prev_output = states[0]
        h = ops.matmul(inputs, self.kernel)
        output = h + ops.matmul(prev_output, self.recurrent_kernel)
        return output, [output]


class MyActivation(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Signal that the layer is safe for mask propagation
        self.supports_masking = True

    def call(self, inputs):
        return ops.relu(inputs)


inputs = keras.Input((None, 5))
x = layers.RNN(MinimalRNNCell(16))(inputs)
outputs = layers.Dense(2)(x)
cell_model = keras.Model(inputs, outputs)

stacked = keras.Sequential([keras.Input((None, 5)), layers.RNN([MinimalRNNCell(8), MinimalRNNCell(8)]),
                            layers.Dense(2)])

recurrent = keras.Sequential([
    keras.Input((12, 5)),
    layers.Bidirectional(layers.GRU(8, return_sequences=True)),
    layers.TimeDistributed(layers.Dense(4)),
    layers.LSTM(8),
    layers.Dense(2),
])

masked_in = keras.Input((12, 5))
masked = layers.Masking(mask_value=0.0)(masked_in)
masked = layers.TimeDistributed(layers.Dense(4))(masked)
masked = MyActivation()(masked)
masked = layers.GRU(8)(masked)
masked_model = keras.Model(masked_in, layers.Dense(2)(masked))

for model in (cell_model, stacked, recurrent, masked_model):
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
"""

RNNS_FIT = """cell_history = cell_model.fit(sequences, labels, batch_size=32, epochs=8, verbose=0)
stacked_history = stacked.fit(sequences, labels, batch_size=32, epochs=8, verbose=0)
recurrent_history = recurrent.fit(sequences, labels, batch_size=32, epochs=8, verbose=0)
masked_history = masked_model.fit(padded, labels, batch_size=32, epochs=8, verbose=0)
"""

RNN_MODELS = ("cell_model", "stacked", "recurrent", "masked_model")


def test_the_rnn_guide_s_own_cells_and_masking_layers(shell):
    single = _cell(shell, RNNS)
    _cell(shell, RNNS_FIT)
    data = {"cell_model": "sequences", "stacked": "sequences", "recurrent": "sequences", "masked_model": "padded"}
    expected = {name: single[name].evaluate(single[data[name]], single["labels"], verbose=0)[1] for name in RNN_MODELS}
    ns = _cell(shell, RNNS)
    models = {name: ns[name] for name in RNN_MODELS}
    ns = _cell(shell, RNNS_FIT, distribute=True)
    for name, model in models.items():
        assert ns[name] is model, f"{name}: the notebook's model was replaced"
        # Short runs: two ranks take half the steps each (measured: within 0.1 of one process, either way).
        accuracy = model.evaluate(ns[data[name]], ns["labels"], verbose=0)[1]
        assert accuracy > min(expected[name] - 0.12, 0.8), (name, accuracy, expected[name])
    # Variable-length input still works after the job: the cell's RNN takes 7 steps as well as 12.
    assert ns["cell_model"].predict(ns["sequences"][:4, :7], verbose=0).shape == (4, 2)


# ------------------------------------------------------------------------------------------ TensorFlow's DCGAN

DCGAN = """
import os
import time
import numpy as np
import tensorflow as tf
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from IPython import display

tf.keras.utils.set_random_seed(1)
train_images = (x_train.reshape(-1, 8, 8, 1)[:256] - 0.5) / 0.5
BUFFER_SIZE = 256
BATCH_SIZE = 32
train_dataset = tf.data.Dataset.from_tensor_slices(train_images).shuffle(BUFFER_SIZE).batch(BATCH_SIZE)


def make_generator_model():
    model = tf.keras.Sequential()
    model.add(tf.keras.layers.Dense(2 * 2 * 16, use_bias=False, input_shape=(16,)))
    model.add(tf.keras.layers.BatchNormalization())
    model.add(tf.keras.layers.LeakyReLU())
    model.add(tf.keras.layers.Reshape((2, 2, 16)))
    model.add(tf.keras.layers.Conv2DTranspose(8, (3, 3), strides=(2, 2), padding="same", use_bias=False))
    model.add(tf.keras.layers.BatchNormalization())
    model.add(tf.keras.layers.LeakyReLU())
    model.add(tf.keras.layers.Conv2DTranspose(1, (3, 3), strides=(2, 2), padding="same", use_bias=False,
                                              activation="tanh"))
    return model


def make_discriminator_model():
    model = tf.keras.Sequential()
    model.add(tf.keras.layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same", input_shape=[8, 8, 1]))
    model.add(tf.keras.layers.LeakyReLU())
    model.add(tf.keras.layers.Dropout(0.3))
    model.add(tf.keras.layers.Flatten())
    model.add(tf.keras.layers.Dense(1))
    return model


generator = make_generator_model()
discriminator = make_discriminator_model()
cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)


def discriminator_loss(real_output, fake_output):
    real_loss = cross_entropy(tf.ones_like(real_output), real_output)
    fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
    return real_loss + fake_loss


def generator_loss(fake_output):
    return cross_entropy(tf.ones_like(fake_output), fake_output)


generator_optimizer = tf.keras.optimizers.Adam(1e-4)
discriminator_optimizer = tf.keras.optimizers.Adam(1e-4)
checkpoint_dir = "./training_checkpoints"
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
checkpoint = tf.train.Checkpoint(generator_optimizer=generator_optimizer,
                                 discriminator_optimizer=discriminator_optimizer,
                                 generator=generator,
                                 discriminator=discriminator)
EPOCHS = 4
noise_dim = 16
num_examples_to_generate = 4
seed = tf.random.normal([num_examples_to_generate, noise_dim])
gen_losses = []


@tf.function
def train_step(images):
    noise = tf.random.normal([BATCH_SIZE, noise_dim])
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated_images = generator(noise, training=True)
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generated_images, training=True)
        gen_loss = generator_loss(fake_output)
        disc_loss = discriminator_loss(real_output, fake_output)
    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))
    return gen_loss


def generate_and_save_images(model, epoch, test_input):
    predictions = model(test_input, training=False)
    fig = plt.figure(figsize=(2, 2))
    for i in range(predictions.shape[0]):
        plt.subplot(2, 2, i + 1)
        plt.imshow(predictions[i, :, :, 0] * 127.5 + 127.5, cmap="gray")
        plt.axis("off")
    plt.savefig("image_at_epoch_{:04d}.png".format(epoch))
    plt.show()


def train(dataset, epochs):
    for epoch in range(epochs):
        start = time.time()
        for image_batch in dataset:
            gen_loss = train_step(image_batch)
        gen_losses.append(float(gen_loss))
        display.clear_output(wait=True)
        generate_and_save_images(generator, epoch + 1, seed)
        if (epoch + 1) % 2 == 0:
            checkpoint.save(file_prefix=checkpoint_prefix)
        print("Time for epoch {} is {} sec".format(epoch + 1, time.time() - start))
    display.clear_output(wait=True)
    generate_and_save_images(generator, epochs, seed)
"""

DCGAN_TRAIN = "train(train_dataset, EPOCHS)\n"

DCGAN_AFTER = """status = checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))
restored_step = int(generator_optimizer.iterations.numpy())
sample = generator(seed, training=False).numpy()
"""


def test_tensorflow_s_dcgan_tutorial_saves_its_checkpoints_and_restores_them_afterwards(
    shell, digits, tmp_path, monkeypatch
):
    shell.user_ns.update(digits)
    monkeypatch.chdir(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    monkeypatch.chdir(one)
    single = _cell(shell, DCGAN)
    _cell(shell, DCGAN_TRAIN)
    single = _cell(shell, DCGAN_AFTER)
    one_steps, one_losses = single["restored_step"], list(single["gen_losses"])
    monkeypatch.chdir(two)
    ns = _cell(shell, DCGAN)
    generator, checkpoint, losses = ns["generator"], ns["checkpoint"], ns["gen_losses"]
    _cell(shell, DCGAN_TRAIN, distribute=True)
    assert ns["generator"] is generator and ns["checkpoint"] is checkpoint and ns["gen_losses"] is losses
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses), losses
    assert sorted(os.listdir(two / "training_checkpoints")) == sorted(os.listdir(one / "training_checkpoints"))
    images = sorted(p.name for p in two.glob("image_at_epoch_*.png"))
    assert images == [f"image_at_epoch_{i:04d}.png" for i in (1, 2, 3, 4)], images
    ns = _cell(shell, DCGAN_AFTER)
    # A custom loop reads every batch on each rank (the cell is told so): the restored optimizer counts them all.
    assert ns["restored_step"] == one_steps, (ns["restored_step"], one_steps)
    assert np.isfinite(ns["sample"]).all() and ns["sample"].shape == (4, 8, 8, 1)
    close(losses[-1], one_losses[-1], 1.5, "generator loss")


# ------------------------------------------------------------------------------- TensorFlow's training checkpoints

CHECKPOINTS = """
import tensorflow as tf

tf.keras.utils.set_random_seed(1)

class Net(tf.keras.Model):
    \"\"\"A simple linear model.\"\"\"

    def __init__(self):
        super(Net, self).__init__()
        self.l1 = tf.keras.layers.Dense(5)

    def call(self, x):
        return self.l1(x)


toy_targets = tf.range(10.0)[:, None] * 5.0 + tf.range(5.0)[None, :]


def toy_dataset():
    inputs = tf.range(10.0)[:, None]
    labels = inputs * 5.0 + tf.range(5.0)[None, :]
    return tf.data.Dataset.from_tensor_slices(dict(x=inputs, y=labels)).repeat().batch(2)


def train_step(net, example, optimizer):
    \"\"\"Trains `net` on `example` using `optimizer`.\"\"\"
    with tf.GradientTape() as tape:
        output = net(example["x"])
        loss = tf.reduce_mean(tf.abs(output - example["y"]))
    variables = net.trainable_variables
    gradients = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(gradients, variables))
    return loss


net = Net()
opt = tf.keras.optimizers.Adam(0.1)
dataset = toy_dataset()
iterator = iter(dataset)
ckpt = tf.train.Checkpoint(step=tf.Variable(1), optimizer=opt, net=net, iterator=iterator)
manager = tf.train.CheckpointManager(ckpt, "./tf_ckpts", max_to_keep=3)
printed = []


def train_and_checkpoint(net, manager):
    ckpt.restore(manager.latest_checkpoint)
    if manager.latest_checkpoint:
        printed.append("Restored from {}".format(manager.latest_checkpoint))
    else:
        printed.append("Initializing from scratch.")
    for _ in range(50):
        example = next(iterator)
        loss = train_step(net, example, opt)
        ckpt.step.assign_add(1)
        if int(ckpt.step) % 10 == 0:
            save_path = manager.save()
            printed.append("Saved checkpoint for step {}: {}".format(int(ckpt.step), save_path))
"""

CHECKPOINTS_TRAIN = "train_and_checkpoint(net, manager)\n"

CHECKPOINTS_AFTER = """after = {"checkpoints": list(manager.checkpoints),
         "next_x": next(iterator)["x"].numpy().ravel().tolist(),
         "save_count": int(ckpt.save_counter), "step": int(ckpt.step), "optimizer_steps": int(opt.iterations),
         "loss": float(tf.reduce_mean(tf.abs(net(tf.range(10.0)[:, None]) - toy_targets)))}
"""


def test_the_training_checkpoints_guide_resumes_where_it_saved(shell, tmp_path, monkeypatch):
    """TensorFlow's "Training checkpoints" guide: a Checkpoint over a step variable, an optimizer, a model and a
    dataset iterator, a CheckpointManager keeping 3, a training function of an earlier cell; run twice, the second
    time restoring from the first's last save. Before: "cannot send variable 'ckpt'" (and 'iterator')."""
    runs = {}
    for run, distribute in (("one", False), ("two", True)):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        ns = _cell(shell, CHECKPOINTS)
        objects = {name: ns[name] for name in ("net", "opt", "ckpt", "manager", "iterator", "printed")}
        _cell(shell, CHECKPOINTS_TRAIN, distribute=distribute)
        _cell(shell, CHECKPOINTS_TRAIN, distribute=distribute)  # resumes: the checkpoints of the first call
        ns = _cell(shell, CHECKPOINTS_AFTER)
        assert all(ns[name] is value for name, value in objects.items()), "a notebook object was replaced"
        runs[run] = dict(ns["after"], printed=list(ns["printed"]))
    one, two = runs["one"], runs["two"]
    assert two["printed"] == one["printed"], (two["printed"], one["printed"])
    assert two["printed"][6] == "Restored from ./tf_ckpts/ckpt-5", two["printed"]
    assert two["checkpoints"] == one["checkpoints"] == [f"./tf_ckpts/ckpt-{i}" for i in (8, 9, 10)]
    # The notebook's objects stand where one process leaves them: the iterator 100 batches on, the counters, the
    # optimizer's steps (before: a new optimizer with 0 steps replaced the notebook's `opt`, which the checkpoint
    # still held, when its model's layers were named differently on the ranks: 'dense' there, 'dense_1' here).
    counters = ("next_x", "save_count", "step", "optimizer_steps")
    assert [two[k] for k in counters] == [one[k] for k in counters], (two, one)
    assert two["loss"] < max(1.5 * one["loss"], one["loss"] + 0.5), (two["loss"], one["loss"])
    assert sorted(os.listdir(tmp_path / "two" / "tf_ckpts")) == sorted(os.listdir(tmp_path / "one" / "tf_ckpts"))


def test_every_rank_knows_rank_0_s_saves_within_the_cell(shell, tmp_path, monkeypatch):
    """Rank 0 alone writes a checkpoint; the other ranks count the save and read the manager's list of saves, so a
    restore later in the same cell finds the same newest checkpoint on every rank."""
    monkeypatch.chdir(tmp_path)
    _cell(shell, CHECKPOINTS)
    views = """train_and_checkpoint(net, manager)
from jupyter_dl import collectives
views = collectives.allgather((manager.latest_checkpoint, list(manager.checkpoints), int(ckpt.save_counter)))
"""
    ns = _cell(shell, views, distribute=True)
    expected = ("./tf_ckpts/ckpt-5", [f"./tf_ckpts/ckpt-{i}" for i in (3, 4, 5)], 5)
    assert ns["views"] == [expected, expected], ns["views"]


# ------------------------------------------------------------------------- TensorBoard from a custom training loop

SUMMARIES = """
import datetime
import tensorflow as tf

train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test))
train_dataset = train_dataset.shuffle(60000).batch(64)
test_dataset = test_dataset.batch(64)


def create_model():
    return tf.keras.models.Sequential([
        tf.keras.layers.Flatten(input_shape=(64,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10, activation="softmax")
    ])


loss_object = tf.keras.losses.SparseCategoricalCrossentropy()
optimizer = tf.keras.optimizers.Adam()
train_loss = tf.keras.metrics.Mean("train_loss", dtype=tf.float32)
train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy("train_accuracy")
test_loss = tf.keras.metrics.Mean("test_loss", dtype=tf.float32)
test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy("test_accuracy")


def train_step(model, optimizer, x_train, y_train):
    with tf.GradientTape() as tape:
        predictions = model(x_train, training=True)
        loss = loss_object(y_train, predictions)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    train_loss(loss)
    train_accuracy(y_train, predictions)


def test_step(model, x_test, y_test):
    predictions = model(x_test)
    loss = loss_object(y_test, predictions)
    test_loss(loss)
    test_accuracy(y_test, predictions)


current_time = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
train_log_dir = "logs/gradient_tape/" + current_time + "/train"
test_log_dir = "logs/gradient_tape/" + current_time + "/test"
train_summary_writer = tf.summary.create_file_writer(train_log_dir)
test_summary_writer = tf.summary.create_file_writer(test_log_dir)
model = create_model()
EPOCHS = 3
"""

SUMMARIES_LOOP = """for epoch in range(EPOCHS):
    for (x_train, y_train) in train_dataset:
        train_step(model, optimizer, x_train, y_train)
    with train_summary_writer.as_default():
        tf.summary.scalar("loss", train_loss.result(), step=epoch)
        tf.summary.scalar("accuracy", train_accuracy.result(), step=epoch)
    for (x_test, y_test) in test_dataset:
        test_step(model, x_test, y_test)
    with test_summary_writer.as_default():
        tf.summary.scalar("loss", test_loss.result(), step=epoch)
        tf.summary.scalar("accuracy", test_accuracy.result(), step=epoch)
    template = "Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, Test Accuracy: {}"
    print(template.format(epoch + 1, train_loss.result(), train_accuracy.result() * 100, test_loss.result(),
                          test_accuracy.result() * 100))
    train_loss.reset_state()
    test_loss.reset_state()
    train_accuracy.reset_state()
    test_accuracy.reset_state()
tf.saved_model.save(model, "saved_model")
"""


def _scalars(folder):
    """{tag: [(step, value)]} from the event files under `folder`, and how many files hold any (each writer starts
    a file, which TensorBoard reads as part of the folder's one run: only what is in them counts)."""
    import tensorflow as tf

    found: dict = {}
    writing = 0
    for path in sorted(folder.glob("events.out.tfevents.*")):
        values = [
            (event.step, value)
            for event in map(tf.compat.v1.Event.FromString, (r.numpy() for r in tf.data.TFRecordDataset(str(path))))
            for value in event.summary.value
        ]
        writing += bool(values)
        for step, value in values:
            found.setdefault(value.tag, []).append((step, float(tf.make_ndarray(value.tensor))))
    return found, writing


def test_tensorboard_summaries_of_a_custom_loop_are_written_once_into_the_notebook_s_log_dir(
    shell, digits, tmp_path, monkeypatch
):
    """TensorFlow's TensorBoard tutorial, "Using TensorBoard with other methods": writers made with
    `tf.summary.create_file_writer` in a plain cell, `tf.summary.scalar` in the distributed loop. Before: "cannot send
    variable 'train_summary_writer'"; every rank writing would leave one event file per rank. The loop's model is
    then saved with `tf.saved_model.save`, which rank 0 alone writes."""
    monkeypatch.chdir(tmp_path)
    shell.user_ns.update(digits)
    ns = _cell(shell, SUMMARIES)
    writer, model = ns["train_summary_writer"], ns["model"]
    _cell(shell, SUMMARIES_LOOP, distribute=True)
    assert ns["train_summary_writer"] is writer and ns["model"] is model
    for side in ("train", "test"):
        scalars, files = _scalars(tmp_path / ns[f"{side}_log_dir"])
        assert files == 1, (side, files)
        assert [step for step, _ in scalars["loss"]] == [0, 1, 2], scalars
        assert [step for step, _ in scalars["accuracy"]] == [0, 1, 2], scalars
    losses = [value for _, value in _scalars(tmp_path / ns["train_log_dir"])[0]["loss"]]
    assert losses[-1] < losses[0], losses
    # Rank 0 alone wrote the SavedModel (every rank writing one folder raced), and the notebook loads it.
    assert (tmp_path / "saved_model" / "saved_model.pb").exists()
    _cell(shell, "served = tf.saved_model.load('saved_model')\n")
    # The notebook's writer still writes where it did.
    _cell(
        shell,
        "with train_summary_writer.as_default():\n    tf.summary.scalar('after', 1.0, step=0)\n"
        "train_summary_writer.flush()\n",
    )
    assert "after" in _scalars(tmp_path / ns["train_log_dir"])[0]


# ------------------------------------------------------------------------------------- train_on_batch GAN

CLASSIC_GAN = """
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(1)
latent_dim = 8
images = x_train[:512]
generator = keras.Sequential([keras.Input((latent_dim,)), layers.Dense(32, activation="relu"),
                              layers.Dense(64, activation="sigmoid")], name="generator")
discriminator = keras.Sequential([keras.Input((64,)), layers.Dense(32), layers.LeakyReLU(0.2),
                                  layers.Dense(1, activation="sigmoid")], name="discriminator")
discriminator.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam(2e-4, 0.5), metrics=["accuracy"])
discriminator.trainable = False
z = keras.Input((latent_dim,))
combined = keras.Model(z, discriminator(generator(z)))
combined.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam(2e-4, 0.5))
d_losses, g_losses = [], []
classifier = keras.Sequential([keras.Input((64,)), layers.Dense(32, activation="relu"), layers.Dense(10)])
classifier.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                   metrics=["accuracy"])
"""

CLASSIC_GAN_TRAIN = """batch_size = 32
valid = np.ones((batch_size, 1))
fake = np.zeros((batch_size, 1))
for step in range(40):
    idx = np.random.randint(0, images.shape[0], batch_size)
    noise = np.random.normal(0, 1, (batch_size, latent_dim))
    gen_imgs = generator.predict(noise, verbose=0)
    d_loss_real = discriminator.train_on_batch(images[idx], valid)
    d_loss_fake = discriminator.train_on_batch(gen_imgs, fake)
    d_loss = 0.5 * np.add(d_loss_real, d_loss_fake)
    g_loss = combined.train_on_batch(noise, valid)
    d_losses.append(float(d_loss[0]))
    g_losses.append(float(g_loss if np.ndim(g_loss) == 0 else g_loss[0]))
for epoch in range(3):
    for start in range(0, len(x_train), 64):
        metrics = classifier.train_on_batch(x_train[start:start + 64], y_train[start:start + 64], return_dict=True)
scores = classifier.test_on_batch(x_test, y_test, return_dict=True)
"""


def test_a_train_on_batch_gan_with_a_frozen_discriminator_and_a_train_on_batch_loop(shell, digits):
    shell.user_ns.update(digits)
    single = _cell(shell, CLASSIC_GAN)
    _cell(shell, CLASSIC_GAN_TRAIN)
    expected = single["classifier"].evaluate(single["x_test"], single["y_test"], verbose=0)[1]
    ns = _cell(shell, CLASSIC_GAN)
    generator, discriminator, d_losses = ns["generator"], ns["discriminator"], ns["d_losses"]
    before = [w.copy() for w in generator.get_weights()]
    ns = _cell(shell, CLASSIC_GAN_TRAIN, distribute=True)
    assert ns["generator"] is generator and ns["discriminator"] is discriminator and ns["d_losses"] is d_losses
    assert len(d_losses) == 40 and len(ns["g_losses"]) == 40 and all(map(math.isfinite, d_losses))
    assert any(not np.allclose(a, b) for a, b in zip(before, generator.get_weights())), "the generator did not train"
    assert ns["combined"].layers[-1] is discriminator and not discriminator.trainable
    accuracy = ns["classifier"].evaluate(ns["x_test"], ns["y_test"], verbose=0)[1]
    assert accuracy > expected - 0.1 and ns["scores"]["accuracy"] > 0.5, (accuracy, expected, ns["scores"])
