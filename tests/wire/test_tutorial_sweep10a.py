"""Tutorials, sweep 10a: keras.io examples as keras.io writes them (Keras 3 versions), set up in plain cells,
`%%distribute -n 2` on the training cell, the tutorial's later cells in plain cells after it.

"Image segmentation with a U-Net-like architecture" (the Oxford Pets data through a notebook
`OxfordPets(keras.utils.PyDataset)` with `__len__` / `__getitem__` and `**kwargs` to the PyDataset constructor,
`get_model(img_size, num_classes)` with residual blocks of SeparableConv2D / Conv2DTranspose / UpSampling2D, `fit`
with `validation_data=val_gen` and a `ModelCheckpoint("oxford_segmentation.keras", save_best_only=True)`, then
`model.predict(val_gen)`) and "Neural style transfer" (a notebook `tf.Variable` combination image optimized by a
`@tf.function` `compute_loss_and_grads` and an SGD with an `ExponentialDecay` schedule in a plain loop; a tiny conv
net stands in for VGG19's ImageNet weights), "Masked Language Modeling with BERT" (a `MaskedLanguageModel` with its own
`train_step` and a module-level `loss_tracker`, a `MaskedTextGenerator` callback, `save`, then a classifier over the
saved encoder fine-tuned frozen and unfrozen in a later distributed cell; positions embedded as the page's earlier
version did, keras_hub being absent) and "Text classification with Switch Transformer" (`Router` with `add_loss`,
`Switch`, `TransformerBlock` taking it as `ffn`); the Functional API guide's multi-input, multi-output ticket model
with a `loss_weights` dict and a shared Embedding, and the masking guide's `CustomEmbedding` (`compute_mask`),
`TemporalSoftmax` (`supports_masking`; its sum kept off 0 at masked steps, where the guide's NaN fails in one
process too, feeding an LSTM) and `layers.Masking`.
Each runs in one process and on two ranks; the later plain cells must work after both, with comparable results.
Data is synthetic, in the tutorials' shapes (smaller images), the models smaller.
"""

import os

import numpy as np
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


# ---------------------------------------------------------------------------------------- keras.io U-Net segmentation

UNET = """
import numpy as np
import keras
from keras import layers

keras.utils.set_random_seed(0)

img_size = (32, 32)
num_classes = 3
batch_size = 8

# The Oxford Pets images and trimaps, in their shape: RGB images, masks of classes 0..2 (the tutorial subtracts 1
# from the trimap's 1..3). Here a bright square (class 1) with a border (class 2) on a background (class 0).
rng = np.random.default_rng(0)
def make_pet(i):
    img = rng.uniform(0, 60, (*img_size, 3)).astype("float32")
    mask = np.zeros(img_size, "uint8")
    r, c = rng.integers(4, 16, 2)
    mask[r - 2 : r + 14, c - 2 : c + 14] = 2
    mask[r : r + 12, c : c + 12] = 1
    img[mask == 1] += 180
    img[mask == 2] += 90
    return img, mask

pets = [make_pet(i) for i in range(96)]
input_img_paths = list(range(80))
target_img_paths = list(range(80))
val_input_img_paths = list(range(80, 96))
val_target_img_paths = list(range(80, 96))


class OxfordPets(keras.utils.PyDataset):
    \"\"\"Helper to iterate over the data (as Numpy arrays).\"\"\"

    def __init__(self, batch_size, img_size, input_img_paths, target_img_paths, **kwargs):
        super().__init__(**kwargs)
        self.batch_size = batch_size
        self.img_size = img_size
        self.input_img_paths = input_img_paths
        self.target_img_paths = target_img_paths

    def __len__(self):
        return len(self.target_img_paths) // self.batch_size

    def __getitem__(self, idx):
        \"\"\"Returns tuple (input, target) correspond to batch #idx.\"\"\"
        i = idx * self.batch_size
        batch_input_img_paths = self.input_img_paths[i : i + self.batch_size]
        batch_target_img_paths = self.target_img_paths[i : i + self.batch_size]
        x = np.zeros((self.batch_size,) + self.img_size + (3,), dtype="float32")
        for j, path in enumerate(batch_input_img_paths):
            x[j] = pets[path][0]
        y = np.zeros((self.batch_size,) + self.img_size + (1,), dtype="uint8")
        for j, path in enumerate(batch_target_img_paths):
            y[j] = np.expand_dims(pets[path][1], 2)
        return x, y


def get_model(img_size, num_classes):
    inputs = keras.Input(shape=img_size + (3,))

    ### [First half of the network: downsampling inputs] ###

    # Entry block
    x = layers.Conv2D(8, 3, strides=2, padding="same")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    previous_block_activation = x  # Set aside residual

    # Blocks 1, 2 are identical apart from the feature depth.
    for filters in [16, 32]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)

        # Project residual
        residual = layers.Conv2D(filters, 1, strides=2, padding="same")(previous_block_activation)
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    ### [Second half of the network: upsampling inputs] ###

    for filters in [32, 16, 8]:
        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.UpSampling2D(2)(x)

        # Project residual
        residual = layers.UpSampling2D(2)(previous_block_activation)
        residual = layers.Conv2D(filters, 1, padding="same")(residual)
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    # Add a per-pixel classification layer
    outputs = layers.Conv2D(num_classes, 3, activation="softmax", padding="same")(x)

    # Define the model
    model = keras.Model(inputs, outputs)
    return model


# Build model
model = get_model(img_size, num_classes)

# Instantiate data Sequences for each split
train_gen = OxfordPets(batch_size, img_size, input_img_paths, target_img_paths)
val_gen = OxfordPets(batch_size, img_size, val_input_img_paths, val_target_img_paths)

# Configure the model for training.
# We use the "sparse" version of categorical_crossentropy
# because our target data is integers.
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
"""

UNET_FIT = """
callbacks = [
    keras.callbacks.ModelCheckpoint("oxford_segmentation.keras", save_best_only=True)
]

# Train the model, doing validation at the end of each epoch.
epochs = 4
history = model.fit(
    train_gen,
    epochs=epochs,
    validation_data=val_gen,
    callbacks=callbacks,
    verbose=2,
)
"""

UNET_AFTER = """
# Generate predictions for all images in the validation set
val_gen = OxfordPets(batch_size, img_size, val_input_img_paths, val_target_img_paths)
val_preds = model.predict(val_gen)

def display_mask(i):
    \"\"\"Quick utility to display a model's prediction.\"\"\"
    mask = np.argmax(val_preds[i], axis=-1)
    mask = np.expand_dims(mask, axis=-1)
    return keras.utils.array_to_img(mask)

img = display_mask(3)
pixel_accuracy = float(np.mean(np.argmax(val_preds, -1) == np.stack([pets[p][1] for p in val_target_img_paths])))
best = keras.models.load_model("oxford_segmentation.keras")
val_loss = model.evaluate(val_gen, verbose=0)
best_loss = best.evaluate(val_gen, verbose=0)
"""


def test_unet_segmentation_pydataset_checkpoint_predict(shell, tmp_path, monkeypatch):
    """The U-Net trains on the notebook's OxfordPets PyDataset with a best-only checkpoint; afterwards the notebook's
    `model` (the same object, its optimizer advanced) predicts the validation set and the checkpoint loads."""
    _in_folder(monkeypatch, str(tmp_path / "one"))
    _cell(shell, UNET)
    _cell(shell, UNET_FIT)
    one = dict(_cell(shell, UNET_AFTER))
    _in_folder(monkeypatch, str(tmp_path / "two"))
    ns = _cell(shell, UNET)
    model, optimizer = ns["model"], ns["model"].optimizer
    before = [w.numpy().copy() for w in model.trainable_weights]
    ns = _cell(shell, UNET_FIT, distribute=True)
    assert ns["model"] is model and model.optimizer is optimizer
    assert optimizer.iterations.numpy() == 4 * 5  # 10 batches of 8, 5 a rank, 4 epochs
    assert all(not np.allclose(b, w.numpy()) for b, w in zip(before, model.trainable_weights))
    assert len(ns["history"].history["val_loss"]) == 4
    assert os.path.exists("oxford_segmentation.keras")
    ns = _cell(shell, UNET_AFTER)
    assert ns["val_preds"].shape == (16, 32, 32, 3)
    close(ns["val_loss"], one["val_loss"], 2.0, "the U-Net's validation loss")
    close(ns["pixel_accuracy"], one["pixel_accuracy"], 1.5, "the U-Net's pixel accuracy")
    assert ns["best_loss"] <= min(ns["history"].history["val_loss"]) * 1.05 + 1e-3


# ------------------------------------------------------------------------------------ keras.io neural style transfer

STYLE = """
import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(0)

img_nrows, img_ncols = 32, 32
rng = np.random.default_rng(0)
# The photos, as arrays in place of files (preprocess_image takes them where keras.io loads a path).
base_image_path = rng.uniform(0, 255, (img_nrows, img_ncols, 3)).astype("float32")
style_reference_image_path = np.tile(np.linspace(0, 255, img_ncols, dtype="float32")[None, :, None], (img_nrows, 1, 3))

# Weights of the different loss components
total_variation_weight = 1e-6
style_weight = 1e-6
content_weight = 2.5e-8


def preprocess_image(image):
    # Util function to open, resize and format pictures into appropriate tensors
    img = np.expand_dims(image, axis=0)
    img = keras.applications.vgg19.preprocess_input(img)
    return tf.convert_to_tensor(img)


def deprocess_image(x):
    # Util function to convert a tensor into a valid image
    x = x.reshape((img_nrows, img_ncols, 3))
    # Remove zero-center by mean pixel
    x[:, :, 0] += 103.939
    x[:, :, 1] += 116.779
    x[:, :, 2] += 123.68
    # 'BGR'->'RGB'
    x = x[:, :, ::-1]
    x = np.clip(x, 0, 255).astype("uint8")
    return x


def gram_matrix(x):
    x = tf.transpose(x, (2, 0, 1))
    features = tf.reshape(x, (tf.shape(x)[0], -1))
    gram = tf.matmul(features, tf.transpose(features))
    return gram


def style_loss(style, combination):
    S = gram_matrix(style)
    C = gram_matrix(combination)
    channels = 3
    size = img_nrows * img_ncols
    return tf.reduce_sum(tf.square(S - C)) / (4.0 * (channels**2) * (size**2))


def content_loss(base, combination):
    return tf.reduce_sum(tf.square(combination - base))


def total_variation_loss(x):
    a = tf.square(x[:, : img_nrows - 1, : img_ncols - 1, :] - x[:, 1:, : img_ncols - 1, :])
    b = tf.square(x[:, : img_nrows - 1, : img_ncols - 1, :] - x[:, : img_nrows - 1, 1:, :])
    return tf.reduce_sum(tf.pow(a + b, 1.25))


# A tiny VGG-like net in place of VGG19's ImageNet weights, its layers named as VGG19's.
inputs = keras.Input((None, None, 3))
x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="block1_conv1")(inputs)
x = keras.layers.MaxPooling2D(name="block1_pool")(x)
x = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="block2_conv1")(x)
x = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="block5_conv2")(x)
model = keras.Model(inputs, x)

# Get the symbolic outputs of each "key" layer (we gave them unique names).
outputs_dict = dict([(layer.name, layer.output) for layer in model.layers])

# Set up a model that returns the activation values for every layer in
# VGG19 (as a dict).
feature_extractor = keras.Model(inputs=model.inputs, outputs=outputs_dict)

# List of layers to use for the style loss.
style_layer_names = ["block1_conv1", "block2_conv1"]
# The layer to use for the content loss.
content_layer_name = "block5_conv2"


def compute_loss(combination_image, base_image, style_reference_image):
    input_tensor = tf.concat([base_image, style_reference_image, combination_image], axis=0)
    features = feature_extractor(input_tensor)

    # Initialize the loss
    loss = tf.zeros(shape=())

    # Add content loss
    layer_features = features[content_layer_name]
    base_image_features = layer_features[0, :, :, :]
    combination_features = layer_features[2, :, :, :]
    loss = loss + content_weight * content_loss(base_image_features, combination_features)
    # Add style loss
    for layer_name in style_layer_names:
        layer_features = features[layer_name]
        style_reference_features = layer_features[1, :, :, :]
        combination_features = layer_features[2, :, :, :]
        sl = style_loss(style_reference_features, combination_features)
        loss += (style_weight / len(style_layer_names)) * sl

    # Add total variation loss
    loss += total_variation_weight * total_variation_loss(combination_image)
    return loss


@tf.function
def compute_loss_and_grads(combination_image, base_image, style_reference_image):
    with tf.GradientTape() as tape:
        loss = compute_loss(combination_image, base_image, style_reference_image)
    grads = tape.gradient(loss, combination_image)
    return loss, grads


optimizer = keras.optimizers.SGD(
    keras.optimizers.schedules.ExponentialDecay(initial_learning_rate=100.0, decay_steps=100, decay_rate=0.96)
)

base_image = preprocess_image(base_image_path)
style_reference_image = preprocess_image(style_reference_image_path)
combination_image = tf.Variable(preprocess_image(base_image_path))
"""

STYLE_LOOP = """
iterations = 20
losses = []
for i in range(1, iterations + 1):
    loss, grads = compute_loss_and_grads(combination_image, base_image, style_reference_image)
    optimizer.apply_gradients([(grads, combination_image)])
    losses.append(float(loss))
    if i % 10 == 0:
        print("Iteration %d: loss=%.2f" % (i, loss))
        img = deprocess_image(combination_image.numpy())
        keras.utils.save_img("style_at_iteration_%d.png" % i, img)
"""

STYLE_AFTER = """
final = combination_image.numpy().copy()
final_loss = float(compute_loss(combination_image, base_image, style_reference_image))
picture = deprocess_image(combination_image.numpy())
"""


def test_neural_style_transfer_notebook_variable_optimized(shell, tmp_path, monkeypatch):
    """The loop optimizes the notebook's `combination_image` tf.Variable in place through the notebook's SGD with a
    decaying schedule: afterwards it holds the image one process makes, and `optimizer.iterations` is 20."""
    _in_folder(monkeypatch, str(tmp_path / "one"))
    ns = _cell(shell, STYLE)
    start = ns["combination_image"].numpy().copy()
    _cell(shell, STYLE_LOOP)
    one = dict(_cell(shell, STYLE_AFTER))
    assert not np.allclose(one["final"], start)
    _cell(shell, STYLE_LOOP)  # run again: the optimizer goes on from its state
    one_again = dict(_cell(shell, STYLE_AFTER))
    _in_folder(monkeypatch, str(tmp_path / "two"))
    ns = _cell(shell, STYLE)
    combination_image, optimizer = ns["combination_image"], ns["optimizer"]
    assert np.allclose(combination_image.numpy(), start)
    ns = _cell(shell, STYLE_LOOP, distribute=True)
    assert ns["combination_image"] is combination_image
    assert ns["optimizer"] is optimizer
    assert optimizer.iterations.numpy() == 20
    assert not np.allclose(combination_image.numpy(), start)
    assert os.path.exists("style_at_iteration_20.png")
    ns = _cell(shell, STYLE_AFTER)
    np.testing.assert_allclose(ns["final"], one["final"], rtol=1e-3, atol=1e-2)
    close(ns["final_loss"], one["final_loss"], 1.01, "the style transfer's loss afterwards")
    ns = _cell(shell, STYLE_LOOP, distribute=True)
    assert ns["optimizer"] is optimizer and ns["combination_image"] is combination_image
    assert optimizer.iterations.numpy() == 40
    ns = _cell(shell, STYLE_AFTER)
    np.testing.assert_allclose(ns["final"], one_again["final"], rtol=1e-3, atol=5e-2)


# -------------------------------------------------------------------------------- keras.io Masked Language Modeling
# keras.io's Keras 3 page embeds positions with keras_hub's PositionEmbedding; keras_hub is not installed here, so the
# model embeds them as the page's earlier version did: an Embedding initialised by `get_pos_encoding_matrix`.

MLM = r"""
import re
from pprint import pprint
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
import keras
from keras import layers
from keras.layers import TextVectorization

keras.utils.set_random_seed(0)


@dataclass
class Config:
    MAX_LEN = 16
    BATCH_SIZE = 32
    LR = 0.001
    VOCAB_SIZE = 25  # the words of the reviews, "", "[UNK]" and "[mask]"
    EMBED_DIM = 16
    NUM_HEAD = 2  # used in bert model
    FF_DIM = 16  # used in bert model
    NUM_LAYERS = 1


config = Config()

# IMDB reviews, in their shape: short texts over a small vocabulary, "positive" words in the reviews labelled 1.
rng = np.random.default_rng(0)
neutral = ["the", "movie", "film", "was", "this", "i", "have", "watched", "and", "it", "a", "story", "actor", "plot"]
good, bad = ["awesome", "great", "wonderful", "loved"], ["awful", "boring", "terrible", "hated"]
reviews, sentiments = [], []
for k in range(320):
    label = k % 2
    words = list(rng.choice(neutral, 8)) + list(rng.choice(good if label else bad, 3))
    rng.shuffle(words)
    reviews.append(" ".join(words) + "<br />!")
    sentiments.append(label)
train_reviews, train_labels = reviews[:256], np.array(sentiments[:256])
test_reviews, test_labels = reviews[256:], np.array(sentiments[256:])


def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(stripped_html, "[%s]" % re.escape("!#$%&'()*+,-./:;<=>?@\^_`{|}~"), "")


def get_vectorize_layer(texts, vocab_size, max_seq, special_tokens=["[MASK]"]):
    vectorize_layer = TextVectorization(
        max_tokens=vocab_size,
        output_mode="int",
        standardize=custom_standardization,
        output_sequence_length=max_seq,
    )
    vectorize_layer.adapt(texts)

    # Insert mask token in vocabulary
    vocab = vectorize_layer.get_vocabulary()
    vocab = vocab[2 : vocab_size - len(special_tokens)] + ["[mask]"]
    vectorize_layer.set_vocabulary(vocab)
    return vectorize_layer


vectorize_layer = get_vectorize_layer(reviews, config.VOCAB_SIZE, config.MAX_LEN, special_tokens=["[mask]"])

# Get mask token id for masked language model
mask_token_id = vectorize_layer(["[mask]"]).numpy()[0][0]


def encode(texts):
    encoded_texts = vectorize_layer(texts)
    return encoded_texts.numpy()


def get_masked_input_and_labels(encoded_texts):
    # 15% BERT masking
    inp_mask = np.random.rand(*encoded_texts.shape) < 0.15
    # Do not mask special tokens
    inp_mask[encoded_texts <= 2] = False
    # Set targets to -1 by default, it means ignore
    labels = -1 * np.ones(encoded_texts.shape, dtype=int)
    # Set labels for masked tokens
    labels[inp_mask] = encoded_texts[inp_mask]

    # Prepare input
    encoded_texts_masked = np.copy(encoded_texts)
    # Set input to [MASK] which is the last token for the 90% of tokens
    # This means leaving 10% unchanged
    inp_mask_2mask = inp_mask & (np.random.rand(*encoded_texts.shape) < 0.90)
    encoded_texts_masked[inp_mask_2mask] = mask_token_id  # mask token is the last in the dict

    # Set 10% to a random token
    inp_mask_2random = inp_mask_2mask & (np.random.rand(*encoded_texts.shape) < 1 / 9)
    encoded_texts_masked[inp_mask_2random] = np.random.randint(3, mask_token_id, inp_mask_2random.sum())

    # Prepare sample_weights to pass to .fit() method
    sample_weights = np.ones(labels.shape)
    sample_weights[labels == -1] = 0

    # y_labels would be same as encoded_texts i.e input tokens
    y_labels = np.copy(encoded_texts)

    return encoded_texts_masked, y_labels, sample_weights


x_train = encode(train_reviews)
y_train = train_labels
x_test = encode(test_reviews)
y_test = test_labels

train_classifier_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1000).batch(config.BATCH_SIZE)
test_classifier_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(config.BATCH_SIZE)

x_all_review = encode(reviews)
x_masked_train, y_masked_labels, sample_weights = get_masked_input_and_labels(x_all_review)

mlm_ds = tf.data.Dataset.from_tensor_slices((x_masked_train, y_masked_labels, sample_weights))
mlm_ds = mlm_ds.shuffle(1000).batch(config.BATCH_SIZE)


def bert_module(query, key, value, i):
    # Multi headed self-attention
    attention_output = layers.MultiHeadAttention(
        num_heads=config.NUM_HEAD,
        key_dim=config.EMBED_DIM // config.NUM_HEAD,
        name="encoder_{}_multiheadattention".format(i),
    )(query, key, value)
    attention_output = layers.Dropout(0.1, name="encoder_{}_att_dropout".format(i))(attention_output)
    attention_output = layers.LayerNormalization(epsilon=1e-6, name="encoder_{}_att_layernormalization".format(i))(
        query + attention_output
    )

    # Feed-forward layer
    ffn = keras.Sequential(
        [
            layers.Dense(config.FF_DIM, activation="relu"),
            layers.Dense(config.EMBED_DIM),
        ],
        name="encoder_{}_ffn".format(i),
    )
    ffn_output = ffn(attention_output)
    ffn_output = layers.Dropout(0.1, name="encoder_{}_ffn_dropout".format(i))(ffn_output)
    sequence_output = layers.LayerNormalization(epsilon=1e-6, name="encoder_{}_ffn_layernormalization".format(i))(
        attention_output + ffn_output
    )
    return sequence_output


def get_pos_encoding_matrix(max_len, d_emb):
    pos_enc = np.array(
        [[pos / np.power(10000, 2 * (j // 2) / d_emb) for j in range(d_emb)] if pos != 0 else np.zeros(d_emb)
         for pos in range(max_len)]
    )
    pos_enc[1:, 0::2] = np.sin(pos_enc[1:, 0::2])  # dim 2i
    pos_enc[1:, 1::2] = np.cos(pos_enc[1:, 1::2])  # dim 2i+1
    return pos_enc


loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)
loss_tracker = keras.metrics.Mean(name="loss")


class MaskedLanguageModel(keras.Model):
    def train_step(self, inputs):
        if len(inputs) == 3:
            features, labels, sample_weight = inputs
        else:
            features, labels = inputs
            sample_weight = None

        with tf.GradientTape() as tape:
            predictions = self(features, training=True)
            loss = loss_fn(labels, predictions, sample_weight=sample_weight)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))

        # Compute our own metrics
        loss_tracker.update_state(loss, sample_weight=sample_weight)

        # Return a dict mapping metric names to current value
        return {"loss": loss_tracker.result()}

    @property
    def metrics(self):
        # We list our `Metric` objects here so that `reset_states()` can be
        # called automatically at the start of each epoch
        # or at the start of `evaluate()`.
        return [loss_tracker]


def create_masked_language_bert_model():
    inputs = layers.Input((config.MAX_LEN,), dtype="int64")

    word_embeddings = layers.Embedding(config.VOCAB_SIZE, config.EMBED_DIM, name="word_embedding")(inputs)
    position_embeddings = layers.Embedding(
        input_dim=config.MAX_LEN,
        output_dim=config.EMBED_DIM,
        weights=[get_pos_encoding_matrix(config.MAX_LEN, config.EMBED_DIM)],
        name="position_embedding",
    )(tf.range(start=0, limit=config.MAX_LEN, delta=1))
    embeddings = word_embeddings + position_embeddings

    encoder_output = embeddings
    for i in range(config.NUM_LAYERS):
        encoder_output = bert_module(encoder_output, encoder_output, encoder_output, i)

    mlm_output = layers.Dense(config.VOCAB_SIZE, name="mlm_cls", activation="softmax")(encoder_output)
    mlm_model = MaskedLanguageModel(inputs, mlm_output, name="masked_bert_model")

    optimizer = keras.optimizers.Adam(learning_rate=config.LR)
    mlm_model.compile(optimizer=optimizer)
    return mlm_model


id2token = dict(enumerate(vectorize_layer.get_vocabulary()))
token2id = {y: x for x, y in id2token.items()}


class MaskedTextGenerator(keras.callbacks.Callback):
    def __init__(self, sample_tokens, top_k=5):
        self.sample_tokens = sample_tokens
        self.k = top_k

    def decode(self, tokens):
        return " ".join([id2token[t] for t in tokens if t != 0])

    def convert_ids_to_tokens(self, id):
        return id2token[id]

    def on_epoch_end(self, epoch, logs=None):
        prediction = self.model.predict(self.sample_tokens)

        masked_index = np.where(self.sample_tokens == mask_token_id)
        masked_index = masked_index[1]
        mask_prediction = prediction[0][masked_index]

        top_indices = mask_prediction[0].argsort()[-self.k :][::-1]
        values = mask_prediction[0][top_indices]

        for i in range(len(top_indices)):
            p = top_indices[i]
            v = values[i]
            tokens = np.copy(sample_tokens[0])
            tokens[masked_index[0]] = p
            result = {
                "input_text": self.decode(sample_tokens[0].numpy()),
                "prediction": self.decode(tokens),
                "probability": v,
                "predicted mask token": self.convert_ids_to_tokens(p),
            }
            pprint(result)


sample_tokens = vectorize_layer(["I have watched this [mask] and it was awesome"])
generator_callback = MaskedTextGenerator(sample_tokens.numpy())

bert_masked_model = create_masked_language_bert_model()
bert_masked_model.summary()
"""

MLM_FIT = """
bert_masked_model.fit(mlm_ds, epochs=3, callbacks=[generator_callback])
bert_masked_model.save("bert_mlm_imdb.keras")
"""

MLM_AFTER = """
mlm_loss = float(loss_tracker.result())
# Load pretrained bert model
mlm_model = keras.models.load_model(
    "bert_mlm_imdb.keras", custom_objects={"MaskedLanguageModel": MaskedLanguageModel}
)
pretrained_bert_model = keras.Model(
    mlm_model.input, mlm_model.get_layer("encoder_0_ffn_layernormalization").output
)

# Freeze it
pretrained_bert_model.trainable = False


def create_classifier_bert_model():
    inputs = layers.Input((config.MAX_LEN,), dtype="int64")
    sequence_output = pretrained_bert_model(inputs)
    pooled_output = layers.GlobalMaxPooling1D()(sequence_output)
    hidden_layer = layers.Dense(64, activation="relu")(pooled_output)
    outputs = layers.Dense(1, activation="sigmoid")(hidden_layer)
    classifer_model = keras.Model(inputs, outputs, name="classification")
    optimizer = keras.optimizers.Adam()
    classifer_model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return classifer_model


classifer_model = create_classifier_bert_model()
same_predictions = np.allclose(
    mlm_model.predict(x_test[:4], verbose=0), bert_masked_model.predict(x_test[:4], verbose=0), atol=1e-5
)
"""

CLS_FIT = """
# Train the classifier with frozen BERT stage
classifer_model.fit(
    train_classifier_ds,
    epochs=3,
    validation_data=test_classifier_ds,
)

# Unfreeze the BERT model for fine-tuning
pretrained_bert_model.trainable = True
optimizer = keras.optimizers.Adam()
classifer_model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
classifer_model.fit(
    train_classifier_ds,
    epochs=2,
    validation_data=test_classifier_ds,
)
"""

CLS_AFTER = """
def get_end_to_end(model):
    inputs_string = keras.Input(shape=(1,), dtype="string")
    indices = vectorize_layer(inputs_string)
    outputs = model(indices)
    end_to_end_model = keras.Model(inputs_string, outputs, name="end_to_end_model")
    optimizer = keras.optimizers.Adam(learning_rate=config.LR)
    end_to_end_model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return end_to_end_model


end_to_end_classification_model = get_end_to_end(classifer_model)
cls_loss, cls_accuracy = classifer_model.evaluate(test_classifier_ds, verbose=0)
e2e = end_to_end_classification_model.predict(tf.constant([[r] for r in test_reviews]), verbose=0)
"""


def test_masked_language_model_bert_then_classifier(shell, tmp_path, monkeypatch):
    """The MLM model (a `MaskedLanguageModel` functional subclass with its own train_step and a module-level
    `loss_tracker`) trains under %%distribute with the notebook's `MaskedTextGenerator` callback and is saved on the
    ranks; its saved encoder feeds a classifier fine-tuned under %%distribute in a later cell (frozen, then unfrozen
    and compiled again with a new `optimizer`)."""
    _in_folder(monkeypatch, str(tmp_path / "one"))
    for code in (MLM, MLM_FIT):
        _cell(shell, code)
    one = dict(_cell(shell, MLM_AFTER))
    _cell(shell, CLS_FIT)
    one.update(_cell(shell, CLS_AFTER))
    _in_folder(monkeypatch, str(tmp_path / "two"))
    ns = _cell(shell, MLM)
    model, tracker, callback = ns["bert_masked_model"], ns["loss_tracker"], ns["generator_callback"]
    before = [w.numpy().copy() for w in model.trainable_weights]
    ns = _cell(shell, MLM_FIT, distribute=True)
    assert ns["bert_masked_model"] is model and ns["loss_tracker"] is tracker
    assert ns["generator_callback"] is callback
    assert model.optimizer.iterations.numpy() == 3 * 5  # 10 batches of 32, 5 a rank
    assert all(not np.allclose(b, w.numpy()) for b, w in zip(before, model.trainable_weights))
    assert os.path.exists("bert_mlm_imdb.keras")
    ns = _cell(shell, MLM_AFTER)
    assert ns["same_predictions"]
    close(ns["mlm_loss"], one["mlm_loss"], 1.3, "the MLM's loss tracker")
    classifier, encoder = ns["classifer_model"], ns["pretrained_bert_model"]
    frozen = [w.numpy().copy() for w in encoder.weights]
    ns = _cell(shell, CLS_FIT, distribute=True)
    assert ns["classifer_model"] is classifier and ns["pretrained_bert_model"] is encoder
    assert classifier.optimizer is ns["optimizer"] and ns["optimizer"].iterations.numpy() == 2 * 4  # 8 batches
    assert encoder.trainable and classifier.layers[1] is encoder
    assert any(not np.allclose(b, w.numpy()) for b, w in zip(frozen, encoder.weights))
    ns = _cell(shell, CLS_AFTER)
    assert ns["e2e"].shape == (64, 1)
    close(ns["cls_loss"], one["cls_loss"], 1.5, "the classifier's test loss")


# ------------------------------------------------------------------------- keras.io Switch Transformer classification

SWITCH = """
import numpy as np
import keras
from keras import ops
from keras import layers

keras.utils.set_random_seed(0)

vocab_size = 100  # Only consider the top 20k words
num_tokens_per_example = 20  # Only consider the first 200 words of each movie review
embed_dim = 16  # Embedding size for each token.
num_heads = 2  # Number of attention heads
ff_dim = 16  # Hidden layer size in feedforward network.
num_experts = 4  # Number of experts used in the Switch Transformer.
batch_size = 50  # Batch size.
learning_rate = 0.001  # Learning rate.
dropout_rate = 0.25  # Dropout rate.
num_epochs = 3  # Number of epochs.
num_tokens_per_batch = batch_size * num_tokens_per_example  # Total number of tokens per batch.
print(f"Number of tokens per batch: {num_tokens_per_batch}")

# IMDB in its shape after pad_sequences: token ids, label 1 where "positive" tokens (2..9) outnumber "negative"
# ones (10..17).
rng = np.random.default_rng(0)
def reviews(n):
    x = rng.integers(18, vocab_size, (n, num_tokens_per_example))
    y = rng.integers(0, 2, n)
    for row, label in zip(x, y):
        token = rng.integers(2, 10) if label else rng.integers(10, 18)
        row[rng.choice(num_tokens_per_example, 5, replace=False)] = token
    return x, y

x_train, y_train = reviews(400)
x_val, y_val = reviews(100)
print(len(x_train), "Training sequences")
print(len(x_val), "Validation sequences")
x_train = keras.utils.pad_sequences(x_train, maxlen=num_tokens_per_example)
x_val = keras.utils.pad_sequences(x_val, maxlen=num_tokens_per_example)


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


def create_feedforward_network(ff_dim, embed_dim, name=None):
    return keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)], name=name)


def load_balanced_loss(router_probs, expert_mask):
    # router_probs [tokens_per_batch, num_experts] is the probability assigned for
    # each expert per token. expert_mask [tokens_per_batch, num_experts] contains
    # the expert with the highest router probability in one−hot format.

    num_experts = ops.shape(expert_mask)[-1]
    # Get the fraction of tokens routed to each expert.
    # density is a vector of length num experts that sums to 1.
    density = ops.mean(expert_mask, axis=0)
    # Get fraction of probability mass assigned to each expert from the router
    # across all tokens. density_proxy is a vector of length num experts that sums to 1.
    density_proxy = ops.mean(router_probs, axis=0)
    # Want both vectors to have uniform allocation (1/num experts) across all
    # num_expert elements. The two vectors will be pushed towards uniform allocation
    # when the dot product is minimized.
    loss = ops.mean(density_proxy * density) * ops.cast((num_experts**2), "float32")
    return loss


class Router(layers.Layer):
    def __init__(self, num_experts, expert_capacity):
        self.num_experts = num_experts
        self.route = layers.Dense(units=num_experts)
        self.expert_capacity = expert_capacity
        super().__init__()

    def call(self, inputs, training=False):
        # inputs shape: [tokens_per_batch, embed_dim]
        # router_logits shape: [tokens_per_batch, num_experts]
        router_logits = self.route(inputs)

        if training:
            # Add noise for exploration across experts.
            router_logits += keras.random.uniform(shape=router_logits.shape, minval=0.9, maxval=1.1)
        # Probabilities for each token of what expert it should be sent to.
        router_probs = keras.activations.softmax(router_logits, axis=-1)
        # Get the top−1 expert for each token. expert_gate is the top−1 probability
        # from the router for each token. expert_index is what expert each token
        # is going to be routed to.
        expert_gate, expert_index = ops.top_k(router_probs, k=1)
        # expert_mask shape: [tokens_per_batch, num_experts]
        expert_mask = ops.one_hot(expert_index, self.num_experts)
        # Compute load balancing loss.
        aux_loss = load_balanced_loss(router_probs, expert_mask)
        self.add_loss(aux_loss)
        # Experts have a fixed capacity, ensure we do not exceed it. Construct
        # the batch indices, to each expert, with position in expert
        # make sure that not more that expert capacity examples can be routed to
        # each expert.
        position_in_expert = ops.cast(ops.cumsum(expert_mask, axis=0) * expert_mask, "int32")
        # Keep only tokens that fit within expert capacity.
        expert_mask *= ops.cast(ops.less(ops.cast(position_in_expert, "int32"), self.expert_capacity), "float32")
        expert_mask_flat = ops.sum(expert_mask, axis=-1)
        # Mask out the experts that have overflowed the expert capacity.
        expert_gate *= expert_mask_flat
        # Combine expert outputs and scaling with router probability.
        # combine_tensor shape: [tokens_per_batch, num_experts, expert_capacity]
        combined_tensor = ops.expand_dims(
            expert_gate * expert_mask_flat * ops.squeeze(ops.one_hot(expert_index, self.num_experts), 1),
            -1,
        ) * ops.squeeze(ops.one_hot(position_in_expert, self.expert_capacity), 1)
        # Create binary dispatch_tensor [tokens_per_batch, num_experts, expert_capacity]
        # that is 1 if the token gets routed to the corresponding expert.
        dispatch_tensor = ops.cast(combined_tensor, "float32")

        return dispatch_tensor, combined_tensor


class Switch(layers.Layer):
    def __init__(self, num_experts, embed_dim, ff_dim, num_tokens_per_batch, capacity_factor=1):
        self.num_experts = num_experts
        self.embed_dim = embed_dim
        self.experts = [create_feedforward_network(ff_dim, embed_dim) for _ in range(num_experts)]

        self.expert_capacity = num_tokens_per_batch // self.num_experts
        self.router = Router(self.num_experts, self.expert_capacity)
        super().__init__()

    def call(self, inputs):
        batch_size = ops.shape(inputs)[0]
        num_tokens_per_example = ops.shape(inputs)[1]

        # inputs shape: [num_tokens_per_batch, embed_dim]
        inputs = ops.reshape(inputs, [num_tokens_per_batch, self.embed_dim])
        # dispatch_tensor shape: [expert_capacity, num_experts, tokens_per_batch]
        # combine_tensor shape: [tokens_per_batch, num_experts, expert_capacity]
        dispatch_tensor, combine_tensor = self.router(inputs)
        # expert_inputs shape: [num_experts, expert_capacity, embed_dim]
        expert_inputs = ops.einsum("ab,acd->cdb", inputs, dispatch_tensor)
        expert_inputs = ops.reshape(expert_inputs, [self.num_experts, self.expert_capacity, self.embed_dim])
        # Dispatch to experts
        expert_input_list = ops.unstack(expert_inputs, axis=0)
        expert_output_list = [
            self.experts[idx](expert_input) for idx, expert_input in enumerate(expert_input_list)
        ]
        # expert_outputs shape: [expert_capacity, num_experts, embed_dim]
        expert_outputs = ops.stack(expert_output_list, axis=1)
        # expert_outputs_combined shape: [tokens_per_batch, embed_dim]
        expert_outputs_combined = ops.einsum("abc,xba->xc", expert_outputs, combine_tensor)
        # output shape: [batch_size, num_tokens_per_example, embed_dim]
        outputs = ops.reshape(expert_outputs_combined, [batch_size, num_tokens_per_example, self.embed_dim])
        return outputs


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ffn, dropout_rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        # The ffn can be either a standard feedforward network or a switch
        # layer with a Mixture of Experts.
        self.ffn = ffn
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(dropout_rate)
        self.dropout2 = layers.Dropout(dropout_rate)

    def call(self, inputs, training=False):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output, training=training)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output, training=training)
        return self.layernorm2(out1 + ffn_output)


def create_classifier():
    switch = Switch(num_experts, embed_dim, ff_dim, num_tokens_per_batch)
    transformer_block = TransformerBlock(embed_dim // num_heads, num_heads, switch)

    inputs = layers.Input(shape=(num_tokens_per_example,))
    embedding_layer = TokenAndPositionEmbedding(num_tokens_per_example, vocab_size, embed_dim)
    x = embedding_layer(inputs)
    x = transformer_block(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(dropout_rate)(x)
    x = layers.Dense(ff_dim, activation="relu")(x)
    x = layers.Dropout(dropout_rate)(x)
    outputs = layers.Dense(2, activation="softmax")(x)

    classifier = keras.Model(inputs=inputs, outputs=outputs)
    return classifier


def run_experiment(classifier):
    classifier.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    history = classifier.fit(
        x_train,
        y_train,
        batch_size=batch_size,
        epochs=num_epochs,
        validation_data=(x_val, y_val),
    )
    return history
"""

SWITCH_FIT = """
classifier = create_classifier()
history = run_experiment(classifier)
"""

SWITCH_AFTER = """
val_loss, val_accuracy = classifier.evaluate(x_val, y_val, batch_size=batch_size, verbose=0)
val_probabilities = classifier.predict(x_val, batch_size=batch_size, verbose=0)
switch_layer = classifier.layers[2].ffn
router = switch_layer.router
"""


def test_switch_transformer_router_add_loss(shell):
    """The Switch Transformer's functional classifier of notebook layers (`Router` adding its load-balancing loss in
    `call`, `Switch` over a list of expert networks, a `TransformerBlock` taking the Switch as its `ffn`), made,
    compiled and fit in the distributed cell through the tutorial's functions: it comes back as the notebook's
    `classifier` with its layers' classes, and evaluates as one process's does."""
    _cell(shell, SWITCH)
    _cell(shell, SWITCH_FIT)
    one = dict(_cell(shell, SWITCH_AFTER))
    _cell(shell, SWITCH)
    ns = _cell(shell, SWITCH_FIT, distribute=True)
    classifier = ns["classifier"]
    assert classifier.optimizer.iterations.numpy() == 3 * 4  # 400 reviews, 200 a rank, batches of 50
    assert len(ns["history"].history["val_loss"]) == 3
    ns = _cell(shell, SWITCH_AFTER)
    assert type(ns["switch_layer"]).__name__ == "Switch" and type(ns["router"]).__name__ == "Router"
    assert ns["switch_layer"] is classifier.layers[2].ffn and len(ns["switch_layer"].experts) == 4
    assert ns["val_probabilities"].shape == (100, 2)
    close(ns["val_loss"], one["val_loss"], 1.5, "the Switch Transformer's validation loss")


# ------------------------------------------------------------- keras.io guides: the Functional API, masking & padding

FUNCTIONAL = """
import numpy as np
import keras
from keras import layers
from keras import ops

keras.utils.set_random_seed(0)

num_tags = 12  # Number of unique issue tags
num_words = 100  # Size of vocabulary obtained when preprocessing text data
num_departments = 4  # Number of departments for predictions

title_input = keras.Input(shape=(None,), name="title")  # Variable-length sequence of ints
body_input = keras.Input(shape=(None,), name="body")  # Variable-length sequence of ints
tags_input = keras.Input(shape=(num_tags,), name="tags")  # Binary vectors of size `num_tags`

# Embed each word in the title into a 8-dimensional vector
title_features = layers.Embedding(num_words, 8)(title_input)
# Embed each word in the text into a 8-dimensional vector
body_features = layers.Embedding(num_words, 8)(body_input)

# Reduce sequence of embedded words in the title into a single 16-dimensional vector
title_features = layers.LSTM(16)(title_features)
# Reduce sequence of embedded words in the body into a single 8-dimensional vector
body_features = layers.LSTM(8)(body_features)

# Merge all available features into a single large vector via concatenation
x = layers.concatenate([title_features, body_features, tags_input])

# Stick a logistic regression for priority prediction on top of the features
priority_pred = layers.Dense(1, name="priority")(x)
# Stick a department classifier on top of the features
department_pred = layers.Dense(num_departments, name="department")(x)

# Instantiate an end-to-end model predicting both priority and department
model = keras.Model(
    inputs=[title_input, body_input, tags_input],
    outputs={"priority": priority_pred, "department": department_pred},
)

model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss={
        "priority": keras.losses.BinaryCrossentropy(from_logits=True),
        "department": keras.losses.CategoricalCrossentropy(from_logits=True),
    },
    loss_weights={"priority": 1.0, "department": 0.2},
)

# Dummy input data
title_data = np.random.randint(num_words, size=(256, 10))
body_data = np.random.randint(num_words, size=(256, 20))
tags_data = np.random.randint(2, size=(256, num_tags)).astype("float32")

# Dummy target data
priority_targets = np.random.random(size=(256, 1))
dept_targets = np.random.randint(2, size=(256, num_departments))

# Shared layers: one embedding for two inputs.
shared_embedding = layers.Embedding(num_words, 8)
text_input_a = keras.Input(shape=(None,), dtype="int32")
text_input_b = keras.Input(shape=(None,), dtype="int32")
encoded_input_a = shared_embedding(text_input_a)
encoded_input_b = shared_embedding(text_input_b)
pooled = layers.concatenate([layers.GlobalAveragePooling1D()(encoded_input_a),
                             layers.GlobalAveragePooling1D()(encoded_input_b)])
shared_model = keras.Model([text_input_a, text_input_b], layers.Dense(1)(pooled))
shared_model.compile(optimizer="adam", loss="mse")


# The masking guide's custom embedding with its own mask.
class CustomEmbedding(keras.layers.Layer):
    def __init__(self, input_dim, output_dim, mask_zero=False, **kwargs):
        super().__init__(**kwargs)
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.mask_zero = mask_zero

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            shape=(self.input_dim, self.output_dim),
            initializer="random_normal",
            dtype="float32",
        )

    def call(self, inputs):
        inputs = ops.cast(inputs, "int32")
        return ops.take(self.embeddings, inputs, axis=0)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)


class TemporalSoftmax(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        assert mask is not None
        broadcast_float_mask = ops.expand_dims(ops.cast(mask, "float32"), -1)
        inputs_exp = ops.exp(inputs) * broadcast_float_mask
        inputs_sum = ops.sum(inputs_exp * broadcast_float_mask, axis=-1, keepdims=True)
        # The guide divides by inputs_sum alone: 0 / 0 at the masked steps, NaN that reaches the LSTM's weights.
        return inputs_exp / (inputs_sum + keras.backend.epsilon())


raw_inputs = [[711, 632, 71], [73, 8, 3215, 55, 927], [83, 91, 1, 645, 1253, 927]]
padded_inputs = keras.utils.pad_sequences(raw_inputs, padding="post") % num_words
sequences = keras.utils.pad_sequences(
    [np.random.randint(1, num_words, np.random.randint(3, 12)) for _ in range(256)], maxlen=12, padding="post"
)
labels = (sequences[:, 0] > num_words // 2).astype("float32")

inputs = keras.Input(shape=(None,), dtype="int32")
x = CustomEmbedding(num_words, 8, mask_zero=True)(inputs)
x = layers.Dense(8)(x)  # a Dense passes the mask along
x = TemporalSoftmax()(x)
x = layers.LSTM(8)(x)
masked_model = keras.Model(inputs, layers.Dense(1, activation="sigmoid")(x))
masked_model.compile(optimizer="adam", loss="binary_crossentropy")

# layers.Masking over timesteps of features, padded with zeros.
timesteps = np.random.random((256, 10, 4)).astype("float32")
timesteps[:, 6:, :] = 0.0
lstm_model = keras.Sequential([keras.Input((10, 4)), layers.Masking(mask_value=0.0), layers.LSTM(8), layers.Dense(1)])
lstm_model.compile(optimizer="adam", loss="mse")
"""

FUNCTIONAL_FIT = """
model.fit(
    {"title": title_data, "body": body_data, "tags": tags_data},
    {"priority": priority_targets, "department": dept_targets},
    epochs=2,
    batch_size=32,
)
shared_model.fit([title_data, body_data], priority_targets, epochs=2, batch_size=32, verbose=0)
masked_model.fit(sequences, labels, epochs=2, batch_size=32, verbose=0)
lstm_model.fit(timesteps, timesteps[:, 0, :1], epochs=2, batch_size=32, verbose=0)
"""

FUNCTIONAL_AFTER = """
ticket_loss = model.evaluate(
    {"title": title_data, "body": body_data, "tags": tags_data},
    {"priority": priority_targets, "department": dept_targets}, verbose=0,
)[0]
shared_loss = shared_model.evaluate([title_data, body_data], priority_targets, verbose=0)
masked_loss = masked_model.evaluate(sequences, labels, verbose=0)
lstm_loss = lstm_model.evaluate(timesteps, timesteps[:, 0, :1], verbose=0)
embedding_mask = masked_model.layers[1].compute_mask(padded_inputs)
masking_mask = lstm_model.layers[0].compute_mask(timesteps[:2])
"""


def test_functional_api_and_masking_guides(shell):
    """The Functional API guide's ticket model (three named inputs, a dict of two outputs, `loss_weights` dict), a
    model sharing one Embedding between two inputs, and the masking guide's `CustomEmbedding` with `compute_mask`
    feeding a `supports_masking` layer and an LSTM, and a `layers.Masking` LSTM, all fit in one distributed cell:
    each comes back as the notebook's object, trained, masks intact."""
    _cell(shell, FUNCTIONAL)
    _cell(shell, FUNCTIONAL_FIT)
    one = dict(_cell(shell, FUNCTIONAL_AFTER))
    ns = _cell(shell, FUNCTIONAL)
    models = {n: ns[n] for n in ("model", "shared_model", "masked_model", "lstm_model")}
    shared = ns["shared_embedding"]
    before = shared.embeddings.numpy().copy()
    ns = _cell(shell, FUNCTIONAL_FIT, distribute=True)
    for name, model in models.items():
        assert ns[name] is model, name
        assert model.optimizer.iterations.numpy() == 2 * 4, name  # 256 samples, 128 a rank, batches of 32
    assert ns["shared_embedding"] is shared and not np.allclose(before, shared.embeddings.numpy())
    assert models["shared_model"].layers[2] is shared
    ns = _cell(shell, FUNCTIONAL_AFTER)
    assert ns["embedding_mask"].numpy().tolist() == one["embedding_mask"].numpy().tolist()
    assert ns["masking_mask"].numpy()[:, :6].all() and not ns["masking_mask"].numpy()[:, 6:].any()
    for loss in ("ticket_loss", "shared_loss", "masked_loss", "lstm_loss"):
        close(ns[loss], one[loss], 1.5, loss)
