"""keras.io examples, third pass: copied as keras.io writes them, set up in plain cells, `%%distribute -n 2` on fit.

"Image classification from scratch" (JPEGs read by `image_dataset_from_directory`, a `data_augmentation` Sequential
mapped over the dataset, residual blocks built in `make_model`, `ModelCheckpoint("save_at_{epoch}.keras")`, then
`keras.ops.sigmoid(predictions[0][0])`), "Text classification with Transformer" (`TransformerBlock` and
`TokenAndPositionEmbedding` layers whose constructors take no **kwargs), "Text classification from scratch" (a
TextVectorization with a `custom_standardization` adapted in a plain cell, `vectorize_text` mapped over the
datasets, then the end-to-end model on raw strings), "Denoising Diffusion Implicit Models" (reduced: a `KID` metric
over a tiny encoder, a `DiffusionModel(image_size, widths, block_depth)` with a Normalization adapted in a plain cell,
an EMA network cloned from its network and updated by its own train_step, then `model.generate`) and "MixUp
augmentation" (two zipped shuffled datasets mixed by `tf.random.gamma`). Each runs in one process and on two ranks;
the later plain cells must work after both, with comparable results. Data is synthetic, in the examples' shapes.
"""

import os

import numpy as np
import pytest
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


# ------------------------------------------------------------------------------ image classification from scratch

IMAGES = """
import os
import numpy as np
import keras
from keras import layers
from tensorflow import data as tf_data
import tensorflow as tf

keras.utils.set_random_seed(0)
# Cats and dogs as small JPEGs: cats reddish, dogs bluish (PetImages/Cat/*.jpg, PetImages/Dog/*.jpg).
rng = np.random.default_rng(0)
for folder_name, channel in (("Cat", 0), ("Dog", 2)):
    os.makedirs(os.path.join("PetImages", folder_name), exist_ok=True)
    for i in range(48):
        image = rng.integers(0, 120, (40, 40, 3), dtype=np.uint8)
        image[..., channel] += rng.integers(60, 135, dtype=np.uint8)
        tf.io.write_file(os.path.join("PetImages", folder_name, f"{i}.jpg"), tf.io.encode_jpeg(image))

image_size = (32, 32)
batch_size = 16

train_ds, val_ds = keras.utils.image_dataset_from_directory(
    "PetImages",
    validation_split=0.2,
    subset="both",
    seed=1337,
    image_size=image_size,
    batch_size=batch_size,
)

data_augmentation = keras.Sequential(
    [
        layers.RandomFlip("horizontal"),
        layers.RandomRotation(0.1),
    ]
)

# Apply `data_augmentation` to the training images.
train_ds = train_ds.map(
    lambda img, label: (data_augmentation(img), label),
    num_parallel_calls=tf_data.AUTOTUNE,
)
# Prefetching samples in GPU memory helps maximize GPU utilization.
train_ds = train_ds.prefetch(tf_data.AUTOTUNE)
val_ds = val_ds.prefetch(tf_data.AUTOTUNE)


def make_model(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)

    # Entry block
    x = layers.Rescaling(1.0 / 255)(inputs)
    x = layers.Conv2D(16, 3, strides=2, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    previous_block_activation = x  # Set aside residual

    for size in [16, 32]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)

        # Project residual
        residual = layers.Conv2D(size, 1, strides=2, padding="same")(previous_block_activation)
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    x = layers.SeparableConv2D(64, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    x = layers.GlobalAveragePooling2D()(x)
    if num_classes == 2:
        units = 1
    else:
        units = num_classes

    x = layers.Dropout(0.25)(x)
    # We specify activation=None so as to return logits
    outputs = layers.Dense(units, activation=None)(x)
    return keras.Model(inputs, outputs)


model = make_model(input_shape=image_size + (3,), num_classes=2)

epochs = 4

callbacks = [
    keras.callbacks.ModelCheckpoint("save_at_{epoch}.keras"),
]
model.compile(
    optimizer=keras.optimizers.Adam(3e-3),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy(name="acc")],
)
"""

IMAGES_FIT = """model.fit(
    train_ds,
    epochs=epochs,
    callbacks=callbacks,
    validation_data=val_ds,
    verbose=0,
)
"""

IMAGES_CHECK = """
img = keras.utils.load_img("PetImages/Dog/6.jpg", target_size=image_size)
img_array = keras.utils.img_to_array(img)
img_array = keras.ops.expand_dims(img_array, 0)  # Create batch axis

predictions = model.predict(img_array, verbose=0)
score = float(keras.ops.sigmoid(predictions[0][0]))
print(f"This image is {100 * (1 - score):.2f}% cat and {100 * score:.2f}% dog.")
val_loss, val_acc = model.evaluate(val_ds, verbose=0)
saved = keras.models.load_model(f"save_at_{epochs}.keras")
saved_predictions = saved.predict(img_array, verbose=0)
"""


def test_image_classification_from_scratch(shell, tmp_path, monkeypatch):
    """JPEGs through image_dataset_from_directory and a `data_augmentation` Sequential mapped in a lambda; the
    notebook's model trains, ModelCheckpoint("save_at_{epoch}.keras") leaves one file an epoch where the notebook
    runs, the last of them being the notebook's model, and the prediction cell works on the trained model."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, IMAGES)
    _cell(shell, IMAGES_FIT)
    one = _cell(shell, IMAGES_CHECK)
    one = {"acc": one["model"].history.history["acc"][-1], "loss": one["val_loss"], "score": one["score"]}
    _in_folder(monkeypatch, tmp_path / "two")
    ns = _cell(shell, IMAGES)
    model, augmentation, checkpoint = ns["model"], ns["data_augmentation"], ns["callbacks"][0]
    ns = _cell(shell, IMAGES_FIT, distribute=True)
    assert ns["data_augmentation"] is augmentation and ns["callbacks"][0] is checkpoint
    assert ns["model"] is model and ns["model"].optimizer.iterations.numpy() == 4 * 2  # 5 batches: 2 a rank
    assert sorted(os.listdir(".")) == ["PetImages"] + [f"save_at_{epoch}.keras" for epoch in (1, 2, 3, 4)]
    ns = _cell(shell, IMAGES_CHECK)
    np.testing.assert_allclose(ns["saved_predictions"], ns["predictions"], rtol=1e-4, atol=1e-5)
    # Four short epochs: training accuracy reaches 1.0 while BatchNormalization's moving statistics (momentum 0.99)
    # still lag, so val_acc stays at chance in one process too; the val_loss falls as those statistics move.
    acc, val_loss = ns["model"].history.history["acc"][-1], ns["model"].history.history["val_loss"]
    assert one["acc"] > 0.9 and acc > one["acc"] - 0.15, (acc, one["acc"])
    assert val_loss[-1] < val_loss[0] and ns["val_loss"] == pytest.approx(val_loss[-1], rel=1e-3), val_loss
    close(ns["val_loss"], one["loss"], 1.2, "cats and dogs val_loss")
    assert 0 <= ns["score"] <= 1 and abs(ns["score"] - one["score"]) < 0.15, (ns["score"], one["score"])


# ------------------------------------------------------------------------------- text classification, Transformer

TRANSFORMER = """
import numpy as np
import keras
from keras import ops
from keras import layers

keras.utils.set_random_seed(0)


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential(
            [
                layers.Dense(ff_dim, activation="relu"),
                layers.Dense(embed_dim),
            ]
        )
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = ops.shape(x)[-1]
        positions = ops.arange(start=0, stop=maxlen, step=1)
        positions = self.pos_emb(positions)
        x = self.token_emb(x)
        return x + positions


vocab_size = 2000  # Only consider the top 2k words
maxlen = 64  # Only consider the first 64 words of each movie review


def load_data(n, seed):
    # keras.datasets.imdb's shape: lists of word indices of varying lengths; positive reviews use more of the words
    # 10..59, negative ones more of 60..109.
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    reviews = []
    for label in labels:
        words = rng.integers(110, vocab_size, rng.integers(20, 90)).tolist()
        telling = rng.integers(10, 60, 8) + (50 if label == 0 else 0)
        for position, word in zip(rng.integers(0, len(words), 8), telling):
            words[position] = int(word)
        reviews.append([1] + words)
    return reviews, labels


x_train, y_train = load_data(512, 0)
x_val, y_val = load_data(128, 1)
print(len(x_train), "Training sequences")
print(len(x_val), "Validation sequences")
x_train = keras.utils.pad_sequences(x_train, maxlen=maxlen)
x_val = keras.utils.pad_sequences(x_val, maxlen=maxlen)

embed_dim = 32  # Embedding size for each token
num_heads = 2  # Number of attention heads
ff_dim = 32  # Hidden layer size in feed forward network inside transformer

inputs = layers.Input(shape=(maxlen,))
embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)
x = embedding_layer(inputs)
transformer_block = TransformerBlock(embed_dim, num_heads, ff_dim)
x = transformer_block(x)
x = layers.GlobalAveragePooling1D()(x)
x = layers.Dropout(0.1)(x)
x = layers.Dense(20, activation="relu")(x)
x = layers.Dropout(0.1)(x)
outputs = layers.Dense(2, activation="softmax")(x)

model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
"""

TRANSFORMER_FIT = """history = model.fit(
    x_train, y_train, batch_size=32, epochs=4, validation_data=(x_val, y_val), verbose=0
)
"""

TRANSFORMER_CHECK = """
val_loss, val_acc = model.evaluate(x_val, y_val, verbose=0)
block_output = transformer_block(embedding_layer(x_val[:4]))
"""


def test_transformer_text_classification(shell):
    """Layers whose constructors take no **kwargs (`TransformerBlock(embed_dim, num_heads, ff_dim, rate=0.1)`,
    `TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)`): the notebook's model and its layers are the ones
    trained, and the notebook's `transformer_block` and `embedding_layer` run afterwards."""
    _cell(shell, TRANSFORMER)
    _cell(shell, TRANSFORMER_FIT)
    one = _cell(shell, TRANSFORMER_CHECK)
    one = {"acc": one["val_acc"], "loss": one["val_loss"]}
    ns = _cell(shell, TRANSFORMER)
    model, block, embedding = ns["model"], ns["transformer_block"], ns["embedding_layer"]
    ns = _cell(shell, TRANSFORMER_FIT, distribute=True)
    assert ns["model"] is model and model.layers[2] is block and model.layers[1] is embedding
    assert isinstance(block, ns["TransformerBlock"]) and block.ffn.layers[1].units == 32
    assert model.optimizer.iterations.numpy() == 4 * 8  # 16 batches an epoch: 8 a rank
    ns = _cell(shell, TRANSFORMER_CHECK)
    assert tuple(ns["block_output"].shape) == (4, 64, 32)
    assert one["acc"] > 0.85 and ns["val_acc"] > one["acc"] - 0.15, (ns["val_acc"], one["acc"])
    # Both near 0 (from ln 2 untrained) after four epochs: a ratio of the two would say little.
    assert one["loss"] < 0.25 and ns["val_loss"] < 0.25, (ns["val_loss"], one["loss"])
    assert len(ns["history"].history["val_accuracy"]) == 4 and model.history is ns["history"]  # as fit leaves it


# ------------------------------------------------------------------------------ text classification from scratch

TEXT = """
import os
import re
import string
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.utils.set_random_seed(0)
# aclImdb/{train,test}/{pos,neg}/*.txt: short reviews, the telling words among filler, and some <br /> tags.
rng = np.random.default_rng(0)
good = ["great", "wonderful", "superb", "loved", "moving", "brilliant"]
bad = ["awful", "boring", "terrible", "hated", "dull", "worst"]
filler = ["the", "movie", "film", "plot", "actor", "scene", "was", "and", "a", "it", "story", "music", "end"]
for split, count in (("train", 480), ("test", 64)):
    for label, words in (("pos", good), ("neg", bad)):
        os.makedirs(os.path.join("aclImdb", split, label), exist_ok=True)
        for i in range(count // 2):
            review = list(rng.choice(filler, 24)) + list(rng.choice(words, 8))
            rng.shuffle(review)
            review = " ".join(review[:16]).capitalize() + "!<br /><br />" + " ".join(review[16:]) + "."
            with open(os.path.join("aclImdb", split, label, f"{i}_7.txt"), "w") as f:
                f.write(review)

batch_size = 32
raw_train_ds = keras.utils.text_dataset_from_directory(
    "aclImdb/train",
    batch_size=batch_size,
    validation_split=0.2,
    subset="training",
    seed=1337,
)
raw_val_ds = keras.utils.text_dataset_from_directory(
    "aclImdb/train",
    batch_size=batch_size,
    validation_split=0.2,
    subset="validation",
    seed=1337,
)
raw_test_ds = keras.utils.text_dataset_from_directory("aclImdb/test", batch_size=batch_size)


# Having looked at our data above, we see that the raw text contains HTML break
# tags of the form '<br />'. These tags will not be removed by the default
# standardizer (which doesn't strip HTML). Because of this, we will need to
# create a custom standardization function.
def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")


# Model constants.
max_features = 2000
embedding_dim = 32
sequence_length = 64

vectorize_layer = keras.layers.TextVectorization(
    standardize=custom_standardization,
    max_tokens=max_features,
    output_mode="int",
    output_sequence_length=sequence_length,
)

# Let's make a text-only dataset (no labels):
text_ds = raw_train_ds.map(lambda x, y: x)
# Let's call `adapt`:
vectorize_layer.adapt(text_ds)


def vectorize_text(text, label):
    text = tf.expand_dims(text, -1)
    return vectorize_layer(text), label


# Vectorize the data.
train_ds = raw_train_ds.map(vectorize_text)
val_ds = raw_val_ds.map(vectorize_text)
test_ds = raw_test_ds.map(vectorize_text)

# Do async prefetching / buffering of the data for best performance on GPU.
train_ds = train_ds.cache().prefetch(buffer_size=10)
val_ds = val_ds.cache().prefetch(buffer_size=10)
test_ds = test_ds.cache().prefetch(buffer_size=10)

# A integer input for vocab indices.
inputs = keras.Input(shape=(None,), dtype="int64")

# Next, we add a layer to map those vocab indices into a space of dimensionality
# 'embedding_dim'.
x = layers.Embedding(max_features, embedding_dim)(inputs)
x = layers.Dropout(0.5)(x)

# Conv1D + global max pooling
x = layers.Conv1D(32, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.Conv1D(32, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.GlobalMaxPooling1D()(x)

# We add a vanilla hidden layer:
x = layers.Dense(32, activation="relu")(x)
x = layers.Dropout(0.5)(x)

# We project onto a single unit output layer, and squash it with a sigmoid:
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

model = keras.Model(inputs, predictions)

# Compile the model with binary crossentropy loss and an adam optimizer.
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
epochs = 7
"""

TEXT_FIT = """# Fit the model using the train and test datasets.
model.fit(train_ds, validation_data=val_ds, epochs=epochs, verbose=0)
"""

TEXT_CHECK = """
test_loss, test_acc = model.evaluate(test_ds, verbose=0)

# A string input
inputs = keras.Input(shape=(1,), dtype="string")
# Turn strings into vocab indices
indices = vectorize_layer(inputs)
# Turn vocab indices into predictions
outputs = model(indices)

# Our end to end model
end_to_end_model = keras.Model(inputs, outputs)
end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

# Test it with `raw_test_ds`, which yields raw strings
end_to_end_loss, end_to_end_acc = end_to_end_model.evaluate(raw_test_ds, verbose=0)
raw_scores = end_to_end_model.predict(
    tf.constant(
        [
            ["The film was superb, a moving story and the music was great!<br />I loved the actor in it, a brilliant "
             "and wonderful end, a great scene and a great plot. The movie was moving and superb."],
            ["The film was awful, a boring story and the music was dull!<br />I hated the actor in it, the worst and "
             "a terrible end, a dull scene and a boring plot. The movie was awful and terrible."],
        ]
    ),
    verbose=0,
)
"""


def test_text_classification_from_scratch(shell, tmp_path, monkeypatch):
    """A TextVectorization with a `custom_standardization` (tf.strings.regex_replace), adapted in a plain cell and
    mapped over the datasets by `vectorize_text`; after the fit the end-to-end model on raw strings scores as the
    vectorized test set does (the notebook's vectorize_layer keeps its vocabulary)."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, TEXT)
    _cell(shell, TEXT_FIT)
    one = _cell(shell, TEXT_CHECK)
    one = {"acc": one["test_acc"], "loss": one["test_loss"], "end_to_end": one["end_to_end_acc"]}
    _in_folder(monkeypatch, tmp_path / "two")
    ns = _cell(shell, TEXT)
    model, vectorize_layer = ns["model"], ns["vectorize_layer"]
    vocabulary = vectorize_layer.get_vocabulary()
    ns = _cell(shell, TEXT_FIT, distribute=True)
    assert ns["model"] is model and ns["vectorize_layer"] is vectorize_layer
    assert vectorize_layer.get_vocabulary() == vocabulary and len(vocabulary) > 20
    assert model.optimizer.iterations.numpy() == 7 * 6  # 384 reviews in batches of 32: 6 a rank
    ns = _cell(shell, TEXT_CHECK)
    assert one["acc"] > 0.8 and ns["test_acc"] > one["acc"] - 0.15, (ns["test_acc"], one["acc"])
    assert one["loss"] < 0.3 and ns["test_loss"] < 0.3, (ns["test_loss"], one["loss"])  # both near 0: no ratio
    assert ns["end_to_end_acc"] == pytest.approx(ns["test_acc"], abs=1e-6), (ns["end_to_end_acc"], ns["test_acc"])
    positive, negative = ns["raw_scores"][:, 0]
    assert positive > negative + 0.2, ns["raw_scores"]


# --------------------------------------------------------------------------------- denoising diffusion (DDIM)

DIFFUSION = """
import math
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import keras
from keras import layers
from keras import ops

keras.utils.set_random_seed(0)
# data
dataset_repetitions = 2
num_epochs = 2
image_size = 16
# KID = Kernel Inception Distance, see related section
kid_image_size = 16
kid_diffusion_steps = 3
plot_diffusion_steps = 5

# sampling
min_signal_rate = 0.02
max_signal_rate = 0.95

# architecture
embedding_dims = 32
embedding_max_frequency = 1000.0
widths = [8, 16]
block_depth = 1

# optimization
batch_size = 16
ema = 0.9
learning_rate = 1e-3
weight_decay = 1e-4

# flowers: smooth colour gradients, 24x24 "photographs" cropped and resized as the example does.
rng = np.random.default_rng(0)
grid = np.linspace(0, 1, 24)[:, None, None]
flowers = [
    {"image": (255 * np.clip(rng.uniform(0, 1, (1, 1, 3)) * grid + rng.uniform(0, 0.5, (1, 1, 3)) * grid.transpose(
        1, 0, 2), 0, 1) + rng.integers(0, 10, (24, 24, 3))).clip(0, 255).astype("uint8")}
    for _ in range(96)
]


def load(split):
    part = flowers[:64] if split == "train" else flowers[64:]
    return tf.data.Dataset.from_tensor_slices({"image": np.stack([f["image"] for f in part])})


def preprocess_image(data):
    # center crop image
    height = ops.shape(data["image"])[0]
    width = ops.shape(data["image"])[1]
    crop_size = ops.minimum(height, width)
    image = tf.image.crop_to_bounding_box(
        data["image"],
        (height - crop_size) // 2,
        (width - crop_size) // 2,
        crop_size,
        crop_size,
    )

    # resize and clip
    # for image downsampling it is important to turn on antialiasing
    image = tf.image.resize(image, size=[image_size, image_size], antialias=True)
    return ops.clip(image / 255.0, 0.0, 1.0)


def prepare_dataset(split):
    # the validation dataset is shuffled as well, because data order matters
    # for the KID estimation
    return (
        load(split)
        .map(preprocess_image, num_parallel_calls=tf.data.AUTOTUNE)
        .cache()
        .repeat(dataset_repetitions)
        .shuffle(10 * batch_size)
        .batch(batch_size, drop_remainder=True)
        .prefetch(buffer_size=tf.data.AUTOTUNE)
    )


# load dataset
train_dataset = prepare_dataset("train")
val_dataset = prepare_dataset("validation")


@keras.saving.register_keras_serializable()
class KID(keras.metrics.Metric):
    def __init__(self, name, **kwargs):
        super().__init__(name=name, **kwargs)

        # KID is estimated per batch and is averaged across batches
        self.kid_tracker = keras.metrics.Mean(name="kid_tracker")

        # a small random encoder in place of the pretrained InceptionV3 (no download)
        self.encoder = keras.Sequential(
            [
                keras.Input(shape=(image_size, image_size, 3)),
                layers.Rescaling(255.0),
                layers.Resizing(height=kid_image_size, width=kid_image_size),
                layers.Conv2D(8, 3, strides=2, activation="relu"),
                layers.GlobalAveragePooling2D(),
            ],
            name="inception_encoder",
        )

    def polynomial_kernel(self, features_1, features_2):
        feature_dimensions = ops.cast(ops.shape(features_1)[1], dtype="float32")
        return (features_1 @ ops.transpose(features_2) / feature_dimensions + 1.0) ** 3.0

    def update_state(self, real_images, generated_images, sample_weight=None):
        real_features = self.encoder(real_images, training=False)
        generated_features = self.encoder(generated_images, training=False)

        # compute polynomial kernels using the two sets of features
        kernel_real = self.polynomial_kernel(real_features, real_features)
        kernel_generated = self.polynomial_kernel(generated_features, generated_features)
        kernel_cross = self.polynomial_kernel(real_features, generated_features)

        # estimate the squared maximum mean discrepancy using the average kernel values
        batch_size = real_features.shape[0]
        batch_size_f = ops.cast(batch_size, dtype="float32")
        mean_kernel_real = ops.sum(kernel_real * (1.0 - ops.eye(batch_size))) / (
            batch_size_f * (batch_size_f - 1.0)
        )
        mean_kernel_generated = ops.sum(kernel_generated * (1.0 - ops.eye(batch_size))) / (
            batch_size_f * (batch_size_f - 1.0)
        )
        mean_kernel_cross = ops.mean(kernel_cross)
        kid = mean_kernel_real + mean_kernel_generated - 2.0 * mean_kernel_cross

        # update the average KID estimate
        self.kid_tracker.update_state(kid)

    def result(self):
        return self.kid_tracker.result()

    def reset_state(self):
        self.kid_tracker.reset_state()


@keras.saving.register_keras_serializable()
def sinusoidal_embedding(x):
    embedding_min_frequency = 1.0
    frequencies = ops.exp(
        ops.linspace(
            ops.log(embedding_min_frequency),
            ops.log(embedding_max_frequency),
            embedding_dims // 2,
        )
    )
    angular_speeds = ops.cast(2.0 * math.pi * frequencies, "float32")
    embeddings = ops.concatenate([ops.sin(angular_speeds * x), ops.cos(angular_speeds * x)], axis=3)
    return embeddings


def ResidualBlock(width):
    def apply(x):
        input_width = x.shape[3]
        if input_width == width:
            residual = x
        else:
            residual = layers.Conv2D(width, kernel_size=1)(x)
        x = layers.BatchNormalization(center=False, scale=False)(x)
        x = layers.Conv2D(width, kernel_size=3, padding="same", activation="swish")(x)
        x = layers.Conv2D(width, kernel_size=3, padding="same")(x)
        x = layers.Add()([x, residual])
        return x

    return apply


def DownBlock(width, block_depth):
    def apply(x):
        x, skips = x
        for _ in range(block_depth):
            x = ResidualBlock(width)(x)
            skips.append(x)
        x = layers.AveragePooling2D(pool_size=2)(x)
        return x

    return apply


def UpBlock(width, block_depth):
    def apply(x):
        x, skips = x
        x = layers.UpSampling2D(size=2, interpolation="bilinear")(x)
        for _ in range(block_depth):
            x = layers.Concatenate()([x, skips.pop()])
            x = ResidualBlock(width)(x)
        return x

    return apply


def get_network(image_size, widths, block_depth):
    noisy_images = keras.Input(shape=(image_size, image_size, 3))
    noise_variances = keras.Input(shape=(1, 1, 1))

    e = layers.Lambda(sinusoidal_embedding, output_shape=(1, 1, 32))(noise_variances)
    e = layers.UpSampling2D(size=image_size, interpolation="nearest")(e)

    x = layers.Conv2D(widths[0], kernel_size=1)(noisy_images)
    x = layers.Concatenate()([x, e])

    skips = []
    for width in widths[:-1]:
        x = DownBlock(width, block_depth)([x, skips])

    for _ in range(block_depth):
        x = ResidualBlock(widths[-1])(x)

    for width in reversed(widths[:-1]):
        x = UpBlock(width, block_depth)([x, skips])

    x = layers.Conv2D(3, kernel_size=1, kernel_initializer="zeros")(x)

    return keras.Model([noisy_images, noise_variances], x, name="residual_unet")


@keras.saving.register_keras_serializable()
class DiffusionModel(keras.Model):
    def __init__(self, image_size, widths, block_depth):
        super().__init__()

        self.normalizer = layers.Normalization()
        self.network = get_network(image_size, widths, block_depth)
        self.ema_network = keras.models.clone_model(self.network)

    def compile(self, **kwargs):
        super().compile(**kwargs)

        self.noise_loss_tracker = keras.metrics.Mean(name="n_loss")
        self.image_loss_tracker = keras.metrics.Mean(name="i_loss")
        self.kid = KID(name="kid")

    @property
    def metrics(self):
        return [self.noise_loss_tracker, self.image_loss_tracker, self.kid]

    def denormalize(self, images):
        # convert the pixel values back to 0-1 range
        images = self.normalizer.mean + images * self.normalizer.variance**0.5
        return ops.clip(images, 0.0, 1.0)

    def diffusion_schedule(self, diffusion_times):
        # diffusion times -> angles
        start_angle = ops.cast(ops.arccos(max_signal_rate), "float32")
        end_angle = ops.cast(ops.arccos(min_signal_rate), "float32")

        diffusion_angles = start_angle + diffusion_times * (end_angle - start_angle)

        # angles -> signal and noise rates
        signal_rates = ops.cos(diffusion_angles)
        noise_rates = ops.sin(diffusion_angles)
        # note that their squared sum is always: sin^2(x) + cos^2(x) = 1

        return noise_rates, signal_rates

    def denoise(self, noisy_images, noise_rates, signal_rates, training):
        # the exponential moving average weights are used at evaluation
        if training:
            network = self.network
        else:
            network = self.ema_network

        # predict noise component and calculate the image component using it
        pred_noises = network([noisy_images, noise_rates**2], training=training)
        pred_images = (noisy_images - noise_rates * pred_noises) / signal_rates

        return pred_noises, pred_images

    def reverse_diffusion(self, initial_noise, diffusion_steps):
        # reverse diffusion = sampling
        num_images = initial_noise.shape[0]
        step_size = 1.0 / diffusion_steps

        # important line:
        # at the first sampling step, the "noisy image" is pure noise
        # but its signal rate is assumed to be nonzero (min_signal_rate)
        next_noisy_images = initial_noise
        for step in range(diffusion_steps):
            noisy_images = next_noisy_images

            # separate the current noisy image to its components
            diffusion_times = ops.ones((num_images, 1, 1, 1)) - step * step_size
            noise_rates, signal_rates = self.diffusion_schedule(diffusion_times)
            pred_noises, pred_images = self.denoise(noisy_images, noise_rates, signal_rates, training=False)
            # network used in eval mode

            # remix the predicted components using the next signal and noise rates
            next_diffusion_times = diffusion_times - step_size
            next_noise_rates, next_signal_rates = self.diffusion_schedule(next_diffusion_times)
            next_noisy_images = next_signal_rates * pred_images + next_noise_rates * pred_noises
            # this new noisy image will be used in the next step

        return pred_images

    def generate(self, num_images, diffusion_steps):
        # noise -> images -> denormalized images
        initial_noise = keras.random.normal(shape=(num_images, image_size, image_size, 3))
        generated_images = self.reverse_diffusion(initial_noise, diffusion_steps)
        generated_images = self.denormalize(generated_images)
        return generated_images

    def train_step(self, images):
        # normalize images to have standard deviation of 1, like the noises
        images = self.normalizer(images, training=True)
        noises = keras.random.normal(shape=(batch_size, image_size, image_size, 3))

        # sample uniform random diffusion times
        diffusion_times = keras.random.uniform(shape=(batch_size, 1, 1, 1), minval=0.0, maxval=1.0)
        noise_rates, signal_rates = self.diffusion_schedule(diffusion_times)
        # mix the images with noises accordingly
        noisy_images = signal_rates * images + noise_rates * noises

        with tf.GradientTape() as tape:
            # train the network to separate noisy images to their components
            pred_noises, pred_images = self.denoise(noisy_images, noise_rates, signal_rates, training=True)

            noise_loss = self.loss(noises, pred_noises)  # used for training
            image_loss = self.loss(images, pred_images)  # only used as metric

        gradients = tape.gradient(noise_loss, self.network.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.network.trainable_weights))

        self.noise_loss_tracker.update_state(noise_loss)
        self.image_loss_tracker.update_state(image_loss)

        # track the exponential moving averages of weights
        for weight, ema_weight in zip(self.network.weights, self.ema_network.weights):
            ema_weight.assign(ema * ema_weight + (1 - ema) * weight)

        # KID is not measured during the training phase for computational efficiency
        return {m.name: m.result() for m in self.metrics[:-1]}

    def test_step(self, images):
        # normalize images to have standard deviation of 1, like the noises
        images = self.normalizer(images, training=False)
        noises = keras.random.normal(shape=(batch_size, image_size, image_size, 3))

        # sample uniform random diffusion times
        diffusion_times = keras.random.uniform(shape=(batch_size, 1, 1, 1), minval=0.0, maxval=1.0)
        noise_rates, signal_rates = self.diffusion_schedule(diffusion_times)
        # mix the images with noises accordingly
        noisy_images = signal_rates * images + noise_rates * noises

        # use the network to separate noisy images to their components
        pred_noises, pred_images = self.denoise(noisy_images, noise_rates, signal_rates, training=False)

        noise_loss = self.loss(noises, pred_noises)
        image_loss = self.loss(images, pred_images)

        self.image_loss_tracker.update_state(image_loss)
        self.noise_loss_tracker.update_state(noise_loss)

        # measure KID between real and generated images
        # this is computationally demanding, kid_diffusion_steps has to be small
        images = self.denormalize(images)
        generated_images = self.generate(num_images=batch_size, diffusion_steps=kid_diffusion_steps)
        self.kid.update_state(images, generated_images)

        return {m.name: m.result() for m in self.metrics}

    def plot_images(self, epoch=None, logs=None, num_rows=3, num_cols=6):
        # plot random generated images for visual evaluation of generation quality
        generated_images = self.generate(
            num_images=num_rows * num_cols,
            diffusion_steps=plot_diffusion_steps,
        )

        plt.figure(figsize=(num_cols * 2.0, num_rows * 2.0))
        for row in range(num_rows):
            for col in range(num_cols):
                index = row * num_cols + col
                plt.subplot(num_rows, num_cols, index + 1)
                plt.imshow(generated_images[index])
                plt.axis("off")
        plt.tight_layout()
        plt.show()
        plt.close()


# create and compile the model
model = DiffusionModel(image_size, widths, block_depth)
model.compile(
    optimizer=keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=weight_decay),
    loss=keras.losses.mean_absolute_error,
)
# pixelwise mean absolute error is used as loss

# The example's ModelCheckpoint(save_weights_only=True, monitor="val_kid") is left out: this Keras (3.15) refuses
# to save the weights of a model whose call() never ran ("You are saving a model that has not yet been built"),
# in one process as well.

# calculate mean and variance of training dataset for normalization
model.normalizer.adapt(train_dataset)
untrained_ema = [w.numpy().copy() for w in model.ema_network.weights]
"""

DIFFUSION_FIT = """# run training and plot generated images periodically
history = model.fit(
    train_dataset,
    epochs=num_epochs,
    validation_data=val_dataset,
    callbacks=[
        keras.callbacks.LambdaCallback(on_epoch_end=model.plot_images),
    ],
    verbose=0,
)
"""

DIFFUSION_CHECK = """
ema_moved = float(np.sqrt(sum(np.sum((w.numpy() - u) ** 2) for w, u in zip(model.ema_network.weights, untrained_ema))))
generated_images = model.generate(num_images=4, diffusion_steps=plot_diffusion_steps)
"""


def test_denoising_diffusion_implicit_model(shell, tmp_path, monkeypatch):
    """DDIM, reduced: `DiffusionModel(image_size, widths, block_depth)` (no **kwargs) whose compile(**kwargs) makes
    its trackers and KID metric, whose normalizer is adapted in a plain cell and whose train_step moves its EMA
    network; the notebook's model comes back trained, normalizer kept, and generates images."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, DIFFUSION)
    _cell(shell, DIFFUSION_FIT)
    one = _cell(shell, DIFFUSION_CHECK)
    one = {"loss": one["history"].history["n_loss"][-1], "moved": one["ema_moved"]}
    _in_folder(monkeypatch, tmp_path / "two")
    ns = _cell(shell, DIFFUSION)
    model, normalizer, ema_network = ns["model"], ns["model"].normalizer, ns["model"].ema_network
    mean = np.array(normalizer.mean)
    ns = _cell(shell, DIFFUSION_FIT, distribute=True)
    assert ns["model"] is model and model.normalizer is normalizer and model.ema_network is ema_network
    np.testing.assert_allclose(np.array(model.normalizer.mean), mean, rtol=1e-6)
    assert model.optimizer.iterations.numpy() == 2 * 4  # 128 images in batches of 16: 4 a rank
    assert sorted(ns["history"].history) == ["i_loss", "n_loss", "val_i_loss", "val_kid", "val_n_loss"]
    # The trackers hold what the last validation left in them, as one process's do (rank 0's share of it).
    trackers = {m.name: float(m.result()) for m in model.metrics}
    for name in ("n_loss", "i_loss"):
        close(trackers[name], ns["history"].history[f"val_{name}"][-1], 1.5, f"the model's {name} tracker")
    assert trackers["kid"] != 0 and np.isfinite(trackers["kid"]), trackers  # KID sits near 0, of either sign
    ns = _cell(shell, DIFFUSION_CHECK)
    close(ns["history"].history["n_loss"][-1], one["loss"], 1.5, "diffusion noise loss")
    # The EMA network moved in the ranks' train_step about as far as one process's (half the steps each).
    close(ns["ema_moved"], one["moved"], 3, "how far the EMA network moved")
    images = np.array(ns["generated_images"])
    assert images.shape == (4, 16, 16, 3) and np.isfinite(images).all() and 0 <= images.min() <= images.max() <= 1


# ---------------------------------------------------------------------------------------------------------- MixUp

MIXUP = """
import numpy as np
import keras
from keras import layers

# TF imports related to tf.data preprocessing
from tensorflow import data as tf_data
from tensorflow import random as tf_random
from sklearn.datasets import load_digits

keras.utils.set_random_seed(42)

# fashion_mnist's shapes: 28x28 grey images of 10 classes (here the digits, 8x8 grown to 24x24 and padded).
digits = load_digits()
images = np.pad(np.kron(digits.images, np.ones((3, 3))), ((0, 0), (2, 2), (2, 2))) * 16
(x_train, y_train), (x_test, y_test) = (images[:1400], digits.target[:1400]), (images[1400:], digits.target[1400:])

x_train = x_train.astype("float32") / 255.0
x_train = np.reshape(x_train, (-1, 28, 28, 1))
y_train = keras.ops.one_hot(y_train, 10)

x_test = x_test.astype("float32") / 255.0
x_test = np.reshape(x_test, (-1, 28, 28, 1))
y_test = keras.ops.one_hot(y_test, 10)

AUTO = tf_data.AUTOTUNE
BATCH_SIZE = 64
EPOCHS = 8

# Put aside a few samples to create our validation set
val_samples = 200
x_val, y_val = x_train[:val_samples], y_train[:val_samples]
new_x_train, new_y_train = x_train[val_samples:], y_train[val_samples:]

train_ds_one = (
    tf_data.Dataset.from_tensor_slices((new_x_train, new_y_train))
    .shuffle(BATCH_SIZE * 100)
    .batch(BATCH_SIZE)
)
train_ds_two = (
    tf_data.Dataset.from_tensor_slices((new_x_train, new_y_train))
    .shuffle(BATCH_SIZE * 100)
    .batch(BATCH_SIZE)
)
# Because we will be creating a mixed dataset from two datasets, we zip them
train_ds = tf_data.Dataset.zip((train_ds_one, train_ds_two))

val_ds = tf_data.Dataset.from_tensor_slices((x_val, y_val)).batch(BATCH_SIZE)

test_ds = tf_data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE)


def sample_beta_distribution(size, concentration_0=0.2, concentration_1=0.2):
    gamma_1_sample = tf_random.gamma(shape=[size], alpha=concentration_1)
    gamma_2_sample = tf_random.gamma(shape=[size], alpha=concentration_0)
    return gamma_1_sample / (gamma_1_sample + gamma_2_sample)


def mix_up(ds_one, ds_two, alpha=0.2):
    # Unpack two datasets
    images_one, labels_one = ds_one
    images_two, labels_two = ds_two
    batch_size = keras.ops.shape(images_one)[0]

    # Sample lambda and reshape it to do the mixup
    l = sample_beta_distribution(batch_size, alpha, alpha)
    x_l = keras.ops.reshape(l, (batch_size, 1, 1, 1))
    y_l = keras.ops.reshape(l, (batch_size, 1))

    # Perform mixup on both images and labels by combining a pair of images/labels
    # (one from each dataset) into one image/label
    images = images_one * x_l + images_two * (1 - x_l)
    labels = labels_one * y_l + labels_two * (1 - y_l)
    return (images, labels)


# First create the new dataset using our `mix_up` utility
train_ds_mu = train_ds.map(
    lambda ds_one, ds_two: mix_up(ds_one, ds_two, alpha=0.2),
    num_parallel_calls=AUTO,
)


def get_training_model():
    model = keras.Sequential(
        [
            layers.Input(shape=(28, 28, 1)),
            layers.Conv2D(16, (5, 5), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Conv2D(32, (5, 5), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Dropout(0.2),
            layers.GlobalAveragePooling2D(),
            layers.Dense(128, activation="relu"),
            layers.Dense(10, activation="softmax"),
        ]
    )
    return model


initial_model = get_training_model()
initial_model.save_weights("initial_weights.weights.h5")

model = get_training_model()
model.load_weights("initial_weights.weights.h5")
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
"""

MIXUP_FIT = "model.fit(train_ds_mu, validation_data=val_ds, epochs=EPOCHS, verbose=0)\n"

MIXUP_CHECK = """
_, test_acc = model.evaluate(test_ds, verbose=0)
print("Test accuracy: {:.2f}%".format(test_acc * 100))
"""


def test_mixup_augmentation(shell, tmp_path, monkeypatch):
    """MixUp: two shuffled datasets zipped and mixed by a mapped `mix_up` that samples tf.random.gamma; the
    notebook's model, loaded from the initial weights, comes back trained."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, MIXUP)
    _cell(shell, MIXUP_FIT)
    one = _cell(shell, MIXUP_CHECK)["test_acc"]
    _in_folder(monkeypatch, tmp_path / "two")
    model = _cell(shell, MIXUP)["model"]
    ns = _cell(shell, MIXUP_FIT, distribute=True)
    assert ns["model"] is model and model.optimizer.iterations.numpy() == 8 * 9  # 19 batches: 9 a rank
    ns = _cell(shell, MIXUP_CHECK)
    assert one > 0.7 and ns["test_acc"] > one - 0.15, (ns["test_acc"], one)
