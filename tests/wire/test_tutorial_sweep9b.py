"""Tutorials, sweep 9b: tensorflow.org's tutorials and guides as they write them (tf.keras spelling), set up in plain
cells, `%%distribute -n 2` on the training cell only, the tutorial's later cells in plain cells after it.

"pix2pix: Image-to-image translation with a conditional GAN" (the `downsample` / `upsample` helpers returning
`tf.keras.Sequential`s, functional `Generator()` / `Discriminator()`, two Adams, a `tf.train.Checkpoint` over all
four, a `summary_writer`, the `@tf.function train_step(input_image, target, step)` and the `fit(train_ds, test_ds,
steps)` loop over JPEG files read by `tf.data`, then `generate_images` and a restore from the latest checkpoint),
"Simple audio recognition" (WAV files through `audio_dataset_from_directory`, a `get_spectrogram` map with
`tf.signal.stft`, a `Normalization` adapted on the spectrograms, EarlyStopping, then an `ExportModel(tf.Module)` saved
with `tf.saved_model.save` and loaded back), "Introduction to modules, layers, and models" with "Basic training loops"
(`SequentialModule` / `FlexibleDenseModule` tf.Modules, a `MyModel` tf.Module and a `MyModelKeras(tf.keras.Model)`
trained by the guide's hand-written `training_loop` and by `compile` / `fit`, a `tf.train.Checkpoint` written and
restored afterwards) and the guide "Writing your own callbacks" (`LossAndErrorPrintingCallback`,
`EarlyStoppingAtMinLoss`, `CustomLearningRateScheduler(lr_schedule)` made in earlier cells, holding afterwards what
they hold after one process). Each runs in one process and on two ranks; the later plain cells must work after both,
with comparable results. Data is synthetic, in the tutorials' shapes, the models and images smaller.
"""

import os

import numpy as np
import pytest
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


def _weights(model):
    return [w.copy() for w in model.get_weights()]


def _changed(before, model):
    return any(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))


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


# ----------------------------------------------------------------------------------------------------- pix2pix

PIX2PIX_FILES = """
import pathlib

import numpy as np
import tensorflow as tf

# The facades dataset's layout: each JPEG holds the photo on the left and the label map on the right. Here the
# "photo" is a coloured block on a grey ground, the "label map" its flat-coloured outline.
rng = np.random.default_rng(0)
PATH = pathlib.Path("facades")
for split, count in (("train", 24), ("test", 4)):
    (PATH / split).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        photo = np.full((32, 32, 3), 100, "uint8")
        labels = np.zeros((32, 32, 3), "uint8")
        top, left = rng.integers(2, 14, 2)
        colour = rng.integers(60, 255, 3).astype("uint8")
        photo[top : top + 16, left : left + 16] = colour
        labels[top : top + 16, left : left + 16] = 255
        labels[top + 2 : top + 14, left + 2 : left + 14] = 0
        image = np.concatenate([photo, labels], axis=1)
        tf.io.write_file(str(PATH / split / f"{i}.jpg"), tf.io.encode_jpeg(image, quality=95))
"""

PIX2PIX = """
import datetime
import os
import time

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt
from IPython import display

tf.keras.utils.set_random_seed(0)


def load(image_file):
    # Read and decode an image file to a uint8 tensor
    image = tf.io.read_file(image_file)
    image = tf.io.decode_jpeg(image)

    # Split each image tensor into two tensors:
    # - one with a real building facade image
    # - one with an architecture label image
    w = tf.shape(image)[1]
    w = w // 2
    input_image = image[:, w:, :]
    real_image = image[:, :w, :]

    # Convert both images to float32 tensors
    input_image = tf.cast(input_image, tf.float32)
    real_image = tf.cast(real_image, tf.float32)

    return input_image, real_image


# The training set consist of 400 images
BUFFER_SIZE = 400
# The batch size of 1 produced better results for the U-Net in the original pix2pix experiment
BATCH_SIZE = 1
# Each image is 256x256 in size (here 32x32)
IMG_WIDTH = 32
IMG_HEIGHT = 32


def resize(input_image, real_image, height, width):
    input_image = tf.image.resize(input_image, [height, width], method=tf.image.ResizeMethod.NEAREST_NEIGHBOR)
    real_image = tf.image.resize(real_image, [height, width], method=tf.image.ResizeMethod.NEAREST_NEIGHBOR)

    return input_image, real_image


def random_crop(input_image, real_image):
    stacked_image = tf.stack([input_image, real_image], axis=0)
    cropped_image = tf.image.random_crop(stacked_image, size=[2, IMG_HEIGHT, IMG_WIDTH, 3])

    return cropped_image[0], cropped_image[1]


# Normalizing the images to [-1, 1]
def normalize(input_image, real_image):
    input_image = (input_image / 127.5) - 1
    real_image = (real_image / 127.5) - 1

    return input_image, real_image


@tf.function()
def random_jitter(input_image, real_image):
    # Resizing to 286x286 (here 36x36)
    input_image, real_image = resize(input_image, real_image, 36, 36)

    # Random cropping back to 256x256 (here 32x32)
    input_image, real_image = random_crop(input_image, real_image)

    if tf.random.uniform(()) > 0.5:
        # Random mirroring
        input_image = tf.image.flip_left_right(input_image)
        real_image = tf.image.flip_left_right(real_image)

    return input_image, real_image


def load_image_train(image_file):
    input_image, real_image = load(image_file)
    input_image, real_image = random_jitter(input_image, real_image)
    input_image, real_image = normalize(input_image, real_image)

    return input_image, real_image


def load_image_test(image_file):
    input_image, real_image = load(image_file)
    input_image, real_image = resize(input_image, real_image, IMG_HEIGHT, IMG_WIDTH)
    input_image, real_image = normalize(input_image, real_image)

    return input_image, real_image


train_dataset = tf.data.Dataset.list_files(str(PATH / "train/*.jpg"))
train_dataset = train_dataset.map(load_image_train, num_parallel_calls=tf.data.AUTOTUNE)
train_dataset = train_dataset.shuffle(BUFFER_SIZE)
train_dataset = train_dataset.batch(BATCH_SIZE)

try:
    test_dataset = tf.data.Dataset.list_files(str(PATH / "test/*.jpg"), shuffle=False)
except tf.errors.InvalidArgumentError:
    test_dataset = tf.data.Dataset.list_files(str(PATH / "val/*.jpg"), shuffle=False)
test_dataset = test_dataset.map(load_image_test)
test_dataset = test_dataset.batch(BATCH_SIZE)

OUTPUT_CHANNELS = 3


def downsample(filters, size, apply_batchnorm=True):
    initializer = tf.random_normal_initializer(0.0, 0.02)

    result = tf.keras.Sequential()
    result.add(
        tf.keras.layers.Conv2D(
            filters, size, strides=2, padding="same", kernel_initializer=initializer, use_bias=False
        )
    )

    if apply_batchnorm:
        result.add(tf.keras.layers.BatchNormalization())

    result.add(tf.keras.layers.LeakyReLU())

    return result


def upsample(filters, size, apply_dropout=False):
    initializer = tf.random_normal_initializer(0.0, 0.02)

    result = tf.keras.Sequential()
    result.add(
        tf.keras.layers.Conv2DTranspose(
            filters, size, strides=2, padding="same", kernel_initializer=initializer, use_bias=False
        )
    )

    result.add(tf.keras.layers.BatchNormalization())

    if apply_dropout:
        result.add(tf.keras.layers.Dropout(0.5))

    result.add(tf.keras.layers.ReLU())

    return result


def Generator():
    inputs = tf.keras.layers.Input(shape=[32, 32, 3])

    down_stack = [
        downsample(16, 4, apply_batchnorm=False),  # (batch_size, 16, 16, 16)
        downsample(32, 4),  # (batch_size, 8, 8, 32)
        downsample(32, 4),  # (batch_size, 4, 4, 32)
        downsample(32, 4),  # (batch_size, 2, 2, 32)
        downsample(32, 4),  # (batch_size, 1, 1, 32)
    ]

    up_stack = [
        upsample(32, 4, apply_dropout=True),  # (batch_size, 2, 2, 64)
        upsample(32, 4, apply_dropout=True),  # (batch_size, 4, 4, 64)
        upsample(32, 4),  # (batch_size, 8, 8, 64)
        upsample(16, 4),  # (batch_size, 16, 16, 32)
    ]

    initializer = tf.random_normal_initializer(0.0, 0.02)
    last = tf.keras.layers.Conv2DTranspose(
        OUTPUT_CHANNELS, 4, strides=2, padding="same", kernel_initializer=initializer, activation="tanh"
    )  # (batch_size, 32, 32, 3)

    x = inputs

    # Downsampling through the model
    skips = []
    for down in down_stack:
        x = down(x)
        skips.append(x)

    skips = reversed(skips[:-1])

    # Upsampling and establishing the skip connections
    for up, skip in zip(up_stack, skips):
        x = up(x)
        x = tf.keras.layers.Concatenate()([x, skip])

    x = last(x)

    return tf.keras.Model(inputs=inputs, outputs=x)


generator = Generator()

LAMBDA = 100

loss_object = tf.keras.losses.BinaryCrossentropy(from_logits=True)


def generator_loss(disc_generated_output, gen_output, target):
    gan_loss = loss_object(tf.ones_like(disc_generated_output), disc_generated_output)

    # Mean absolute error
    l1_loss = tf.reduce_mean(tf.abs(target - gen_output))

    total_gen_loss = gan_loss + (LAMBDA * l1_loss)

    return total_gen_loss, gan_loss, l1_loss


def Discriminator():
    initializer = tf.random_normal_initializer(0.0, 0.02)

    inp = tf.keras.layers.Input(shape=[32, 32, 3], name="input_image")
    tar = tf.keras.layers.Input(shape=[32, 32, 3], name="target_image")

    x = tf.keras.layers.concatenate([inp, tar])  # (batch_size, 32, 32, channels*2)

    down1 = downsample(16, 4, False)(x)  # (batch_size, 16, 16, 16)
    down2 = downsample(32, 4)(down1)  # (batch_size, 8, 8, 32)
    down3 = downsample(32, 4)(down2)  # (batch_size, 4, 4, 32)

    zero_pad1 = tf.keras.layers.ZeroPadding2D()(down3)  # (batch_size, 6, 6, 32)
    conv = tf.keras.layers.Conv2D(64, 4, strides=1, kernel_initializer=initializer, use_bias=False)(
        zero_pad1
    )  # (batch_size, 3, 3, 64)

    batchnorm1 = tf.keras.layers.BatchNormalization()(conv)

    leaky_relu = tf.keras.layers.LeakyReLU()(batchnorm1)

    zero_pad2 = tf.keras.layers.ZeroPadding2D()(leaky_relu)  # (batch_size, 5, 5, 64)

    last = tf.keras.layers.Conv2D(1, 4, strides=1, kernel_initializer=initializer)(
        zero_pad2
    )  # (batch_size, 2, 2, 1)

    return tf.keras.Model(inputs=[inp, tar], outputs=last)


discriminator = Discriminator()


def discriminator_loss(disc_real_output, disc_generated_output):
    real_loss = loss_object(tf.ones_like(disc_real_output), disc_real_output)

    generated_loss = loss_object(tf.zeros_like(disc_generated_output), disc_generated_output)

    total_disc_loss = real_loss + generated_loss

    return total_disc_loss


generator_optimizer = tf.keras.optimizers.Adam(2e-4, beta_1=0.5)
discriminator_optimizer = tf.keras.optimizers.Adam(2e-4, beta_1=0.5)

checkpoint_dir = "./training_checkpoints"
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
checkpoint = tf.train.Checkpoint(
    generator_optimizer=generator_optimizer,
    discriminator_optimizer=discriminator_optimizer,
    generator=generator,
    discriminator=discriminator,
)


def generate_images(model, test_input, tar):
    prediction = model(test_input, training=True)
    plt.figure(figsize=(15, 15))

    display_list = [test_input[0], tar[0], prediction[0]]
    title = ["Input Image", "Ground Truth", "Predicted Image"]

    for i in range(3):
        plt.subplot(1, 3, i + 1)
        plt.title(title[i])
        # Getting the pixel values in the [0, 1] range to plot.
        plt.imshow(display_list[i] * 0.5 + 0.5)
        plt.axis("off")
    plt.show()
    return prediction


log_dir = "logs/"

summary_writer = tf.summary.create_file_writer(log_dir + "fit/" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))


@tf.function
def train_step(input_image, target, step):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        gen_output = generator(input_image, training=True)

        disc_real_output = discriminator([input_image, target], training=True)
        disc_generated_output = discriminator([input_image, gen_output], training=True)

        gen_total_loss, gen_gan_loss, gen_l1_loss = generator_loss(disc_generated_output, gen_output, target)
        disc_loss = discriminator_loss(disc_real_output, disc_generated_output)

    generator_gradients = gen_tape.gradient(gen_total_loss, generator.trainable_variables)
    discriminator_gradients = disc_tape.gradient(disc_loss, discriminator.trainable_variables)

    generator_optimizer.apply_gradients(zip(generator_gradients, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(discriminator_gradients, discriminator.trainable_variables))

    with summary_writer.as_default():
        tf.summary.scalar("gen_total_loss", gen_total_loss, step=step // 10)
        tf.summary.scalar("gen_gan_loss", gen_gan_loss, step=step // 10)
        tf.summary.scalar("gen_l1_loss", gen_l1_loss, step=step // 10)
        tf.summary.scalar("disc_loss", disc_loss, step=step // 10)


# The tutorial shows images every 1000 steps and saves every 5000; here every 10 and 20.
def fit(train_ds, test_ds, steps):
    example_input, example_target = next(iter(test_ds.take(1)))
    start = time.time()

    for step, (input_image, target) in train_ds.repeat().take(steps).enumerate():
        if (step) % 10 == 0:
            display.clear_output(wait=True)

            if step != 0:
                print(f"Time taken for 10 steps: {time.time()-start:.2f} sec\\n")

            start = time.time()

            generate_images(generator, example_input, example_target)
            print(f"Step: {step//10}0")

        train_step(input_image, target, step)

        # Training step
        if (step + 1) % 10 == 0:
            print(".", end="", flush=True)

        # Save (checkpoint) the model every 20 steps
        if (step + 1) % 20 == 0:
            checkpoint.save(file_prefix=checkpoint_prefix)
"""

PIX2PIX_FIT = "fit(train_dataset, test_dataset, steps=60)\n"

PIX2PIX_AFTER = """
# Run the trained model on a few examples from the test set
for inp, tar in test_dataset.take(2):
    prediction = generate_images(generator, inp, tar)

test_l1_trained = float(np.mean([tf.reduce_mean(tf.abs(generator(i, training=True) - t)) for i, t in test_dataset]))
steps_trained = int(generator_optimizer.iterations)

# Restoring the latest checkpoint in checkpoint_dir
status = checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))
status.assert_existing_objects_matched()
steps_restored = int(generator_optimizer.iterations)
test_l1 = float(np.mean([tf.reduce_mean(tf.abs(generator(i, training=True) - t)) for i, t in test_dataset]))
summary_files = sorted(os.listdir(log_dir + "fit"))
"""


def _pix2pix(shell, monkeypatch, folder, distribute):
    _in_folder(monkeypatch, folder)
    _cell(shell, PIX2PIX_FILES)
    ns = _cell(shell, PIX2PIX)
    objects = {name: ns[name] for name in ("generator", "discriminator", "generator_optimizer", "checkpoint")}
    objects["discriminator_optimizer"] = ns["discriminator_optimizer"]
    objects["summary_writer"] = ns["summary_writer"]
    generator_before, discriminator_before = _weights(ns["generator"]), _weights(ns["discriminator"])
    untrained_l1 = float(np.mean([np.abs(ns["generator"](i, training=True) - t).mean() for i, t in ns["test_dataset"]]))
    ns = _cell(shell, PIX2PIX_FIT, distribute=distribute)
    for name, obj in objects.items():
        assert ns[name] is obj, f"{name} came back as a copy"
    assert ns["checkpoint"].generator is ns["generator"]
    assert ns["checkpoint"].generator_optimizer is ns["generator_optimizer"]
    assert _changed(generator_before, ns["generator"]) and _changed(discriminator_before, ns["discriminator"])
    ns = _cell(shell, PIX2PIX_AFTER)
    assert ns["prediction"].shape == (1, 32, 32, 3)
    checkpoints = sorted(os.listdir(folder / "training_checkpoints"))
    assert len(ns["summary_files"]) == 1, ns["summary_files"]
    scalars, writing = _scalars(folder / "logs" / "fit" / ns["summary_files"][0])
    assert writing == 1, writing  # rank 0's summaries alone
    return {
        "untrained_l1": untrained_l1,
        **{name: ns[name] for name in ("test_l1", "test_l1_trained", "steps_trained", "steps_restored")},
        "checkpoints": checkpoints,
        "scalars": scalars,
    }


def test_pix2pix_trains_its_generator_in_the_notebook_s_fit_loop_and_restores_its_checkpoint(
    shell, tmp_path, monkeypatch
):
    """tensorflow.org's pix2pix: the notebook's `fit` loop trains the notebook's generator and discriminator through
    its checkpoint's optimizers; its checkpoints, summaries and the restore from the latest one work afterwards."""
    one = _pix2pix(shell, monkeypatch, tmp_path / "one", distribute=False)
    two = _pix2pix(shell, monkeypatch, tmp_path / "two", distribute=True)
    for run in (one, two):
        assert run["steps_trained"] == 60 and run["steps_restored"] == 60, run
        assert run["test_l1"] < run["untrained_l1"] * 0.9, run  # the generator learnt something
    assert two["checkpoints"] == one["checkpoints"], (two["checkpoints"], one["checkpoints"])
    steps = [step for step, _ in one["scalars"]["gen_l1_loss"]]
    assert len(steps) == 60 and [step for step, _ in two["scalars"]["gen_l1_loss"]] == steps
    close(two["test_l1"], one["test_l1"], 1.5, "test L1 after restoring the latest checkpoint")


# ------------------------------------------------------------------------------------------ simple audio recognition

AUDIO_FILES = """
import pathlib

import numpy as np
import tensorflow as tf

# mini_speech_commands' layout: one folder of 16 kHz mono WAV files per command. Each "command" here is a tone
# of its own pitch in noise, a quarter of a second long.
rng = np.random.default_rng(0)
DATASET_PATH = "data/mini_speech_commands"
data_dir = pathlib.Path(DATASET_PATH)
for command, pitch in (("down", 400.0), ("go", 800.0), ("left", 1200.0), ("no", 1600.0)):
    (data_dir / command).mkdir(parents=True, exist_ok=True)
    for i in range(100):
        t = np.arange(4000) / 16000.0
        wave = 0.12 * np.sin(2 * np.pi * pitch * rng.uniform(0.8, 1.2) * t) + 0.4 * rng.standard_normal(4000)
        wav = tf.audio.encode_wav(np.clip(wave, -1, 1).astype("float32")[:, None], 16000)
        tf.io.write_file(str(data_dir / command / f"{i:08x}_nohash_0.wav"), wav)
"""

AUDIO_DATA = """
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from tensorflow.keras import layers
from tensorflow.keras import models

# Set the seed value for experiment reproducibility.
seed = 42
tf.random.set_seed(seed)
np.random.seed(seed)
tf.keras.utils.set_random_seed(seed)

commands = np.array(tf.io.gfile.listdir(str(data_dir)))
commands = commands[(commands != "README.md") & (commands != ".DS_Store")]

# The tutorial's clips are a second long (16000 samples); these are 4000.
train_ds, val_ds = tf.keras.utils.audio_dataset_from_directory(
    directory=data_dir,
    batch_size=32,
    validation_split=0.2,
    seed=0,
    output_sequence_length=4000,
    subset="both",
)

label_names = np.array(train_ds.class_names)


def squeeze(audio, labels):
    audio = tf.squeeze(audio, axis=-1)
    return audio, labels


train_ds = train_ds.map(squeeze, tf.data.AUTOTUNE)
val_ds = val_ds.map(squeeze, tf.data.AUTOTUNE)

test_ds = val_ds.shard(num_shards=2, index=0)
val_ds = val_ds.shard(num_shards=2, index=1)

for example_audio, example_labels in train_ds.take(1):
    print(example_audio.shape)
    print(example_labels.shape)
"""

AUDIO_SPECTROGRAMS = """
def get_spectrogram(waveform):
    # Convert the waveform to a spectrogram via a STFT.
    spectrogram = tf.signal.stft(waveform, frame_length=255, frame_step=128)
    # Obtain the magnitude of the STFT.
    spectrogram = tf.abs(spectrogram)
    # Add a `channels` dimension, so that the spectrogram can be used
    # as image-like input data with convolution layers (which expect
    # shape (`batch_size`, `height`, `width`, `channels`).
    spectrogram = spectrogram[..., tf.newaxis]
    return spectrogram


def make_spec_ds(ds):
    return ds.map(map_func=lambda audio, label: (get_spectrogram(audio), label), num_parallel_calls=tf.data.AUTOTUNE)


train_spectrogram_ds = make_spec_ds(train_ds)
val_spectrogram_ds = make_spec_ds(val_ds)
test_spectrogram_ds = make_spec_ds(test_ds)

for example_spectrograms, example_spect_labels in train_spectrogram_ds.take(1):
    break

train_spectrogram_ds = train_spectrogram_ds.cache().shuffle(10000).prefetch(tf.data.AUTOTUNE)
val_spectrogram_ds = val_spectrogram_ds.cache().prefetch(tf.data.AUTOTUNE)
test_spectrogram_ds = test_spectrogram_ds.cache().prefetch(tf.data.AUTOTUNE)
"""

AUDIO_MODEL = """
input_shape = example_spectrograms.shape[1:]
print("Input shape:", input_shape)
num_labels = len(label_names)

# Instantiate the `tf.keras.layers.Normalization` layer.
norm_layer = layers.Normalization()
# Fit the state of the layer to the spectrograms
# with `Normalization.adapt`.
norm_layer.adapt(data=train_spectrogram_ds.map(map_func=lambda spec, label: spec))

model = models.Sequential(
    [
        layers.Input(shape=input_shape),
        # Downsample the input.
        layers.Resizing(32, 32),
        # Normalize.
        norm_layer,
        layers.Conv2D(8, 3, activation="relu"),
        layers.Conv2D(16, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Dropout(0.25),
        layers.Flatten(),
        layers.Dense(32, activation="relu"),
        layers.Dropout(0.5),
        layers.Dense(num_labels),
    ]
)

model.summary()

model.compile(
    optimizer=tf.keras.optimizers.Adam(),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
"""

AUDIO_FIT = """
EPOCHS = 10
history = model.fit(
    train_spectrogram_ds,
    validation_data=val_spectrogram_ds,
    epochs=EPOCHS,
    callbacks=tf.keras.callbacks.EarlyStopping(verbose=1, patience=2),
)
"""

AUDIO_AFTER = """
metrics = history.history
plt.figure(figsize=(16, 6))
plt.subplot(1, 2, 1)
plt.plot(history.epoch, metrics["loss"], metrics["val_loss"])
plt.legend(["loss", "val_loss"])

evaluated = model.evaluate(test_spectrogram_ds, return_dict=True)

y_pred = model.predict(test_spectrogram_ds)
y_pred = tf.argmax(y_pred, axis=1)
y_true = tf.concat(list(test_spectrogram_ds.map(lambda s, lab: lab)), axis=0)
confusion_mtx = tf.math.confusion_matrix(y_true, y_pred)

x = data_dir / "no/00000000_nohash_0.wav"
x = tf.io.read_file(str(x))
x, sample_rate = tf.audio.decode_wav(x, desired_channels=1, desired_samples=4000)
x = tf.squeeze(x, axis=-1)
waveform = x
x = get_spectrogram(x)
x = x[tf.newaxis, ...]

prediction = model(x)
said = label_names[int(tf.argmax(prediction[0]))]


class ExportModel(tf.Module):
    def __init__(self, model):
        self.model = model

        # Accept either a string-filename or a batch of waveforms.
        # YOu could add additional signatures for a single wave, or a ragged-batch.
        self.__call__.get_concrete_function(x=tf.TensorSpec(shape=(), dtype=tf.string))
        self.__call__.get_concrete_function(x=tf.TensorSpec(shape=[None, 4000], dtype=tf.float32))

    @tf.function
    def __call__(self, x):
        # If they pass a string, load the file and decode it.
        if x.dtype == tf.string:
            x = tf.io.read_file(x)
            x, _ = tf.audio.decode_wav(
                x,
                desired_channels=1,
                desired_samples=4000,
            )
            x = tf.squeeze(x, axis=-1)
            x = x[tf.newaxis, :]

        x = get_spectrogram(x)
        result = self.model(x, training=False)

        class_ids = tf.argmax(result, axis=-1)
        class_names = tf.gather(label_names, class_ids)
        return {"predictions": result, "class_ids": class_ids, "class_names": class_names}


export = ExportModel(model)
exported = export(tf.constant(str(data_dir / "no/00000000_nohash_0.wav")))

tf.saved_model.save(export, "saved")
imported = tf.saved_model.load("saved")
served = imported(waveform[tf.newaxis, :])
"""


def _audio(shell, monkeypatch, folder, distribute):
    _in_folder(monkeypatch, folder)
    _cell(shell, AUDIO_FILES)
    ns = _cell(shell, AUDIO_DATA)
    train_ds = ns["train_ds"]
    ns = _cell(shell, AUDIO_SPECTROGRAMS)
    spectrograms = ns["train_spectrogram_ds"]
    assert tuple(ns["example_spectrograms"].shape[1:]) == (30, 129, 1)
    ns = _cell(shell, AUDIO_MODEL)
    model, norm_layer, optimizer = ns["model"], ns["norm_layer"], ns["model"].optimizer
    mean = np.array(norm_layer.mean)
    before = _weights(model)
    ns = _cell(shell, AUDIO_FIT, distribute=distribute)
    assert ns["model"] is model and model.optimizer is optimizer and ns["norm_layer"] is norm_layer
    assert model.layers[1] is norm_layer and np.allclose(np.array(norm_layer.mean), mean)  # adapted, not trained
    assert ns["train_ds"] is train_ds and ns["train_spectrogram_ds"] is spectrograms
    assert _changed(before, model) and ns["history"] is model.history
    ns = _cell(shell, AUDIO_AFTER)
    assert ns["confusion_mtx"].shape == (4, 4)
    exported, served = ns["exported"], ns["served"]
    assert exported["class_names"].numpy()[0].decode() == ns["said"]
    assert np.allclose(served["predictions"], ns["prediction"], atol=1e-5)
    return {"evaluated": ns["evaluated"], "history": ns["history"].history, "said": ns["said"]}


def test_simple_audio_recognition_exports_the_trained_model_in_a_tf_module(shell, tmp_path, monkeypatch):
    """tensorflow.org's "Simple audio recognition": WAV files through `audio_dataset_from_directory`, spectrograms by
    `tf.signal.stft` in a `tf.data` map, a `Normalization` adapted on them; the trained notebook model then serves
    inside the tutorial's `ExportModel(tf.Module)`, saved and loaded as a SavedModel. Before: the fit cell failed on
    the ranks with "TypeError: 'EarlyStopping' object is not iterable" (the tutorial passes one callback, not a
    list, which Keras takes)."""
    one = _audio(shell, monkeypatch, tmp_path / "one", distribute=False)
    two = _audio(shell, monkeypatch, tmp_path / "two", distribute=True)
    for run in (one, two):
        assert run["evaluated"]["accuracy"] > 0.6 and run["said"] == "no", run  # four tones, chance is 0.25
    close(two["evaluated"]["loss"], one["evaluated"]["loss"], 2.0, "test loss")


# ------------------------------------------------------------ modules, layers and models + basic training loops

MODULES = """
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)


class Dense(tf.Module):
    def __init__(self, in_features, out_features, name=None):
        super().__init__(name=name)
        self.w = tf.Variable(tf.random.normal([in_features, out_features]), name="w")
        self.b = tf.Variable(tf.zeros([out_features]), name="b")

    def __call__(self, x):
        y = tf.matmul(x, self.w) + self.b
        return tf.nn.relu(y)


class SequentialModule(tf.Module):
    def __init__(self, name=None):
        super().__init__(name=name)

        self.dense_1 = Dense(in_features=3, out_features=3)
        self.dense_2 = Dense(in_features=3, out_features=2)

    def __call__(self, x):
        x = self.dense_1(x)
        return self.dense_2(x)


# You have made a model!
my_model = SequentialModule(name="the_model")

# Call it, with random results
print("Model results:", my_model(tf.constant([[2.0, 2.0, 2.0]])))


class FlexibleDenseModule(tf.Module):
    # Note: No need for `in_features`
    def __init__(self, out_features, name=None):
        super().__init__(name=name)
        self.is_built = False
        self.out_features = out_features

    def __call__(self, x):
        # Create variables on first call.
        if not self.is_built:
            self.w = tf.Variable(tf.random.normal([x.shape[-1], self.out_features]), name="w")
            self.b = tf.Variable(tf.zeros([self.out_features]), name="b")
            self.is_built = True

        y = tf.matmul(x, self.w) + self.b
        return tf.nn.relu(y)


# Used in a module
class MySequentialModule(tf.Module):
    def __init__(self, name=None):
        super().__init__(name=name)

        self.dense_1 = FlexibleDenseModule(out_features=3)
        self.dense_2 = FlexibleDenseModule(out_features=2)

    def __call__(self, x):
        x = self.dense_1(x)
        return self.dense_2(x)


my_flexible_model = MySequentialModule(name="the_model")
print("Model results:", my_flexible_model(tf.constant([[2.0, 2.0, 2.0]])))

# The actual line
TRUE_W = 3.0
TRUE_B = 2.0

NUM_EXAMPLES = 201

# A vector of random x values
x = tf.linspace(-2, 2, NUM_EXAMPLES)
x = tf.cast(x, tf.float32)


def f(x):
    return x * TRUE_W + TRUE_B


# Generate some noise
noise = tf.random.normal(shape=[NUM_EXAMPLES])

# Calculate y
y = f(x) + noise


class MyModel(tf.Module):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Initialize the weights to `5.0` and the bias to `0.0`
        # In practice, these should be randomly initialized
        self.w = tf.Variable(5.0)
        self.b = tf.Variable(0.0)

    def __call__(self, x):
        return self.w * x + self.b


model = MyModel()


# This computes a single loss value for an entire batch
def loss(target_y, predicted_y):
    return tf.reduce_mean(tf.square(target_y - predicted_y))


# Given a callable model, inputs, outputs, and a learning rate...
def train(model, x, y, learning_rate):
    with tf.GradientTape() as t:
        # Trainable variables are automatically tracked by GradientTape
        current_loss = loss(y, model(x))

    # Use GradientTape to calculate the gradients with respect to W and b
    dw, db = t.gradient(current_loss, [model.w, model.b])

    # Subtract the gradient scaled by the learning rate
    model.w.assign_sub(learning_rate * dw)
    model.b.assign_sub(learning_rate * db)


# Collect the history of W-values and b-values to plot later
weights = []
biases = []
epochs = range(10)


# Define a training loop
def report(model, loss):
    return f"W = {model.w.numpy():1.2f}, b = {model.b.numpy():1.2f}, loss={loss:2.5f}"


def training_loop(model, x, y):
    for epoch in epochs:
        # Update the model with the single giant batch
        train(model, x, y, learning_rate=0.1)

        # Track this before I update
        weights.append(model.w.numpy())
        biases.append(model.b.numpy())
        current_loss = loss(y, model(x))

        print(f"Epoch {epoch:2d}:")
        print("    ", report(model, current_loss))


current_loss = loss(y, model(x))
print("Starting:")
print("    ", report(model, current_loss))


class MyModelKeras(tf.keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Initialize the weights to `5.0` and the bias to `0.0`
        # In practice, these should be randomly initialized
        # (Keras 3 tracks only its own variables: a tf.Variable here is no weight of the model.)
        self.w = tf.keras.Variable(5.0)
        self.b = tf.keras.Variable(0.0)

    def call(self, x):
        return self.w * x + self.b


keras_model = MyModelKeras()
"""

MODULES_LOOP = "training_loop(model, x, y)\n"

MODULES_KERAS_LOOP = """
# Reuse the training loop with a Keras model
training_loop(keras_model, x, y)
"""

MODULES_AFTER_LOOP = """
# You can also save a checkpoint using Keras's built-in support
keras_model.save_weights("my_checkpoint.weights.h5")
loop_w, loop_b = float(model.w.numpy()), float(model.b.numpy())
keras_loop_w = float(keras_model.w.numpy())

keras_model = MyModelKeras()

# compile sets the training parameters
keras_model.compile(
    # By default, fit() uses tf.function().  You can
    # turn that off for debugging, but it is on now.
    run_eagerly=False,
    # Using a built-in optimizer, configuring as an object
    optimizer=tf.keras.optimizers.SGD(learning_rate=0.1),
    # Keras comes with built-in MSE error
    # However, you could use the loss function
    # defined above
    loss=tf.keras.losses.MeanSquaredError(),  # Keras 3's tf.keras.losses has no mean_squared_error
)
print(x.shape[0])
"""

MODULES_FIT = "history = keras_model.fit(x, y, epochs=10, batch_size=1000)\n"

MODULES_AFTER = """
fit_w, fit_b = float(keras_model.w.numpy()), float(keras_model.b.numpy())
fit_loss = float(loss(y, keras_model(x)))

chkp_path = "my_checkpoint"
checkpoint = tf.train.Checkpoint(model=model)
checkpoint.write(chkp_path)
checkpoint_variables = tf.train.list_variables(chkp_path)

new_model = MyModel()
new_checkpoint = tf.train.Checkpoint(model=new_model)
new_checkpoint.restore("my_checkpoint")
restored_w, restored_b = float(new_model.w.numpy()), float(new_model.b.numpy())

reloaded = MyModelKeras()
reloaded(x[:1])  # Keras 3 loads weights into a built model only
reloaded.load_weights("my_checkpoint.weights.h5")
reloaded_w = float(reloaded.w.numpy())

flexible_checkpoint = tf.train.Checkpoint(model=my_flexible_model)
flexible_checkpoint.write("flexible_checkpoint")
new_flexible = MySequentialModule()
new_flexible(tf.constant([[2.0, 2.0, 2.0]]))
tf.train.Checkpoint(model=new_flexible).restore("flexible_checkpoint")
flexible_results = new_flexible(tf.constant([[2.0, 2.0, 2.0]])).numpy()
"""


def _modules(shell, monkeypatch, folder, distribute):
    _in_folder(monkeypatch, folder)
    ns = _cell(shell, MODULES)
    model, keras_model, weights = ns["model"], ns["keras_model"], ns["weights"]
    flexible = ns["my_flexible_model"]
    ns = _cell(shell, MODULES_LOOP, distribute=distribute)
    assert ns["model"] is model and ns["weights"] is weights and ns["my_flexible_model"] is flexible
    assert len(weights) == 10 and float(model.w.numpy()) < 4.0, (weights, model.w)  # trained from 5.0
    ns = _cell(shell, MODULES_KERAS_LOOP, distribute=distribute)
    assert ns["keras_model"] is keras_model and len(weights) == 20
    assert float(keras_model.w.numpy()) < 4.0, keras_model.w
    ns = _cell(shell, MODULES_AFTER_LOOP)
    keras_model, optimizer = ns["keras_model"], ns["keras_model"].optimizer
    ns = _cell(shell, MODULES_FIT, distribute=distribute)
    assert ns["keras_model"] is keras_model and keras_model.optimizer is optimizer
    assert ns["history"] is keras_model.history and len(ns["history"].history["loss"]) == 10
    ns = _cell(shell, MODULES_AFTER)
    assert (ns["restored_w"], ns["restored_b"]) == (ns["loop_w"], ns["loop_b"])
    assert ns["reloaded_w"] == ns["keras_loop_w"]
    assert np.allclose(ns["flexible_results"], flexible(np.array([[2.0, 2.0, 2.0]], "float32")))
    names = ["loop_w", "loop_b", "keras_loop_w", "fit_w", "fit_b", "fit_loss"]
    return {name: ns[name] for name in names} | {"weights": [float(w) for w in weights]}


def test_modules_and_basic_training_loops_train_the_notebook_s_tf_modules_and_keras_model(shell, tmp_path, monkeypatch):
    """tensorflow.org's "Introduction to modules, layers, and models" and "Basic training loops": the guide's hand
    loop (`assign_sub` on a tf.Module's variables, no optimizer) trains the notebook's `MyModel` tf.Module and
    `MyModelKeras`, then `compile` / `fit` trains a new one; `tf.train.Checkpoint` writes and restores them after.
    Keras 3 saves weights only to a `.weights.h5` file, so `save_weights("my_checkpoint")` is written with it, and
    its `tf.keras.losses` has no `mean_squared_error` (AttributeError in one process too): the cell compiles with
    `tf.keras.losses.MeanSquaredError()`. Keras 3 does not track the guide's `tf.Variable`s on a `tf.keras.Model`
    (in one process, fit warns "The model does not have any trainable weights" and trains nothing, and
    `load_weights` refuses the unbuilt model): `MyModelKeras` makes `tf.keras.Variable`s and is called once before
    `load_weights`."""
    one = _modules(shell, monkeypatch, tmp_path / "one", distribute=False)
    two = _modules(shell, monkeypatch, tmp_path / "two", distribute=True)
    # The hand loop reads all of x on every rank: it trains as one process does.
    assert np.allclose(two["weights"], one["weights"], atol=1e-5), (two["weights"], one["weights"])
    for name in ("loop_w", "loop_b", "keras_loop_w"):
        assert np.isclose(two[name], one[name], atol=1e-5), (name, two[name], one[name])
    for run in (one, two):
        assert abs(run["fit_w"] - 3.0) < 1.0, run  # from 5.0 towards TRUE_W
    close(two["fit_loss"], one["fit_loss"], 1.5, "loss after compile / fit")


# ------------------------------------------------------------------------------------ writing your own callbacks

CALLBACKS = """
import numpy as np
import tensorflow as tf
from tensorflow import keras

keras.utils.set_random_seed(0)


# Define the Keras model to add callbacks to
def get_model():
    model = keras.Sequential()
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


# MNIST's shapes: flattened 28x28 images in [0, 1], the digit as the regression target.
rng = np.random.default_rng(0)
x_train = rng.random((1000, 784)).astype("float32")
y_train = np.clip(np.round(x_train[:, :40].sum(axis=1) - 15), 0, 9).astype("float32")
x_test = rng.random((1000, 784)).astype("float32")
y_test = np.clip(np.round(x_test[:, :40].sum(axis=1) - 15), 0, 9).astype("float32")

# Limit the data to 1000 samples
x_train = x_train[:1000]
y_train = y_train[:1000]
x_test = x_test[:1000]
y_test = y_test[:1000]

printed = []


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        print("Up to batch {}, the average loss is {:7.2f}.".format(batch, logs["loss"]))

    def on_test_batch_end(self, batch, logs=None):
        print("Up to batch {}, the average loss is {:7.2f}.".format(batch, logs["loss"]))

    def on_epoch_end(self, epoch, logs=None):
        printed.append(epoch)
        print(
            "The average loss for epoch {} is {:7.2f} "
            "and mean absolute error is {:7.2f}.".format(epoch, logs["loss"], logs["mean_absolute_error"])
        )


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    \"\"\"Stop training when the loss is at its min, i.e. the loss stops decreasing.

    Arguments:
        patience: Number of epochs to wait after min has been hit. After this
        number of no improvement, training stops.
    \"\"\"

    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        # best_weights to store the weights at which the minimum loss occurs.
        self.best_weights = None

    def on_train_begin(self, logs=None):
        # The number of epoch it has waited when loss is no longer minimum.
        self.wait = 0
        # The epoch the training stops at.
        self.stopped_epoch = 0
        # Initialize the best as infinity.
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            # Record the best weights if current results is better (less).
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                print("Restoring model weights from the end of the best epoch.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")


class CustomLearningRateScheduler(keras.callbacks.Callback):
    \"\"\"Learning rate scheduler which sets the learning rate according to schedule.

    Arguments:
        schedule: a function that takes an epoch index
            (integer, indexed from 0) and current learning rate
            as inputs and returns a new learning rate as output (float).
    \"\"\"

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model.optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        # Get the current learning rate from model's optimizer.
        lr = self.model.optimizer.learning_rate
        # Call schedule function to get the scheduled learning rate.
        scheduled_lr = self.schedule(epoch, lr)
        # Set the value back to the optimizer before this epoch starts
        self.model.optimizer.learning_rate = scheduled_lr
        print(f"\\nEpoch {epoch}: Learning rate is {float(np.array(scheduled_lr))}.")


LR_SCHEDULE = [
    # (epoch to start, learning rate) tuples
    (3, 0.05),
    (6, 0.01),
    (9, 0.005),
    (12, 0.001),
]


def lr_schedule(epoch, lr):
    \"\"\"Helper function to retrieve the scheduled learning rate based on epoch.\"\"\"
    if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
        return lr
    for i in range(len(LR_SCHEDULE)):
        if epoch == LR_SCHEDULE[i][0]:
            return LR_SCHEDULE[i][1]
    return lr


printing = LossAndErrorPrintingCallback()
early_stopping = EarlyStoppingAtMinLoss()
scheduler = CustomLearningRateScheduler(lr_schedule)
model = get_model()
scheduled_model = get_model()
"""

CALLBACKS_FIT = """
model.fit(
    x_train,
    y_train,
    batch_size=64,
    steps_per_epoch=5,
    epochs=30,
    verbose=0,
    callbacks=[printing, early_stopping],
)
"""

CALLBACKS_SCHEDULED_FIT = """
scheduled_model.fit(
    x_train,
    y_train,
    batch_size=64,
    epochs=15,
    verbose=0,
    callbacks=[printing, scheduler],
)
"""

CALLBACKS_AFTER = """
res = model.evaluate(x_test, y_test, batch_size=128, verbose=0, callbacks=[LossAndErrorPrintingCallback()])
scheduled_res = scheduled_model.evaluate(x_test, y_test, batch_size=128, verbose=0)
best_weights_kept = all(np.allclose(a, b) for a, b in zip(early_stopping.best_weights, model.get_weights()))
stopped_epoch, best = early_stopping.stopped_epoch, float(early_stopping.best)
rate_after = float(scheduled_model.optimizer.learning_rate)
"""


def _callbacks(shell, distribute):
    ns = _cell(shell, CALLBACKS)
    model, scheduled = ns["model"], ns["scheduled_model"]
    callbacks = {name: ns[name] for name in ("printing", "early_stopping", "scheduler", "printed")}
    ns = _cell(shell, CALLBACKS_FIT, distribute=distribute)
    for name, obj in callbacks.items():
        assert ns[name] is obj, f"{name} came back as a copy"
    assert ns["model"] is model and ns["early_stopping"].model is model, (distribute, ns["early_stopping"].model)
    assert ns["early_stopping"].stopped_epoch > 0, "the notebook's callback does not hold the stop"
    stopped = ns["early_stopping"].stopped_epoch
    assert ns["printed"] == list(range(stopped + 1)), ns["printed"]
    ns = _cell(shell, CALLBACKS_SCHEDULED_FIT, distribute=distribute)
    assert ns["scheduled_model"] is scheduled and ns["scheduler"].model is scheduled
    assert ns["printing"].model is scheduled
    ns = _cell(shell, CALLBACKS_AFTER)
    assert ns["best_weights_kept"], "the model does not hold the callback's best weights"
    return {name: ns[name] for name in ("res", "scheduled_res", "stopped_epoch", "best", "rate_after")}


def test_writing_your_own_callbacks_leaves_the_notebook_s_callbacks_as_one_process_does(shell):
    """The guide "Writing your own callbacks": `LossAndErrorPrintingCallback`, `EarlyStoppingAtMinLoss` and
    `CustomLearningRateScheduler(lr_schedule)` made in a plain cell; after the distributed fit they hold the stop,
    the best loss and the model they were given, the model holds the best weights, and the optimizer holds the last
    scheduled learning rate, as after one process. Before: the callbacks came back with `model` None (their state
    came back, not the model fit gave them), and the scheduler's absolute rates were taken as the two ranks' scaled
    rate (0.0005 on the optimizer afterwards, not the table's 0.001)."""
    one = _callbacks(shell, distribute=False)
    two = _callbacks(shell, distribute=True)
    # The guide's table set 0.001 at epoch 12, in one process's units on two ranks too.
    assert np.isclose(one["rate_after"], 0.001) and np.isclose(two["rate_after"], 0.001), (two, one)
    close(two["best"], one["best"], 2.0, "best training loss")
    close(two["res"][0], one["res"][0], 2.0, "test loss after early stopping")
    close(two["scheduled_res"][0], one["scheduled_res"][0], 2.0, "test loss after the scheduled fit")


@pytest.mark.fast
def test_a_callback_s_model_comes_back_by_the_name_the_notebook_has_it_by():
    """object_state: rank 0 tells the callback's model by its name in the notebook; the notebook's callback then
    holds the notebook's model. A cell that rebinds `model` and fits with it gives the callback the new one."""
    import keras

    from jupyter_dl.wire import object_state

    class Stopper(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.stopped_epoch = 0

    on_rank, old_on_rank = keras.Sequential([keras.layers.Dense(1)]), keras.Sequential([keras.layers.Dense(1)])
    callback = Stopper()
    before = object_state.state_of(callback, {id(old_on_rank): "model"})
    callback.set_model(on_rank)
    callback.stopped_epoch = 3
    after = object_state.state_of(callback, {id(on_rank): "model"})
    moved = object_state.changed(before, after)
    assert moved["attributes"] == {"stopped_epoch": 3} and moved["model"].name == "model"

    notebook_model, notebook_callback = keras.Sequential([keras.layers.Dense(1)]), Stopper()
    object_state.restore(notebook_callback, moved, {"model": notebook_model}.__getitem__)
    assert notebook_callback.model is notebook_model and notebook_callback.stopped_epoch == 3
    # The same model, untouched state: nothing goes back.
    assert object_state.changed(after, object_state.state_of(callback, {id(on_rank): "model"})) == {}
    # A model the receiver has under no name: the callback keeps its own.
    assert "model" not in object_state.state_of(callback, {})
