"""keras.io examples, sweep 9a: copied as keras.io writes them (Keras 3 pages), set up in plain cells, `%%distribute -n
2` on the training cell.

"English-to-Spanish translation with a sequence-to-sequence Transformer" (`TransformerEncoder`, `PositionalEmbedding`
with `compute_mask`, a `TransformerDecoder` taking `[x, encoder_outputs]` with `supports_masking` and `get_config`,
`encoder` / `decoder` sub-models and the functional `transformer` over their layers, a `format_dataset` map over two
adapted `TextVectorization` layers made in its own cell, then greedy `decode_sequence` in a later cell), "Conditional
GAN" (a `ConditionalGAN` made, compiled with two optimizers and fit in the distributed cell over the notebook's
generator and discriminator, then the interpolation cell with `cond_gan.generator`), "Trainer pattern" (two
`MyTrainer`s over one notebook model, each compiled and fit in its own cell), "Customizing the convolution operation"
(Conv2D subclasses overriding `convolution_op` and `call`), "Memory-efficient embeddings" (`QREmbedding` and
`MDEmbedding` layers without **kwargs in a functional model made and fit in the distributed cell over CSV files) and
"Supervised Contrastive Learning" (a `SupervisedContrastiveLoss`, an encoder pretrained through a projection head,
then a classifier over the frozen encoder made in a second distributed cell).
Each runs in one process and on two ranks; the later plain cells must work after both, with comparable results.
Data is synthetic, in the examples' shapes, and the models smaller. Where keras.io's Keras 3 code fails on Keras 3.15
in one process too, the cell says so at the line changed: the Transformer's `ops.tile` over a tensor of repeats and its
`decoder` model over an input it does not use, SupCon's `npairs_loss(ops.squeeze(labels), ...)`.
"""

import numpy as np
import pytest
from notebook_cells import cell as _cell
from notebook_cells import close

from jupyter_dl.wire import payload

# ------------------------------------------------------------------------------------ English-to-Spanish Transformer

SEQ2SEQ_DATA = """
import pathlib
import random
import string
import re
import numpy as np

import tensorflow.data as tf_data
import tensorflow.strings as tf_strings

import keras
from keras import layers
from keras import ops
from keras.layers import TextVectorization

keras.utils.set_random_seed(0)

# spa-eng/spa.txt, in its shape: "english<TAB>spanish" lines. Here each English word has one Spanish word, in order.
rng = np.random.default_rng(0)
english = ["i", "you", "we", "they", "see", "like", "want", "the", "a", "red", "big", "cat", "dog", "house", "book"]
spanish = ["yo", "tu", "nosotros", "ellos", "veo", "gusta", "quiero", "el", "un", "rojo", "grande", "gato", "perro",
           "casa", "libro"]
text_pairs = []
for _ in range(640):
    words = rng.integers(0, len(english), rng.integers(3, 7))
    eng = " ".join(english[w] for w in words).capitalize() + "."
    spa = " ".join(spanish[w] for w in words).capitalize() + "."
    spa = "[start] " + spa + " [end]"
    text_pairs.append((eng, spa))

random.seed(0)
random.shuffle(text_pairs)
num_val_samples = int(0.10 * len(text_pairs))
num_train_samples = len(text_pairs) - 2 * num_val_samples
train_pairs = text_pairs[:num_train_samples]
val_pairs = text_pairs[num_train_samples : num_train_samples + num_val_samples]
test_pairs = text_pairs[num_train_samples + num_val_samples :]

strip_chars = string.punctuation + "¿"
strip_chars = strip_chars.replace("[", "")
strip_chars = strip_chars.replace("]", "")

vocab_size = 64
sequence_length = 10
batch_size = 64


def custom_standardization(input_string):
    lowercase = tf_strings.lower(input_string)
    return tf_strings.regex_replace(lowercase, "[%s]" % re.escape(strip_chars), "")


eng_vectorization = TextVectorization(
    max_tokens=vocab_size,
    output_mode="int",
    output_sequence_length=sequence_length,
)
spa_vectorization = TextVectorization(
    max_tokens=vocab_size,
    output_mode="int",
    output_sequence_length=sequence_length + 1,
    standardize=custom_standardization,
)
train_eng_texts = [pair[0] for pair in train_pairs]
train_spa_texts = [pair[1] for pair in train_pairs]
eng_vectorization.adapt(train_eng_texts)
spa_vectorization.adapt(train_spa_texts)
"""

SEQ2SEQ_PIPELINE = """
def format_dataset(eng, spa):
    eng = eng_vectorization(eng)
    spa = spa_vectorization(spa)
    return (
        {
            "encoder_inputs": eng,
            "decoder_inputs": spa[:, :-1],
        },
        spa[:, 1:],
    )


def make_dataset(pairs):
    eng_texts, spa_texts = zip(*pairs)
    eng_texts = list(eng_texts)
    spa_texts = list(spa_texts)
    dataset = tf_data.Dataset.from_tensor_slices((eng_texts, spa_texts))
    dataset = dataset.batch(batch_size)
    dataset = dataset.map(format_dataset)
    return dataset.cache().shuffle(2048).prefetch(16)


train_ds = make_dataset(train_pairs)
val_ds = make_dataset(val_pairs)

for inputs, targets in train_ds.take(1):
    print(f'inputs["encoder_inputs"].shape: {inputs["encoder_inputs"].shape}')
    print(f'inputs["decoder_inputs"].shape: {inputs["decoder_inputs"].shape}')
    print(f"targets.shape: {targets.shape}")
"""

SEQ2SEQ_MODEL = """
class TransformerEncoder(layers.Layer):
    def __init__(self, embed_dim, dense_dim, num_heads, **kwargs):
        super().__init__(**kwargs)
        self.embed_dim = embed_dim
        self.dense_dim = dense_dim
        self.num_heads = num_heads
        self.attention = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.dense_proj = keras.Sequential(
            [
                layers.Dense(dense_dim, activation="relu"),
                layers.Dense(embed_dim),
            ]
        )
        self.layernorm_1 = layers.LayerNormalization()
        self.layernorm_2 = layers.LayerNormalization()
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is not None:
            padding_mask = ops.cast(mask[:, None, :], dtype="int32")
        else:
            padding_mask = None

        attention_output = self.attention(query=inputs, value=inputs, key=inputs, attention_mask=padding_mask)
        proj_input = self.layernorm_1(inputs + attention_output)
        proj_output = self.dense_proj(proj_input)
        return self.layernorm_2(proj_input + proj_output)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embed_dim": self.embed_dim,
                "dense_dim": self.dense_dim,
                "num_heads": self.num_heads,
            }
        )
        return config


class PositionalEmbedding(layers.Layer):
    def __init__(self, sequence_length, vocab_size, embed_dim, **kwargs):
        super().__init__(**kwargs)
        self.token_embeddings = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.position_embeddings = layers.Embedding(input_dim=sequence_length, output_dim=embed_dim)
        self.sequence_length = sequence_length
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim

    def call(self, inputs):
        length = ops.shape(inputs)[-1]
        positions = ops.arange(0, length, 1)
        embedded_tokens = self.token_embeddings(inputs)
        embedded_positions = self.position_embeddings(positions)
        return embedded_tokens + embedded_positions

    def compute_mask(self, inputs, mask=None):
        return ops.not_equal(inputs, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "vocab_size": self.vocab_size,
                "embed_dim": self.embed_dim,
            }
        )
        return config


class TransformerDecoder(layers.Layer):
    def __init__(self, embed_dim, latent_dim, num_heads, **kwargs):
        super().__init__(**kwargs)
        self.embed_dim = embed_dim
        self.latent_dim = latent_dim
        self.num_heads = num_heads
        self.attention_1 = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.attention_2 = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.dense_proj = keras.Sequential(
            [
                layers.Dense(latent_dim, activation="relu"),
                layers.Dense(embed_dim),
            ]
        )
        self.layernorm_1 = layers.LayerNormalization()
        self.layernorm_2 = layers.LayerNormalization()
        self.layernorm_3 = layers.LayerNormalization()
        self.supports_masking = True

    def call(self, inputs, mask=None):
        inputs, encoder_outputs = inputs
        causal_mask = self.get_causal_attention_mask(inputs)

        if mask is None:
            inputs_padding_mask, encoder_outputs_padding_mask = None, None
        else:
            inputs_padding_mask, encoder_outputs_padding_mask = mask

        attention_output_1 = self.attention_1(
            query=inputs,
            value=inputs,
            key=inputs,
            attention_mask=causal_mask,
            query_mask=inputs_padding_mask,
        )
        out_1 = self.layernorm_1(inputs + attention_output_1)

        attention_output_2 = self.attention_2(
            query=out_1,
            value=encoder_outputs,
            key=encoder_outputs,
            query_mask=inputs_padding_mask,
            key_mask=encoder_outputs_padding_mask,
        )
        out_2 = self.layernorm_2(out_1 + attention_output_2)

        proj_output = self.dense_proj(out_2)
        return self.layernorm_3(out_2 + proj_output)

    def get_causal_attention_mask(self, inputs):
        input_shape = ops.shape(inputs)
        batch_size, sequence_length = input_shape[0], input_shape[1]
        i = ops.arange(sequence_length)[:, None]
        j = ops.arange(sequence_length)
        mask = ops.cast(i >= j, dtype="int32")
        mask = ops.reshape(mask, (1, input_shape[1], input_shape[1]))
        # keras.io tiles by `mult = ops.concatenate([ops.expand_dims(batch_size, -1), ops.convert_to_tensor([1, 1])])`:
        # Keras 3.15's ops.tile iterates over its repeats, which a symbolic tensor refuses, in one process too.
        return ops.tile(mask, [batch_size, 1, 1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "embed_dim": self.embed_dim,
                "latent_dim": self.latent_dim,
                "num_heads": self.num_heads,
            }
        )
        return config


embed_dim = 32
latent_dim = 64
num_heads = 2

encoder_inputs = keras.Input(shape=(None,), dtype="int64", name="encoder_inputs")
x = PositionalEmbedding(sequence_length, vocab_size, embed_dim)(encoder_inputs)
encoder_outputs = TransformerEncoder(embed_dim, latent_dim, num_heads)(x)
encoder = keras.Model(encoder_inputs, encoder_outputs)

decoder_inputs = keras.Input(shape=(None,), dtype="int64", name="decoder_inputs")
encoded_seq_inputs = keras.Input(shape=(None, embed_dim), name="decoder_state_inputs")
x = PositionalEmbedding(sequence_length, vocab_size, embed_dim)(decoder_inputs)
# keras.io's Keras 3 page calls the decoder on `[x, encoder_outputs]` and builds `decoder` from `encoded_seq_inputs`:
# Keras 3.15 refuses that model in one process too ("Output with path `` is not connected to `inputs`"). The decoder
# takes `encoded_seq_inputs`, and the transformer calls it, as the page's Keras 2 version did.
x = TransformerDecoder(embed_dim, latent_dim, num_heads)([x, encoded_seq_inputs])
x = layers.Dropout(0.5)(x)
decoder_outputs = layers.Dense(vocab_size, activation="softmax")(x)
decoder = keras.Model([decoder_inputs, encoded_seq_inputs], decoder_outputs)

decoder_outputs = decoder([decoder_inputs, encoder_outputs])
transformer = keras.Model(
    {"encoder_inputs": encoder_inputs, "decoder_inputs": decoder_inputs},
    decoder_outputs,
    name="transformer",
)
"""

SEQ2SEQ_FIT = """
epochs = 6  # This should be at least 30 for convergence

transformer.summary()
transformer.compile(
    "rmsprop",
    loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=0),
    metrics=["accuracy"],
)
transformer.fit(train_ds, epochs=epochs, validation_data=val_ds, verbose=0)
"""

SEQ2SEQ_DECODE = """
spa_vocab = spa_vectorization.get_vocabulary()
spa_index_lookup = dict(zip(range(len(spa_vocab)), spa_vocab))
max_decoded_sentence_length = 10


def decode_sequence(input_sentence):
    tokenized_input_sentence = eng_vectorization([input_sentence])
    decoded_sentence = "[start]"
    for i in range(max_decoded_sentence_length):
        tokenized_target_sentence = spa_vectorization([decoded_sentence])[:, :-1]
        predictions = transformer(
            {
                "encoder_inputs": tokenized_input_sentence,
                "decoder_inputs": tokenized_target_sentence,
            }
        )

        # ops.argmax(predictions[0, i, :]) is not a concrete value for jax here
        sampled_token_index = ops.convert_to_numpy(ops.argmax(predictions[0, i, :])).item(0)
        sampled_token = spa_index_lookup[sampled_token_index]
        decoded_sentence += " " + sampled_token

        if sampled_token == "[end]":
            break
    return decoded_sentence


test_eng_texts = [pair[0] for pair in test_pairs]
translations = []
for input_sentence, target in test_pairs[:12]:
    translated = decode_sequence(input_sentence)
    translations.append((translated, custom_standardization(target).numpy().decode()))
words_right = np.mean(
    [a == b for translated, target in translations for a, b in zip(translated.split()[1:], target.split()[1:])]
)
val_loss, val_accuracy = transformer.evaluate(val_ds, verbose=0)
history = transformer.history.history
"""


def _translate(shell, distribute):
    _cell(shell, SEQ2SEQ_DATA)
    ns = _cell(shell, SEQ2SEQ_PIPELINE)
    train_ds, vectorizers = ns["train_ds"], (ns["eng_vectorization"], ns["spa_vectorization"])
    ns = _cell(shell, SEQ2SEQ_MODEL)
    transformer, encoder, decoder = ns["transformer"], ns["encoder"], ns["decoder"]
    # An attention key's bias adds the same to every score of a query: softmax cancels it, its gradient is 0.
    trained = [w for w in transformer.trainable_weights if not w.path.endswith("key/bias")]
    weights = [w.numpy().copy() for w in trained]
    ns = _cell(shell, SEQ2SEQ_FIT, distribute=distribute)
    assert ns["transformer"] is transformer and ns["encoder"] is encoder and ns["decoder"] is decoder
    assert ns["train_ds"] is train_ds and (ns["eng_vectorization"], ns["spa_vectorization"]) == vectorizers
    # The encoder and decoder sub-models share their layers with the transformer: trained with it.
    assert encoder.layers[-1] in transformer.layers and decoder is transformer.layers[-1]
    assert all(not np.allclose(w.numpy(), u) for w, u in zip(trained, weights))
    ns = _cell(shell, SEQ2SEQ_DECODE)
    assert all(t.startswith("[start]") for t, _ in ns["translations"]), ns["translations"]
    run = {name: ns[name] for name in ("words_right", "val_loss", "val_accuracy", "history")}
    run["steps"] = int(transformer.optimizer.iterations.numpy())
    return run


def test_english_to_spanish_transformer_then_decode_sequence(shell):
    """English-to-Spanish: the notebook's transformer (its encoder and decoder sub-models sharing its layers) comes back
    trained on the `format_dataset` pipeline over the notebook's adapted vectorizers; `decode_sequence` then
    translates greedily with it, as well after two ranks as after one process."""
    one = _translate(shell, distribute=False)
    two = _translate(shell, distribute=True)
    # 512 training pairs in batches of 64: 8 steps an epoch, 4 a rank on two ranks.
    assert one["steps"] == 6 * 8 and two["steps"] == 6 * 4, (one["steps"], two["steps"])
    assert one["val_accuracy"] > 0.5, one
    close(two["history"]["loss"][-1], one["history"]["loss"][-1], 2.0, "training loss")
    close(two["val_accuracy"], one["val_accuracy"], 1.6, "validation accuracy evaluated afterwards")
    assert two["words_right"] > one["words_right"] / 2, (two["words_right"], one["words_right"])


# ------------------------------------------------------------------------------------------------- Conditional GAN

CGAN = """
import keras

from keras import layers
from keras import ops
import tensorflow as tf
import numpy as np

keras.utils.set_random_seed(0)

batch_size = 64
num_channels = 1
num_classes = 10
image_size = 28
latent_dim = 16

# MNIST's shapes (x_train and x_test joined): 28x28 grey digits and their labels. Here class c is a bright bar in
# row band c, at a random column.
rng = np.random.default_rng(0)
all_labels = rng.integers(0, num_classes, 512)
all_digits = np.zeros((512, 28, 28), "uint8")
for i, (label, col) in enumerate(zip(all_labels, rng.integers(0, 20, 512))):
    all_digits[i, 2 + 2 * label : 5 + 2 * label, col : col + 8] = 255

# Scale the pixel values to [0, 1] range, add a channel dimension to
# the images, and one-hot encode the labels.
all_digits = all_digits.astype("float32") / 255.0
all_digits = np.reshape(all_digits, (-1, 28, 28, 1))
all_labels = keras.utils.to_categorical(all_labels, 10)

# Create tf.data.Dataset.
dataset = tf.data.Dataset.from_tensor_slices((all_digits, all_labels))
dataset = dataset.shuffle(buffer_size=1024).batch(batch_size)

print(f"Shape of training images: {all_digits.shape}")
print(f"Shape of training labels: {all_labels.shape}")

generator_in_channels = latent_dim + num_classes
discriminator_in_channels = num_channels + num_classes
print(generator_in_channels, discriminator_in_channels)

# Create the discriminator.
discriminator = keras.Sequential(
    [
        keras.layers.InputLayer((28, 28, discriminator_in_channels)),
        layers.Conv2D(16, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(32, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.GlobalMaxPooling2D(),
        layers.Dense(1),
    ],
    name="discriminator",
)

# Create the generator.
generator = keras.Sequential(
    [
        keras.layers.InputLayer((generator_in_channels,)),
        # We want to generate 128 + num_classes coefficients to reshape into a
        # 7x7x(128 + num_classes) map.
        layers.Dense(7 * 7 * generator_in_channels),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Reshape((7, 7, generator_in_channels)),
        layers.Conv2DTranspose(16, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2DTranspose(16, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
    ],
    name="generator",
)


class ConditionalGAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.gen_loss_tracker = keras.metrics.Mean(name="generator_loss")
        self.disc_loss_tracker = keras.metrics.Mean(name="discriminator_loss")

    @property
    def metrics(self):
        return [self.gen_loss_tracker, self.disc_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, data):
        # Unpack the data.
        real_images, one_hot_labels = data

        # Add dummy dimensions to the labels so that they can be concatenated with
        # the images. This is for the discriminator.
        image_one_hot_labels = one_hot_labels[:, :, None, None]
        image_one_hot_labels = ops.repeat(image_one_hot_labels, repeats=[image_size * image_size])
        image_one_hot_labels = ops.reshape(image_one_hot_labels, (-1, image_size, image_size, num_classes))

        # Sample random points in the latent space and concatenate the labels.
        # This is for the generator.
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        random_vector_labels = ops.concatenate([random_latent_vectors, one_hot_labels], axis=1)

        # Decode the noise (guided by labels) to fake images.
        generated_images = self.generator(random_vector_labels)

        # Combine them with real images. Note that we are concatenating the labels
        # with these images here.
        fake_image_and_labels = ops.concatenate([generated_images, image_one_hot_labels], -1)
        real_image_and_labels = ops.concatenate([real_images, image_one_hot_labels], -1)
        combined_images = ops.concatenate([fake_image_and_labels, real_image_and_labels], axis=0)

        # Assemble labels discriminating real from fake images.
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)

        # Train the discriminator.
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))

        # Sample random points in the latent space.
        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        random_vector_labels = ops.concatenate([random_latent_vectors, one_hot_labels], axis=1)

        # Assemble labels that say "all real images".
        misleading_labels = ops.zeros((batch_size, 1))

        # Train the generator (note that we should *not* update the weights
        # of the discriminator)!
        with tf.GradientTape() as tape:
            fake_images = self.generator(random_vector_labels)
            fake_image_and_labels = ops.concatenate([fake_images, image_one_hot_labels], -1)
            predictions = self.discriminator(fake_image_and_labels)
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))

        # Monitor loss.
        self.gen_loss_tracker.update_state(g_loss)
        self.disc_loss_tracker.update_state(d_loss)
        return {
            "g_loss": self.gen_loss_tracker.result(),
            "d_loss": self.disc_loss_tracker.result(),
        }
"""

CGAN_FIT = """
cond_gan = ConditionalGAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
cond_gan.compile(
    d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
)

cond_gan.fit(dataset, epochs=4, verbose=0)
"""

CGAN_INTERPOLATE = """
# We first extract the trained generator from our Conditional GAN.
trained_gen = cond_gan.generator

# Choose the number of intermediate images that would be generated in
# between the interpolation + 2 (start and last images).
num_interpolation = 9  # @param {type:"integer"}

# Sample noise for the interpolation.
interpolation_noise = keras.random.normal(shape=(1, latent_dim))
interpolation_noise = ops.repeat(interpolation_noise, repeats=num_interpolation)
interpolation_noise = ops.reshape(interpolation_noise, (num_interpolation, latent_dim))


def interpolate_class(first_number, second_number):
    # Convert the start and end labels to one-hot encoded vectors.
    first_label = keras.utils.to_categorical([first_number], num_classes)
    second_label = keras.utils.to_categorical([second_number], num_classes)
    first_label = ops.cast(first_label, "float32")
    second_label = ops.cast(second_label, "float32")

    # Calculate the interpolation vector between the two labels.
    percent_second_label = ops.linspace(0, 1, num_interpolation)[:, None]
    percent_second_label = ops.cast(percent_second_label, "float32")
    interpolation_labels = first_label * (1 - percent_second_label) + second_label * percent_second_label

    # Combine the noise and the labels and run inference with the generator.
    noise_and_labels = ops.concatenate([interpolation_noise, interpolation_labels], 1)
    fake = trained_gen.predict(noise_and_labels, verbose=0)
    return fake


start_class = 2  # @param {type:"slider", min:0, max:9, step:1}
end_class = 6  # @param {type:"slider", min:0, max:9, step:1}

fake_images = interpolate_class(start_class, end_class)

fake_images *= 255.0
converted_images = fake_images.astype(np.uint8)
converted_images = ops.image.resize(converted_images, (96, 96)).numpy().astype(np.uint8)
# imageio.mimsave("animation.gif", converted_images[:, :, :, 0], fps=1): no imageio here.
history = cond_gan.history.history
"""


def _conditional_gan(shell, distribute):
    ns = _cell(shell, CGAN)
    generator, discriminator = ns["generator"], ns["discriminator"]
    g_weights = [w.numpy().copy() for w in generator.trainable_weights]
    d_weights = [w.numpy().copy() for w in discriminator.trainable_weights]
    ns = _cell(shell, CGAN_FIT, distribute=distribute)
    cond_gan = ns["cond_gan"]
    assert ns["generator"] is generator and ns["discriminator"] is discriminator
    assert cond_gan.generator is generator and cond_gan.discriminator is discriminator
    assert isinstance(cond_gan, ns["ConditionalGAN"]) and cond_gan.metrics == [
        cond_gan.gen_loss_tracker,
        cond_gan.disc_loss_tracker,
    ]
    assert all(not np.allclose(w.numpy(), u) for w, u in zip(generator.trainable_weights, g_weights))
    assert all(not np.allclose(w.numpy(), u) for w, u in zip(discriminator.trainable_weights, d_weights))
    assert cond_gan.g_optimizer.iterations.numpy() == cond_gan.d_optimizer.iterations.numpy()
    ns = _cell(shell, CGAN_INTERPOLATE)
    assert ns["trained_gen"] is generator and ns["converted_images"].shape == (9, 96, 96, 1)
    assert np.all(np.isfinite(ns["fake_images"]))
    return {"steps": int(cond_gan.g_optimizer.iterations.numpy()), "history": ns["history"]}


def test_conditional_gan_made_in_the_cell_over_the_notebook_generator_then_interpolation(shell):
    """Conditional GAN: `cond_gan`, made, compiled with two Adams and fit in the distributed cell, comes back over the
    notebook's generator and discriminator, both trained; the interpolation cell generates with
    `cond_gan.generator`, which is the notebook's `generator`."""
    one = _conditional_gan(shell, distribute=False)
    two = _conditional_gan(shell, distribute=True)
    # 512 images in batches of 64: 8 steps an epoch, 4 a rank on two ranks.
    assert one["steps"] == 4 * 8 and two["steps"] == 4 * 4, (one["steps"], two["steps"])
    for name in ("g_loss", "d_loss"):
        close(two["history"][name][-1], one["history"][name][-1], 1.6, name)
    # Trained on once more, from the notebook's cond_gan now: the same GAN and optimizers come back, a step further.
    ns = shell.user_ns
    cond_gan, generator, g_optimizer, d_optimizer = (
        ns["cond_gan"],
        ns["generator"],
        ns["cond_gan"].g_optimizer,
        ns["cond_gan"].d_optimizer,
    )
    ns = _cell(shell, "cond_gan.fit(dataset, epochs=1, verbose=0)", distribute=True)
    assert ns["cond_gan"] is cond_gan and cond_gan.generator is generator and ns["trained_gen"] is generator
    assert cond_gan.g_optimizer is g_optimizer and cond_gan.d_optimizer is d_optimizer
    assert g_optimizer.iterations.numpy() == d_optimizer.iterations.numpy() == 5 * 4


# ------------------------------------------------------------------------------------------------- Trainer pattern

TRAINER = """
import tensorflow as tf
import keras
import numpy as np

keras.utils.set_random_seed(0)

# MNIST's shapes: 28x28 digits 0-255 and their labels. Here class c is a bright bar in row band c, at a random column.
rng = np.random.default_rng(0)


def digits(n):
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 200, (n, 28, 28)).astype("uint8")
    for i, (label, col) in enumerate(zip(labels, rng.integers(0, 20, n))):
        images[i, 2 + 2 * label : 5 + 2 * label, col : col + 8] = 255
    return images, labels


# Load MNIST dataset and standardize the data
(x_train, y_train), (x_test, y_test) = digits(1024), digits(256)
x_train, x_test = x_train / 255.0, x_test / 255.0


class MyTrainer(keras.Model):
    def __init__(self, model):
        super().__init__()
        self.model = model
        # Create loss and metrics here.
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy()
        self.accuracy_metric = keras.metrics.SparseCategoricalAccuracy()

    @property
    def metrics(self):
        # List metrics here.
        return [self.accuracy_metric]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self.model(x, training=True)  # Forward pass
            # Compute loss value
            loss = self.loss_fn(y, y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))

        # Update metrics
        for metric in self.metrics:
            metric.update_state(y, y_pred)

        # Return a dict mapping metric names to current value.
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data

        # Inference step
        y_pred = self.model(x, training=False)

        # Update metrics
        for metric in self.metrics:
            metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def call(self, x):
        # Equivalent to `call()` of the wrapped keras.Model
        x = self.model(x)
        return x


model_a = keras.models.Sequential(
    [
        keras.layers.Flatten(input_shape=(28, 28)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(10, activation="softmax"),
    ]
)

trainer_1 = MyTrainer(model_a)
trainer_2 = MyTrainer(model_a)
"""

TRAINER_1_FIT = """
trainer_1.compile(optimizer=keras.optimizers.SGD())
trainer_1.fit(x_train, y_train, epochs=3, batch_size=64, validation_data=(x_test, y_test), verbose=0)
"""

TRAINER_2_FIT = """
trainer_2.compile(optimizer=keras.optimizers.Adam())
trainer_2.fit(x_train, y_train, epochs=3, batch_size=64, validation_data=(x_test, y_test), verbose=0)
"""

TRAINER_CHECK = """
scores_1 = trainer_1.evaluate(x_test, y_test, verbose=0, return_dict=True)
scores_2 = trainer_2.evaluate(x_test, y_test, verbose=0, return_dict=True)
predicted = model_a.predict(x_test, verbose=0)
test_accuracy = float(np.mean(np.argmax(predicted, axis=1) == y_test))
"""


def _trainers(shell, distribute):
    ns = _cell(shell, TRAINER)
    model_a, trainer_1, trainer_2 = ns["model_a"], ns["trainer_1"], ns["trainer_2"]
    start = [w.numpy().copy() for w in model_a.weights]
    ns = _cell(shell, TRAINER_1_FIT, distribute=distribute)
    assert ns["trainer_1"] is trainer_1 and ns["trainer_2"] is trainer_2 and ns["model_a"] is model_a
    assert trainer_1.model is model_a and trainer_2.model is model_a
    after_1 = [w.numpy().copy() for w in model_a.weights]
    assert all(not np.allclose(w, u) for w, u in zip(after_1, start))
    first = trainer_1.history.history
    ns = _cell(shell, TRAINER_2_FIT, distribute=distribute)
    assert ns["trainer_2"] is trainer_2 and trainer_2.model is model_a and trainer_1.model is model_a
    assert all(not np.allclose(w.numpy(), u) for w, u in zip(model_a.weights, after_1))
    assert isinstance(trainer_1.optimizer, ns["keras"].optimizers.SGD)
    assert isinstance(trainer_2.optimizer, ns["keras"].optimizers.Adam)
    steps = (int(trainer_1.optimizer.iterations.numpy()), int(trainer_2.optimizer.iterations.numpy()))
    ns = _cell(shell, TRAINER_CHECK)
    # Both trainers hold the same model: they score the same on the test set.
    assert ns["scores_1"] == ns["scores_2"] and np.isclose(
        ns["scores_1"]["sparse_categorical_accuracy"], ns["test_accuracy"]
    )
    return {"steps": steps, "first": first, "second": trainer_2.history.history, "acc": ns["test_accuracy"]}


def test_trainer_pattern_two_trainers_over_one_notebook_model(shell):
    """Trainer pattern: two `MyTrainer`s wrap the notebook's model_a; each is compiled and fit in its own distributed
    cell (SGD, then Adam), and model_a comes back trained by both, the same object in both trainers."""
    one = _trainers(shell, distribute=False)
    two = _trainers(shell, distribute=True)
    # 1024 images in batches of 64: 16 steps an epoch, 8 a rank on two ranks.
    assert one["steps"] == (3 * 16, 3 * 16) and two["steps"] == (3 * 8, 3 * 8), (one["steps"], two["steps"])
    assert one["acc"] > 0.4, one  # above the 0.1 of guessing
    close(
        two["second"]["val_sparse_categorical_accuracy"][-1],
        one["second"]["val_sparse_categorical_accuracy"][-1],
        1.3,
        "validation accuracy after trainer_2",
    )
    close(two["acc"], one["acc"], 1.3, "test accuracy of model_a afterwards")


# ------------------------------------------------------------------------------------- Customizing the convolution

STANDARDIZED_CONV = """
import tensorflow as tf
import keras
from keras import layers
from keras import ops
import numpy as np

keras.utils.set_random_seed(0)


class StandardizedConv2DWithOverride(layers.Conv2D):
    def convolution_op(self, inputs, kernel):
        mean, var = ops.moments(kernel, axes=[0, 1, 2], keepdims=True)
        return ops.conv(
            inputs,
            (kernel - mean) / ops.sqrt(var + 1e-10),
            strides=list(self.strides),
            padding=self.padding.upper(),
            dilation_rate=self.dilation_rate,
        )


class StandardizedConv2DWithCall(layers.Conv2D):
    def call(self, inputs):
        mean, var = ops.moments(self.kernel, axes=[0, 1, 2], keepdims=True)
        result = ops.conv(
            inputs,
            (self.kernel - mean) / ops.sqrt(var + 1e-10),
            strides=list(self.strides),
            padding=self.padding.upper(),
            dilation_rate=self.dilation_rate,
        )
        if self.use_bias:
            result = result + self.bias
        return result


# Model / data parameters
num_classes = 10
input_shape = (28, 28, 1)

# MNIST's shapes. Here class c is a bright bar in row band c, at a random column, over noise.
rng = np.random.default_rng(0)


def digits(n):
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 120, (n, 28, 28)).astype("uint8")
    for i, (label, col) in enumerate(zip(labels, rng.integers(0, 20, n))):
        images[i, 2 + 2 * label : 5 + 2 * label, col : col + 8] = 255
    return images, labels


# the data, split between train and test sets
(x_train, y_train), (x_test, y_test) = digits(1152), digits(256)

# Scale images to the [0, 1] range
x_train = x_train.astype("float32") / 255
x_test = x_test.astype("float32") / 255
# Make sure images have shape (28, 28, 1)
x_train = np.expand_dims(x_train, -1)
x_test = np.expand_dims(x_test, -1)
print("x_train shape:", x_train.shape)
print(x_train.shape[0], "train samples")
print(x_test.shape[0], "test samples")

# convert class vectors to binary class matrices
y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

model = keras.Sequential(
    [
        keras.layers.InputLayer(input_shape=input_shape),
        StandardizedConv2DWithCall(8, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        StandardizedConv2DWithOverride(16, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)

model.summary()
"""

STANDARDIZED_CONV_FIT = """
batch_size = 64
epochs = 3

model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])

model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=1 / 9, verbose=0)
"""

STANDARDIZED_CONV_CHECK = """
score = model.evaluate(x_test, y_test, verbose=0)
print("Test loss:", score[0])
print("Test accuracy:", score[1])
kernel = model.layers[2].kernel
features = model.layers[2].convolution_op(model.layers[1](model.layers[0](x_test[:4])), kernel)
history = model.history.history
"""


def _standardized_conv(shell, distribute):
    ns = _cell(shell, STANDARDIZED_CONV)
    model = ns["model"]
    convs = model.layers[0], model.layers[2]
    weights = [w.numpy().copy() for w in model.trainable_weights]
    ns = _cell(shell, STANDARDIZED_CONV_FIT, distribute=distribute)
    assert ns["model"] is model and (model.layers[0], model.layers[2]) == convs
    assert type(convs[0]) is ns["StandardizedConv2DWithCall"]
    assert type(convs[1]) is ns["StandardizedConv2DWithOverride"]
    assert all(not np.allclose(w.numpy(), u) for w, u in zip(model.trainable_weights, weights))
    ns = _cell(shell, STANDARDIZED_CONV_CHECK)
    assert ns["features"].shape == (4, 11, 11, 16)
    return {"score": ns["score"], "history": ns["history"], "steps": int(model.optimizer.iterations.numpy())}


def test_standardized_conv2d_layers_overriding_convolution_op_and_call(shell):
    """Customizing the convolution operation: the notebook's Sequential of a Conv2D subclass overriding `call` and one
    overriding `convolution_op` comes back trained, its layers of the notebook's classes; evaluate and the override
    work on it afterwards."""
    one = _standardized_conv(shell, distribute=False)
    two = _standardized_conv(shell, distribute=True)
    # 1024 of 1152 images to train on, in batches of 64: 16 steps an epoch, 8 a rank on two ranks.
    assert one["steps"] == 3 * 16 and two["steps"] == 3 * 8, (one["steps"], two["steps"])
    assert one["score"][1] > 0.4, one  # above the 0.1 of guessing
    close(two["history"]["loss"][-1], one["history"]["loss"][-1], 1.5, "training loss")
    close(two["score"][1], one["score"][1], 1.5, "test accuracy evaluated afterwards")


# --------------------------------------------------------------------------------- Memory-efficient embeddings

EMBEDDINGS_DATA = """
import numpy as np
import pandas as pd
import tensorflow as tf
import keras
from keras import layers
from keras.layers import StringLookup

keras.utils.set_random_seed(0)

# MovieLens 1M's ratings.dat, in its shape: user_id::movie_id::rating::unix_timestamp. Here each user and movie has a
# hidden taste in [-1, 1], the rating their product mapped to 1..5; popular movies are rated more often.
rng = np.random.default_rng(0)
user_taste, movie_taste = rng.uniform(-1, 1, 120), rng.uniform(-1, 1, 300)
n = 4096
users = rng.integers(0, 120, n)
movies = np.minimum(rng.zipf(1.3, n) - 1, 299)
ratings = np.clip(np.round(3 + 2 * user_taste[users] * movie_taste[movies]), 1, 5)
ratings_data = pd.DataFrame(
    {"user_id": users + 1, "movie_id": movies + 1, "rating": ratings, "unix_timestamp": 978300760 + np.arange(n)}
)

ratings_data["movie_id"] = ratings_data["movie_id"].apply(lambda x: f"movie_{x}")
ratings_data["user_id"] = ratings_data["user_id"].apply(lambda x: f"user_{x}")
ratings_data["rating"] = ratings_data["rating"].apply(lambda x: float(x))
del ratings_data["unix_timestamp"]

print(f"Number of users: {len(ratings_data.user_id.unique())}")
print(f"Number of movies: {len(ratings_data.movie_id.unique())}")
print(f"Number of ratings: {len(ratings_data.index)}")

random_selection = np.random.RandomState(0).rand(len(ratings_data.index)) <= 0.85
train_data = ratings_data[random_selection]
eval_data = ratings_data[~random_selection]

train_data.to_csv("train_data.csv", index=False, sep="|", header=False)
eval_data.to_csv("eval_data.csv", index=False, sep="|", header=False)
print(f"Train data split: {len(train_data.index)}")
print(f"Eval data split: {len(eval_data.index)}")
print("Train and eval data files are saved.")

csv_header = list(ratings_data.columns)
user_vocabulary = list(ratings_data.user_id.unique())
movie_vocabulary = list(ratings_data.movie_id.unique())
target_feature_name = "rating"
learning_rate = 0.01
batch_size = 128
num_epochs = 3
base_embedding_dim = 16


def get_dataset_from_csv(csv_file_path, batch_size=128, shuffle=True):
    return tf.data.experimental.make_csv_dataset(
        csv_file_path,
        batch_size=batch_size,
        column_names=csv_header,
        label_name=target_feature_name,
        num_epochs=1,
        header=False,
        field_delim="|",
        shuffle=shuffle,
    )


def run_experiment(model):
    # Compile the model.
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.MeanSquaredError(),
        metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
    )
    # Read the training data.
    train_dataset = get_dataset_from_csv("train_data.csv", batch_size)
    # Read the test data.
    eval_dataset = get_dataset_from_csv("eval_data.csv", batch_size, shuffle=False)
    # Fit the model with the training data.
    history = model.fit(train_dataset, epochs=num_epochs, validation_data=eval_dataset, verbose=0)
    return history


def embedding_encoder(vocabulary, embedding_dim, num_oov_indices=0, name=None):
    return keras.Sequential(
        [
            StringLookup(vocabulary=vocabulary, mask_token=None, num_oov_indices=num_oov_indices),
            layers.Embedding(input_dim=len(vocabulary) + num_oov_indices, output_dim=embedding_dim),
        ],
        name=f"{name}_embedding" if name else None,
    )
"""

EMBEDDINGS_MODEL = """
class QREmbedding(keras.layers.Layer):
    def __init__(self, vocabulary, embedding_dim, num_buckets, name=None):
        super().__init__(name=name)
        self.num_buckets = num_buckets

        self.index_lookup = StringLookup(vocabulary=vocabulary, mask_token=None, num_oov_indices=0)
        self.q_embeddings = layers.Embedding(
            num_buckets,
            embedding_dim,
        )
        self.r_embeddings = layers.Embedding(
            num_buckets,
            embedding_dim,
        )

    def call(self, inputs):
        # Get the item index.
        embedding_index = self.index_lookup(inputs)
        # Get the quotient index.
        quotient_index = tf.math.floordiv(embedding_index, self.num_buckets)
        # Get the reminder index.
        remainder_index = tf.math.floormod(embedding_index, self.num_buckets)
        # Lookup the quotient_embedding using the quotient_index.
        quotient_embedding = self.q_embeddings(quotient_index)
        # Lookup the remainder_embedding using the remainder_index.
        remainder_embedding = self.r_embeddings(remainder_index)
        # Use multiplication as a combiner operation
        return quotient_embedding * remainder_embedding


class MDEmbedding(keras.layers.Layer):
    def __init__(self, blocks_vocabulary, blocks_embedding_dims, base_embedding_dim, name=None):
        super().__init__(name=name)
        self.num_blocks = len(blocks_vocabulary)

        # Create vocab to block lookup.
        keys = []
        values = []
        for block_idx, block_vocab in enumerate(blocks_vocabulary):
            keys.extend(block_vocab)
            values.extend([block_idx] * len(block_vocab))
        self.vocab_to_block = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, values), default_value=-1
        )

        self.block_embedding_encoders = []
        self.block_embedding_projectors = []

        # Create block embedding encoders and projectors.
        for idx in range(self.num_blocks):
            vocabulary = blocks_vocabulary[idx]
            embedding_dim = blocks_embedding_dims[idx]
            block_embedding_encoder = embedding_encoder(vocabulary, embedding_dim, num_oov_indices=1)
            self.block_embedding_encoders.append(block_embedding_encoder)
            if embedding_dim == base_embedding_dim:
                self.block_embedding_projectors.append(layers.Lambda(lambda x: x))
            else:
                self.block_embedding_projectors.append(layers.Dense(units=base_embedding_dim))

    def call(self, inputs):
        # Get block index for each input item.
        block_indicies = self.vocab_to_block.lookup(inputs)
        # Initialize output embeddings to zeros.
        embeddings = tf.zeros(shape=(tf.shape(inputs)[0], base_embedding_dim))
        # Generate embeddings from blocks.
        for idx in range(self.num_blocks):
            # Lookup embeddings from the current block.
            block_embeddings = self.block_embedding_encoders[idx](inputs)
            # Project embeddings to base_embedding_dim.
            block_embeddings = self.block_embedding_projectors[idx](block_embeddings)
            # Create a mask to filter out embeddings of items that do not belong to the current block.
            mask = tf.expand_dims(tf.cast(block_indicies == idx, tf.dtypes.float32), 1)
            # Set the embeddings for the items not belonging to the current block to zeros.
            block_embeddings = block_embeddings * mask
            # Add the block embeddings to the final embeddings.
            embeddings += block_embeddings

        return embeddings


movie_frequencies = ratings_data["movie_id"].value_counts()
sorted_movie_vocabulary = list(movie_frequencies.keys())

movie_blocks_vocabulary = [
    sorted_movie_vocabulary[:20],  # high popularity movies block
    sorted_movie_vocabulary[20:80],  # normal popularity movies block
    sorted_movie_vocabulary[80:],  # low popularity movies block
]

movie_blocks_embedding_dims = [16, 8, 4]

user_embedding_num_buckets = len(user_vocabulary) // 10


def create_memory_efficient_model():
    # Take the user as an input.
    user_input = layers.Input(name="user_id", shape=(), dtype="string")
    # Get user embedding.
    user_embedding = QREmbedding(
        vocabulary=user_vocabulary,
        embedding_dim=base_embedding_dim,
        num_buckets=user_embedding_num_buckets,
        name="user_embedding",
    )(user_input)

    # Take the movie as an input.
    movie_input = layers.Input(name="movie_id", shape=(), dtype="string")
    # Get embedding.
    movie_embedding = MDEmbedding(
        blocks_vocabulary=movie_blocks_vocabulary,
        blocks_embedding_dims=movie_blocks_embedding_dims,
        base_embedding_dim=base_embedding_dim,
        name="movie_embedding",
    )(movie_input)

    # Compute dot product similarity between user and movie embeddings.
    logits = layers.Dot(axes=1, name="dot_similarity")([user_embedding, movie_embedding])
    # Convert to rating scale.
    prediction = keras.activations.sigmoid(logits) * 5
    # Create the model.
    model = keras.Model(inputs=[user_input, movie_input], outputs=prediction, name="baseline_model")
    return model

"""

EMBEDDINGS_FIT = """
memory_efficient_model = create_memory_efficient_model()
memory_efficient_model.summary()
history = run_experiment(memory_efficient_model)
"""

EMBEDDINGS_CHECK = """
eval_dataset = get_dataset_from_csv("eval_data.csv", batch_size, shuffle=False)
eval_loss, eval_mae = memory_efficient_model.evaluate(eval_dataset, verbose=0)
predicted = memory_efficient_model.predict(
    {
        "user_id": tf.constant(["user_1", "user_2", "user_3"]),
        "movie_id": tf.constant(["movie_1", "movie_1", "movie_2"]),
    },
    verbose=0,
)
user_vectors = memory_efficient_model.get_layer("user_embedding")(tf.constant(["user_1", "user_2"]))
"""


def _memory_efficient(shell, distribute):
    _cell(shell, EMBEDDINGS_DATA)
    ns = _cell(shell, EMBEDDINGS_MODEL)
    ns = _cell(shell, EMBEDDINGS_FIT, distribute=distribute)
    model = ns["memory_efficient_model"]
    qr, md = model.get_layer("user_embedding"), model.get_layer("movie_embedding")
    assert type(qr) is ns["QREmbedding"] and type(md) is ns["MDEmbedding"]
    assert ns["history"].model is model and model.optimizer.iterations.numpy() > 0
    # Trained: a fresh model from the same seed-less initializers would not know the users' tastes.
    assert ns["history"].history["loss"][-1] < ns["history"].history["loss"][0] / 1.5, ns["history"].history
    ns = _cell(shell, EMBEDDINGS_CHECK)
    assert ns["predicted"].shape == (3, 1) and np.all((ns["predicted"] >= 0) & (ns["predicted"] <= 5))
    assert ns["user_vectors"].shape == (2, 16)
    return {"mae": ns["eval_mae"], "history": ns["history"].history, "steps": int(model.optimizer.iterations.numpy())}


def test_memory_efficient_embeddings_qr_and_md_layers_in_a_functional_model(shell, tmp_path, monkeypatch):
    """Memory-efficient embeddings: a functional model over a `QREmbedding` and an `MDEmbedding` (constructors without
    **kwargs; a StaticHashTable, StringLookups, Lambda and Dense projectors inside), made in the distributed cell as
    keras.io makes it, comes back trained by the notebook's `run_experiment` over CSV files; the notebook evaluates
    and predicts with it afterwards."""
    monkeypatch.chdir(tmp_path)
    one = _memory_efficient(shell, distribute=False)
    two = _memory_efficient(shell, distribute=True)
    # make_csv_dataset's batches of 128: half of one process's steps an epoch a rank on two ranks (the odd one too).
    per_epoch = one["steps"] // 3
    assert two["steps"] == 3 * -(-per_epoch // 2), (one["steps"], two["steps"])
    close(two["history"]["loss"][-1], one["history"]["loss"][-1], 1.5, "training loss")
    close(two["mae"], one["mae"], 1.3, "evaluation MAE afterwards")


# ---------------------------------------------------------------------------------- Supervised Contrastive Learning

SUPCON = """
import numpy as np
import keras
from keras import ops
from keras import layers

keras.utils.set_random_seed(0)

num_classes = 10
input_shape = (32, 32, 3)

# CIFAR-10's shapes: 32x32 colour images 0-255 and labels of shape (n, 1). Here class c is a square of colour c.
rng = np.random.default_rng(0)
colours = rng.integers(0, 256, (num_classes, 3))


def images(n):
    labels = rng.integers(0, num_classes, (n, 1))
    pictures = rng.integers(0, 100, (n, 32, 32, 3)).astype("uint8")
    for i, ((label,), (row, col)) in enumerate(zip(labels, rng.integers(0, 16, (n, 2)))):
        pictures[i, row : row + 16, col : col + 16] = colours[label]
    return pictures, labels


# Load the train and test data splits
(x_train, y_train), (x_test, y_test) = images(512), images(128)

# Display shapes of train and test datasets
print(f"x_train shape: {x_train.shape} - y_train shape: {y_train.shape}")
print(f"x_test shape: {x_test.shape} - y_test shape: {y_test.shape}")

data_augmentation = keras.Sequential(
    [
        layers.Normalization(),
        layers.RandomFlip("horizontal"),
        layers.RandomRotation(0.02),
    ]
)

# Setting the state of the normalization layer.
data_augmentation.layers[0].adapt(x_train)


def create_encoder():
    # keras.io's ResNet50V2(include_top=False, weights=None, input_shape=input_shape, pooling="avg"), smaller.
    resnet = keras.Sequential(
        [
            keras.Input(input_shape),
            layers.Conv2D(16, 3, strides=2, activation="relu"),
            layers.Conv2D(32, 3, strides=2, activation="relu"),
            layers.GlobalAveragePooling2D(),
        ],
        name="resnet50v2",
    )

    inputs = keras.Input(shape=input_shape)
    augmented = data_augmentation(inputs)
    outputs = resnet(augmented)
    model = keras.Model(inputs=inputs, outputs=outputs, name="cifar10-encoder")
    return model


encoder = create_encoder()
encoder.summary()

learning_rate = 0.003
batch_size = 64
hidden_units = 32
projection_units = 16
num_epochs = 6
dropout_rate = 0.5
temperature = 0.05


def create_classifier(encoder, trainable=True):
    for layer in encoder.layers:
        layer.trainable = trainable

    inputs = keras.Input(shape=input_shape)
    features = encoder(inputs)
    features = layers.Dropout(dropout_rate)(features)
    features = layers.Dense(hidden_units, activation="relu")(features)
    features = layers.Dropout(dropout_rate)(features)
    outputs = layers.Dense(num_classes, activation="softmax")(features)

    model = keras.Model(inputs=inputs, outputs=outputs, name="cifar10-classifier")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def npairs_loss(y_true, y_pred):
    y_pred = ops.cast(y_pred, "float32")
    y_true = ops.cast(y_true, y_pred.dtype)
    y_true = ops.cast(ops.equal(y_true, ops.transpose(y_true)), y_pred.dtype)
    y_true /= ops.sum(y_true, 1, keepdims=True)
    loss = ops.categorical_crossentropy(y_true, y_pred, from_logits=True)

    return ops.mean(loss)


class SupervisedContrastiveLoss(keras.losses.Loss):
    def __init__(self, temperature=1, name=None):
        super().__init__(name=name)
        self.temperature = temperature

    def __call__(self, labels, feature_vectors, sample_weight=None):
        # Normalize feature vectors
        feature_vectors_normalized = keras.utils.normalize(feature_vectors, axis=1, order=2)
        # Compute logits
        logits = ops.divide(
            ops.matmul(
                feature_vectors_normalized,
                ops.transpose(feature_vectors_normalized),
            ),
            self.temperature,
        )
        # keras.io passes `ops.squeeze(labels)`: npairs_loss then compares a vector with its transpose, itself, and
        # sums it over axis 1, which it has not; Keras 3.15 fails so in one process too. The (n, 1) labels against
        # their (1, n) transpose make the same-class matrix the loss means.
        return npairs_loss(labels, logits)


def add_projection_head(encoder):
    inputs = keras.Input(shape=input_shape)
    features = encoder(inputs)
    outputs = layers.Dense(projection_units, activation="relu")(features)
    model = keras.Model(
        inputs=inputs,
        outputs=outputs,
        name="cifar-encoder_with_projection-head",
    )
    return model
"""

SUPCON_PRETRAIN_SETUP = """
encoder = create_encoder()

encoder_with_projection_head = add_projection_head(encoder)
encoder_with_projection_head.compile(
    optimizer=keras.optimizers.Adam(learning_rate),
    loss=SupervisedContrastiveLoss(temperature),
)

encoder_with_projection_head.summary()
"""

SUPCON_PRETRAIN = """
history = encoder_with_projection_head.fit(x=x_train, y=y_train, batch_size=batch_size, epochs=num_epochs, verbose=0)
"""

# keras.io's own cells: "Experiment 1" and "2. Pretrain the encoder" each make their models and fit them.
SUPCON_BASELINE = """
encoder = create_encoder()
classifier = create_classifier(encoder)
classifier.summary()

history = classifier.fit(x=x_train, y=y_train, batch_size=batch_size, epochs=num_epochs, verbose=0)

accuracy = classifier.evaluate(x_test, y_test, verbose=0)[1]
print(f"Test accuracy: {round(accuracy * 100, 2)}%")
"""

SUPCON_PRETRAIN_CELL = SUPCON_PRETRAIN_SETUP + SUPCON_PRETRAIN

SUPCON_CLASSIFIER = """
classifier = create_classifier(encoder, trainable=False)

history = classifier.fit(x=x_train, y=y_train, batch_size=batch_size, epochs=num_epochs, verbose=0)
"""

SUPCON_EVALUATE = """
accuracy = classifier.evaluate(x_test, y_test, verbose=0)[1]
print(f"Test accuracy: {round(accuracy * 100, 2)}%")
features = encoder.predict(x_test[:8], verbose=0)
"""


def _supervised_contrastive(shell, distribute):
    _cell(shell, SUPCON)
    ns = _cell(shell, SUPCON_PRETRAIN_SETUP)
    encoder, head_model, augmentation = ns["encoder"], ns["encoder_with_projection_head"], ns["data_augmentation"]
    loss = head_model.loss
    encoder_weights = [w.numpy().copy() for w in encoder.trainable_weights]
    ns = _cell(shell, SUPCON_PRETRAIN, distribute=distribute)
    assert ns["encoder"] is encoder and ns["encoder_with_projection_head"] is head_model and head_model.loss is loss
    assert encoder in head_model.layers and ns["data_augmentation"] is augmentation and augmentation in encoder.layers
    assert all(not np.allclose(w.numpy(), u) for w, u in zip(encoder.trainable_weights, encoder_weights))
    pretrain = ns["history"].history
    pretrained = [w.numpy().copy() for w in encoder.weights]
    ns = _cell(shell, SUPCON_CLASSIFIER, distribute=distribute)
    classifier = ns["classifier"]
    # The classifier made in the cell holds the notebook's encoder, frozen there by create_classifier.
    assert ns["encoder"] is encoder and encoder in classifier.layers
    assert not any(layer.trainable for layer in encoder.layers) and not encoder.trainable_weights
    assert all(np.array_equal(w.numpy(), u) for w, u in zip(encoder.weights, pretrained))
    ns = _cell(shell, SUPCON_EVALUATE)
    assert ns["features"].shape == (8, 32)
    return {
        "pretrain": pretrain,
        "history": ns["history"].history,
        "accuracy": ns["accuracy"],
        "steps": (int(head_model.optimizer.iterations.numpy()), int(classifier.optimizer.iterations.numpy())),
    }


def test_supervised_contrastive_pretraining_then_classifier_over_the_frozen_encoder(shell):
    """Supervised Contrastive Learning: the notebook's encoder (its adapted augmentation inside) comes back trained
    under a `SupervisedContrastiveLoss` through its projection head; a second distributed cell makes the classifier
    over it, freezing it, and the notebook's encoder comes back frozen and unchanged inside the trained classifier."""
    one = _supervised_contrastive(shell, distribute=False)
    two = _supervised_contrastive(shell, distribute=True)
    # 512 images in batches of 64: 8 steps an epoch, 4 a rank on two ranks.
    assert one["steps"] == (6 * 8, 6 * 8) and two["steps"] == (6 * 4, 6 * 4), (one["steps"], two["steps"])
    assert one["accuracy"] > 0.25, one  # above the 0.1 of guessing
    close(two["pretrain"]["loss"][-1], one["pretrain"]["loss"][-1], 1.3, "contrastive loss")
    close(two["history"]["loss"][-1], one["history"]["loss"][-1], 1.3, "classifier loss over the frozen encoder")
    # 128 test images after a short pretraining: two ranks' accuracy ranged 0.20-0.51 over runs, one process's 0.45.
    assert two["accuracy"] > 0.15, two["accuracy"]


@pytest.mark.fast
def test_a_functional_model_over_a_notebook_functional_model_called_before_comes_back_over_it():
    """What SupCon's classifier needs, in one process: a functional model made over the receiver's functional
    `encoder`, which a projection head had called before, is rebuilt over that same encoder and computes as the
    sent one did (before: "Output with path `` is not connected to `inputs`")."""
    import keras

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).random((8, 4)).astype("float32")
    inputs = keras.Input((4,))
    encoder = keras.Model(inputs, keras.layers.Dense(3)(inputs), name="encoder")
    inputs = keras.Input((4,))
    head = keras.Model(inputs, keras.layers.Dense(2)(encoder(inputs)))
    inputs = keras.Input((4,))
    classifier = keras.Model(inputs, keras.layers.Dense(5)(keras.layers.Dropout(0.5)(encoder(inputs))))
    sent = {"encoder": encoder, "head": head, "classifier": classifier}
    packed = payload.pack(["classifier"], sent, also_known=["encoder", "head"])
    values, problems = payload.unpack(packed, {"encoder": encoder, "head": head})
    assert problems == {}
    back = values["classifier"]
    assert back is not classifier and back.layers[1] is encoder
    assert np.allclose(back.predict(x, verbose=0), classifier.predict(x, verbose=0))
    assert np.allclose(head.predict(x, verbose=0), head(x).numpy())  # the head's graph still runs over its call


def _supervised_contrastive_as_keras_io_cells(shell, distribute):
    ns = _cell(shell, SUPCON)
    augmentation = ns["data_augmentation"]
    ns = _cell(shell, SUPCON_BASELINE, distribute=distribute)
    baseline, encoder = ns["classifier"], ns["encoder"]
    assert baseline.layers[1] is encoder and ns["data_augmentation"] is augmentation and augmentation in encoder.layers
    assert encoder.trainable_weights and int(baseline.optimizer.iterations.numpy()) > 0
    run = {"baseline": ns["accuracy"], "baseline_loss": ns["history"].history["loss"][-1]}
    ns = _cell(shell, SUPCON_PRETRAIN_CELL, distribute=distribute)
    encoder, head_model = ns["encoder"], ns["encoder_with_projection_head"]
    assert encoder is not baseline.layers[1] and head_model.layers[1] is encoder and augmentation in encoder.layers
    assert type(head_model.loss) is ns["SupervisedContrastiveLoss"] and head_model.loss.temperature == 0.05
    run["pretrain"] = ns["history"].history["loss"][-1]
    pretrained = [w.numpy().copy() for w in encoder.weights]
    ns = _cell(shell, SUPCON_CLASSIFIER, distribute=distribute)
    assert ns["encoder"] is encoder and ns["classifier"].layers[1] is encoder and not encoder.trainable_weights
    assert all(np.array_equal(w.numpy(), u) for w, u in zip(encoder.weights, pretrained))
    ns = _cell(shell, SUPCON_EVALUATE)
    run["accuracy"] = ns["accuracy"]
    return run


def test_supervised_contrastive_as_keras_io_writes_its_cells_models_made_in_each(shell):
    """Supervised Contrastive Learning, keras.io's cell layout: the baseline cell makes an encoder and a classifier
    over it around the notebook's adapted data_augmentation, fits and evaluates; the pretraining cell makes a new
    encoder, its projection head and SupervisedContrastiveLoss and fits; the classifier cell freezes that encoder.
    Each comes back holding the others, as in one process, and the notebook evaluates the last classifier."""
    one = _supervised_contrastive_as_keras_io_cells(shell, distribute=False)
    two = _supervised_contrastive_as_keras_io_cells(shell, distribute=True)
    assert one["baseline"] > 0.25 and one["accuracy"] > 0.25, one  # above the 0.1 of guessing
    close(two["baseline_loss"], one["baseline_loss"], 1.3, "baseline classifier loss")
    close(two["pretrain"], one["pretrain"], 1.3, "contrastive loss")
    assert two["baseline"] > 0.25 and two["accuracy"] > 0.15, two  # as noisy as above
