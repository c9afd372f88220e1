"""keras.io "CycleGAN", reduced: copied as keras.io writes it, set up in plain cells, `%%distribute -n 2` on fit.

The example's `ReflectionPadding2D(layers.Layer)` (with `**kwargs`), its `residual_block` / `downsample` /
`upsample` helpers, `get_resnet_generator` and `get_discriminator` builders, four notebook models, and a
`CycleGan(keras.Model)` with its own `compile(gen_G_optimizer, gen_F_optimizer, disc_X_optimizer, disc_Y_optimizer,
gen_loss_fn, disc_loss_fn)` and a train_step with one persistent GradientTape. As keras.io lays it out, the cell
that fits also builds the CycleGan over the notebook's four models and compiles it, with a `GANMonitor` (its
weights-only ModelCheckpoint is left out: see FIT). Data is synthetic, 32x32 instead of 256x256, the models smaller.
"""

import os

import numpy as np
from notebook_cells import cell as _cell
from notebook_cells import close

SETUP = """
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import tensorflow as tf
import keras
from keras import layers, ops

keras.utils.set_random_seed(0)
autotune = tf.data.AUTOTUNE
orig_img_size = (36, 36)
input_img_size = (32, 32, 3)
kernel_init = keras.initializers.RandomNormal(mean=0.0, stddev=0.02)
gamma_init = keras.initializers.RandomNormal(mean=0.0, stddev=0.02)
buffer_size = 64
batch_size = 4

rng = np.random.default_rng(0)
horses = rng.integers(0, 256, (32, 36, 36, 3)).astype("uint8")
zebras = rng.integers(0, 256, (32, 36, 36, 3)).astype("uint8")
labels = np.zeros(32, "int64")


def normalize_img(img):
    img = ops.cast(img, dtype=tf.float32)
    return (img / 127.5) - 1.0


def preprocess_train_image(img, label):
    img = tf.image.random_flip_left_right(img)
    img = ops.image.resize(img, [*orig_img_size])
    img = tf.image.random_crop(img, size=[*input_img_size])
    img = normalize_img(img)
    return img


def preprocess_test_image(img, label):
    img = ops.image.resize(img, [input_img_size[0], input_img_size[1]])
    img = normalize_img(img)
    return img


train_horses = (tf.data.Dataset.from_tensor_slices((horses, labels))
                .map(preprocess_train_image, num_parallel_calls=autotune).cache()
                .shuffle(buffer_size).batch(batch_size))
train_zebras = (tf.data.Dataset.from_tensor_slices((zebras, labels))
                .map(preprocess_train_image, num_parallel_calls=autotune).cache()
                .shuffle(buffer_size).batch(batch_size))
test_horses = (tf.data.Dataset.from_tensor_slices((horses[:4], labels[:4]))
               .map(preprocess_test_image, num_parallel_calls=autotune).cache().batch(batch_size))


class ReflectionPadding2D(layers.Layer):
    def __init__(self, padding=(1, 1), **kwargs):
        self.padding = tuple(padding)
        super().__init__(**kwargs)

    def call(self, input_tensor, mask=None):
        padding_width, padding_height = self.padding
        padding_tensor = [[0, 0], [padding_height, padding_height], [padding_width, padding_width], [0, 0]]
        return ops.pad(input_tensor, padding_tensor, mode="reflect")


def residual_block(x, activation, kernel_initializer=kernel_init, kernel_size=(3, 3), strides=(1, 1),
                   padding="valid", gamma_initializer=gamma_init, use_bias=False):
    dim = x.shape[-1]
    input_tensor = x
    x = ReflectionPadding2D()(input_tensor)
    x = layers.Conv2D(dim, kernel_size, strides=strides, kernel_initializer=kernel_initializer, padding=padding,
                      use_bias=use_bias)(x)
    x = keras.layers.GroupNormalization(groups=1, gamma_initializer=gamma_initializer)(x)
    x = activation(x)
    x = ReflectionPadding2D()(x)
    x = layers.Conv2D(dim, kernel_size, strides=strides, kernel_initializer=kernel_initializer, padding=padding,
                      use_bias=use_bias)(x)
    x = keras.layers.GroupNormalization(groups=1, gamma_initializer=gamma_initializer)(x)
    x = layers.add([input_tensor, x])
    return x


def downsample(x, filters, activation, kernel_initializer=kernel_init, kernel_size=(3, 3), strides=(2, 2),
               padding="same", gamma_initializer=gamma_init, use_bias=False):
    x = layers.Conv2D(filters, kernel_size, strides=strides, kernel_initializer=kernel_initializer, padding=padding,
                      use_bias=use_bias)(x)
    x = keras.layers.GroupNormalization(groups=1, gamma_initializer=gamma_initializer)(x)
    if activation:
        x = activation(x)
    return x


def upsample(x, filters, activation, kernel_size=(3, 3), strides=(2, 2), padding="same",
             kernel_initializer=kernel_init, gamma_initializer=gamma_init, use_bias=False):
    x = layers.Conv2DTranspose(filters, kernel_size, strides=strides, padding=padding,
                               kernel_initializer=kernel_initializer, use_bias=use_bias)(x)
    x = keras.layers.GroupNormalization(groups=1, gamma_initializer=gamma_initializer)(x)
    if activation:
        x = activation(x)
    return x


def get_resnet_generator(filters=8, num_downsampling_blocks=2, num_residual_blocks=2, num_upsample_blocks=2,
                         gamma_initializer=gamma_init, name=None):
    img_input = layers.Input(shape=input_img_size, name=name + "_img_input")
    x = ReflectionPadding2D(padding=(3, 3))(img_input)
    x = layers.Conv2D(filters, (7, 7), kernel_initializer=kernel_init, use_bias=False)(x)
    x = keras.layers.GroupNormalization(groups=1, gamma_initializer=gamma_initializer)(x)
    x = layers.Activation("relu")(x)
    for _ in range(num_downsampling_blocks):
        filters *= 2
        x = downsample(x, filters=filters, activation=layers.Activation("relu"))
    for _ in range(num_residual_blocks):
        x = residual_block(x, activation=layers.Activation("relu"))
    for _ in range(num_upsample_blocks):
        filters //= 2
        x = upsample(x, filters, activation=layers.Activation("relu"))
    x = ReflectionPadding2D(padding=(3, 3))(x)
    x = layers.Conv2D(3, (7, 7), padding="valid")(x)
    x = layers.Activation("tanh")(x)
    return keras.models.Model(img_input, x, name=name)


def get_discriminator(filters=8, kernel_initializer=kernel_init, num_downsampling=2, name=None):
    img_input = layers.Input(shape=input_img_size, name=name + "_img_input")
    x = layers.Conv2D(filters, (4, 4), strides=(2, 2), padding="same", kernel_initializer=kernel_initializer)(
        img_input)
    x = layers.LeakyReLU(0.2)(x)
    num_filters = filters
    for num_downsample_block in range(num_downsampling):
        num_filters *= 2
        if num_downsample_block < 1:
            x = downsample(x, filters=num_filters, activation=layers.LeakyReLU(0.2), kernel_size=(4, 4),
                           strides=(2, 2))
        else:
            x = downsample(x, filters=num_filters, activation=layers.LeakyReLU(0.2), kernel_size=(4, 4),
                           strides=(1, 1))
    x = layers.Conv2D(1, (4, 4), strides=(1, 1), padding="same", kernel_initializer=kernel_initializer)(x)
    return keras.models.Model(inputs=img_input, outputs=x, name=name)


gen_G = get_resnet_generator(name="generator_G")
gen_F = get_resnet_generator(name="generator_F")
disc_X = get_discriminator(name="discriminator_X")
disc_Y = get_discriminator(name="discriminator_Y")


class CycleGan(keras.Model):
    def __init__(self, generator_G, generator_F, discriminator_X, discriminator_Y, lambda_cycle=10.0,
                 lambda_identity=0.5):
        super().__init__()
        self.gen_G = generator_G
        self.gen_F = generator_F
        self.disc_X = discriminator_X
        self.disc_Y = discriminator_Y
        self.lambda_cycle = lambda_cycle
        self.lambda_identity = lambda_identity

    def call(self, inputs):
        return (self.disc_X(inputs), self.disc_Y(inputs), self.gen_G(inputs), self.gen_F(inputs))

    def compile(self, gen_G_optimizer, gen_F_optimizer, disc_X_optimizer, disc_Y_optimizer, gen_loss_fn,
                disc_loss_fn):
        super().compile()
        self.gen_G_optimizer = gen_G_optimizer
        self.gen_F_optimizer = gen_F_optimizer
        self.disc_X_optimizer = disc_X_optimizer
        self.disc_Y_optimizer = disc_Y_optimizer
        self.generator_loss_fn = gen_loss_fn
        self.discriminator_loss_fn = disc_loss_fn
        self.cycle_loss_fn = keras.losses.MeanAbsoluteError()
        self.identity_loss_fn = keras.losses.MeanAbsoluteError()

    def train_step(self, batch_data):
        real_x, real_y = batch_data
        with tf.GradientTape(persistent=True) as tape:
            fake_y = self.gen_G(real_x, training=True)
            fake_x = self.gen_F(real_y, training=True)
            cycled_x = self.gen_F(fake_y, training=True)
            cycled_y = self.gen_G(fake_x, training=True)
            same_x = self.gen_F(real_x, training=True)
            same_y = self.gen_G(real_y, training=True)
            disc_real_x = self.disc_X(real_x, training=True)
            disc_fake_x = self.disc_X(fake_x, training=True)
            disc_real_y = self.disc_Y(real_y, training=True)
            disc_fake_y = self.disc_Y(fake_y, training=True)
            gen_G_loss = self.generator_loss_fn(disc_fake_y)
            gen_F_loss = self.generator_loss_fn(disc_fake_x)
            cycle_loss_G = self.cycle_loss_fn(real_y, cycled_y) * self.lambda_cycle
            cycle_loss_F = self.cycle_loss_fn(real_x, cycled_x) * self.lambda_cycle
            id_loss_G = self.identity_loss_fn(real_y, same_y) * self.lambda_cycle * self.lambda_identity
            id_loss_F = self.identity_loss_fn(real_x, same_x) * self.lambda_cycle * self.lambda_identity
            total_loss_G = gen_G_loss + cycle_loss_G + id_loss_G
            total_loss_F = gen_F_loss + cycle_loss_F + id_loss_F
            disc_X_loss = self.discriminator_loss_fn(disc_real_x, disc_fake_x)
            disc_Y_loss = self.discriminator_loss_fn(disc_real_y, disc_fake_y)
        grads_G = tape.gradient(total_loss_G, self.gen_G.trainable_variables)
        grads_F = tape.gradient(total_loss_F, self.gen_F.trainable_variables)
        disc_X_grads = tape.gradient(disc_X_loss, self.disc_X.trainable_variables)
        disc_Y_grads = tape.gradient(disc_Y_loss, self.disc_Y.trainable_variables)
        self.gen_G_optimizer.apply_gradients(zip(grads_G, self.gen_G.trainable_variables))
        self.gen_F_optimizer.apply_gradients(zip(grads_F, self.gen_F.trainable_variables))
        self.disc_X_optimizer.apply_gradients(zip(disc_X_grads, self.disc_X.trainable_variables))
        self.disc_Y_optimizer.apply_gradients(zip(disc_Y_grads, self.disc_Y.trainable_variables))
        return {"G_loss": total_loss_G, "F_loss": total_loss_F, "D_X_loss": disc_X_loss, "D_Y_loss": disc_Y_loss}


class GANMonitor(keras.callbacks.Callback):
    def __init__(self, num_img=2):
        self.num_img = num_img

    def on_epoch_end(self, epoch, logs=None):
        _, ax = plt.subplots(self.num_img, 2, figsize=(6, 6))
        for i, img in enumerate(test_horses.take(self.num_img)):
            prediction = self.model.gen_G(img)[0].numpy()
            prediction = (prediction * 127.5 + 127.5).astype(np.uint8)
            img = (img[0] * 127.5 + 127.5).numpy().astype(np.uint8)
            ax[i, 0].imshow(img)
            ax[i, 1].imshow(prediction)
            prediction = keras.utils.array_to_img(prediction)
            prediction.save("generated_img_{i}_{epoch}.png".format(i=i, epoch=epoch + 1))
        plt.close()


adv_loss_fn = keras.losses.MeanSquaredError()


def generator_loss_fn(fake):
    fake_loss = adv_loss_fn(ops.ones_like(fake), fake)
    return fake_loss


def discriminator_loss_fn(real, fake):
    real_loss = adv_loss_fn(ops.ones_like(real), real)
    fake_loss = adv_loss_fn(ops.zeros_like(fake), fake)
    return (real_loss + fake_loss) * 0.5
"""

# keras.io's training cell, without its weights-only ModelCheckpoint: on Keras 3 that fails in one process too (its
# path lacks `.weights.h5`, and with it "You are saving a model that has not yet been built": the CycleGan itself is
# never called).
FIT = """
cycle_gan_model = CycleGan(generator_G=gen_G, generator_F=gen_F, discriminator_X=disc_X, discriminator_Y=disc_Y)
cycle_gan_model.compile(
    gen_G_optimizer=keras.optimizers.Adam(learning_rate=2e-4, beta_1=0.5),
    gen_F_optimizer=keras.optimizers.Adam(learning_rate=2e-4, beta_1=0.5),
    disc_X_optimizer=keras.optimizers.Adam(learning_rate=2e-4, beta_1=0.5),
    disc_Y_optimizer=keras.optimizers.Adam(learning_rate=2e-4, beta_1=0.5),
    gen_loss_fn=generator_loss_fn,
    disc_loss_fn=discriminator_loss_fn,
)
plotter = GANMonitor()
history = cycle_gan_model.fit(tf.data.Dataset.zip((train_horses, train_zebras)), epochs=2, callbacks=[plotter])
"""

# The example's last cell: translate test horses with the trained gen_G.
CHECK = """
predictions = [cycle_gan_model.gen_G(img, training=False)[0].numpy() for img in test_horses.take(1)]
direct = gen_G(next(iter(test_horses)), training=False)[0].numpy()
steps = int(cycle_gan_model.gen_G_optimizer.iterations.numpy())
g_loss = history.history["G_loss"][-1]
"""


def test_cyclegan_built_compiled_and_fit_in_one_cell_over_the_notebook_s_four_models(shell, tmp_path, monkeypatch):
    """The CycleGan the cell made comes back over the notebook's own gen_G, gen_F, disc_X and disc_Y, each trained
    and each optimizer with its steps; GANMonitor's images are written once, by rank 0, and gen_G translates with
    the training in a later cell."""
    for run in ("one", "two"):
        os.makedirs(tmp_path / run)
    monkeypatch.chdir(tmp_path / "one")
    _cell(shell, SETUP)
    _cell(shell, FIT)
    one = _cell(shell, CHECK)
    one_loss, one_files = one["g_loss"], sorted(os.listdir("."))
    assert int(one["steps"]) == 2 * 32 // 4
    monkeypatch.chdir(tmp_path / "two")
    ns = _cell(shell, SETUP)
    models = {name: ns[name] for name in ("gen_G", "gen_F", "disc_X", "disc_Y")}
    before = {name: [w.numpy().copy() for w in model.trainable_weights] for name, model in models.items()}
    ns = _cell(shell, FIT, distribute=True)
    gan = ns["cycle_gan_model"]
    assert gan.gen_G is models["gen_G"] and gan.gen_F is models["gen_F"]
    assert gan.disc_X is models["disc_X"] and gan.disc_Y is models["disc_Y"]
    for name, model in models.items():
        moved = [not np.allclose(w.numpy(), b) for w, b in zip(model.trainable_weights, before[name])]
        assert sum(moved) > len(moved) // 2, f"{name} did not train: {moved}"
    # 32 pairs in batches of 4, 2 ranks: 4 steps a rank an epoch; every optimizer took each.
    for attribute in ("gen_G_optimizer", "gen_F_optimizer", "disc_X_optimizer", "disc_Y_optimizer"):
        assert int(getattr(gan, attribute).iterations.numpy()) == 2 * 32 // 4 // 2, attribute
    # test_horses is one batch, so `take(2)` draws once: one image an epoch, written once, by rank 0.
    assert sorted(os.listdir(".")) == one_files == ["generated_img_0_1.png", "generated_img_0_2.png"]
    assert ns["plotter"].model is gan  # fit's model, the notebook's object
    ns = _cell(shell, CHECK)
    assert np.allclose(ns["predictions"][0], ns["direct"], atol=1e-5)  # the notebook's gen_G is the model's
    assert ns["direct"].shape == (32, 32, 3) and np.all(np.abs(ns["direct"]) <= 1.0)
    close(ns["g_loss"], one_loss, 2, "generator G's total loss after 2 epochs")
