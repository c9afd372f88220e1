"""Tutorials, sweep 8b: as tensorflow.org and keras.io write them, set up in plain cells, `%%distribute -n 2` on fit.

tensorflow.org's "Neural machine translation with a Transformer and Keras" (a `CustomSchedule` learning-rate schedule
without get_config in an Adam made in a plain cell, the tutorial's attention layers, a `Transformer(tf.keras.Model)`
called on a `(context, x)` tuple, `masked_loss` / `masked_accuracy` notebook functions, a `tf.data` pipeline with a
`prepare_batch` map over ragged token rows, then the `Translator(tf.Module)` greedy loop over a `tf.TensorArray` and
the schedule's rate at the optimizer's step), keras.io's "Masked image modeling with Autoencoders" (a `WarmUpCosine`
schedule in an AdamW, `Patches` / `PatchEncoder` layers with a trainable mask token made in `build` and random masking
in `call`, a `MaskedAutoencoder` with its own train_step / test_step, a `TrainMonitor` that plots with `self.model`,
then its patch layer and encoder in a downstream classifier) and "Text generation with a miniature GPT" (a
`TextGenerator` callback sampling with `self.model.predict` at epoch ends, a two-output model compiled with
`[loss_fn, None]`). Each runs in one process and on two ranks; the later plain cells must work after both, with
comparable results. Data is synthetic, in the tutorials' shapes, the models smaller.
"""

import os

import numpy as np
from IPython.utils.capture import capture_output
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


def _distributed_showing(shell, code):
    """Runs the cell under `%%distribute -n 2`, as `_cell` does; also returns what the cell printed."""
    with capture_output() as shown:
        result = shell.run_cell("%%distribute -n 2 --backend horovod\n" + code, store_history=False)
    text = shown.stdout + shown.stderr
    assert result.success, f"{result.error_before_exec or result.error_in_exec!r}\n{text[-3000:]}"
    assert "did not come back" not in text and "the ranks trained apart" not in text, text
    return shell.user_ns, shown.stdout


# ------------------------------------------------------------------------------------- tensorflow.org Transformer

TRANSFORMER_DATA = """
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)

# The ted_hrlr_translate/pt_to_en pairs, already tokenized: [START]=2 ... [END]=3, 0 pads. The "translation" maps
# each Portuguese token to an English one and reverses the sentence.
rng = np.random.default_rng(0)
VOCAB = 40


def sentence_pair():
    words = rng.integers(4, VOCAB, rng.integers(3, 8))
    return [2, *words, 3], [2, *(VOCAB + 3 - words[::-1]), 3]


pairs = [sentence_pair() for _ in range(320)]
pt_tokens = tf.ragged.constant([p for p, _ in pairs], dtype=tf.int64)
en_tokens = tf.ragged.constant([e for _, e in pairs], dtype=tf.int64)
train_examples = tf.data.Dataset.from_tensor_slices((pt_tokens[:256], en_tokens[:256]))
val_examples = tf.data.Dataset.from_tensor_slices((pt_tokens[256:], en_tokens[256:]))

MAX_TOKENS = 128


def prepare_batch(pt, en):
    # tokenizers.pt.tokenize(pt) gave ragged rows; here they are ragged already.
    pt = pt[:, :MAX_TOKENS]  # Trim to MAX_TOKENS.
    pt = pt.to_tensor()  # Convert to 0-padded dense Tensor

    en = en[:, : (MAX_TOKENS + 1)]
    en_inputs = en[:, :-1].to_tensor()  # Drop the [END] tokens
    en_labels = en[:, 1:].to_tensor()  # Drop the [START] tokens

    return (pt, en_inputs), en_labels


BUFFER_SIZE = 20000
BATCH_SIZE = 32


def make_batches(ds):
    return ds.shuffle(BUFFER_SIZE).batch(BATCH_SIZE).map(prepare_batch, tf.data.AUTOTUNE).prefetch(
        buffer_size=tf.data.AUTOTUNE
    )


train_batches = make_batches(train_examples)
val_batches = make_batches(val_examples)
"""

TRANSFORMER_MODEL = """
def positional_encoding(length, depth):
    depth = depth / 2

    positions = np.arange(length)[:, np.newaxis]  # (seq, 1)
    depths = np.arange(depth)[np.newaxis, :] / depth  # (1, depth)

    angle_rates = 1 / (10000**depths)  # (1, depth)
    angle_rads = positions * angle_rates  # (pos, depth)

    pos_encoding = np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1)

    return tf.cast(pos_encoding, dtype=tf.float32)


class PositionalEmbedding(tf.keras.layers.Layer):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = tf.keras.layers.Embedding(vocab_size, d_model, mask_zero=True)
        self.pos_encoding = positional_encoding(length=2048, depth=d_model)

    def compute_mask(self, *args, **kwargs):
        return self.embedding.compute_mask(*args, **kwargs)

    def call(self, x):
        length = tf.shape(x)[1]
        x = self.embedding(x)
        # This factor sets the relative scale of the embedding and positonal_encoding.
        x *= tf.math.sqrt(tf.cast(self.d_model, tf.float32))
        x = x + self.pos_encoding[tf.newaxis, :length, :]
        return x


class BaseAttention(tf.keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__()
        self.mha = tf.keras.layers.MultiHeadAttention(**kwargs)
        self.layernorm = tf.keras.layers.LayerNormalization()
        self.add = tf.keras.layers.Add()


class CrossAttention(BaseAttention):
    def call(self, x, context):
        attn_output, attn_scores = self.mha(query=x, key=context, value=context, return_attention_scores=True)

        # Cache the attention scores for plotting later.
        self.last_attn_scores = attn_scores

        x = self.add([x, attn_output])
        x = self.layernorm(x)

        return x


class GlobalSelfAttention(BaseAttention):
    def call(self, x):
        attn_output = self.mha(query=x, value=x, key=x)
        x = self.add([x, attn_output])
        x = self.layernorm(x)
        return x


class CausalSelfAttention(BaseAttention):
    def call(self, x):
        attn_output = self.mha(query=x, value=x, key=x, use_causal_mask=True)
        x = self.add([x, attn_output])
        x = self.layernorm(x)
        return x


class FeedForward(tf.keras.layers.Layer):
    def __init__(self, d_model, dff, dropout_rate=0.1):
        super().__init__()
        self.seq = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(dff, activation="relu"),
                tf.keras.layers.Dense(d_model),
                tf.keras.layers.Dropout(dropout_rate),
            ]
        )
        self.add = tf.keras.layers.Add()
        self.layer_norm = tf.keras.layers.LayerNormalization()

    def call(self, x):
        x = self.add([x, self.seq(x)])
        x = self.layer_norm(x)
        return x


class EncoderLayer(tf.keras.layers.Layer):
    def __init__(self, *, d_model, num_heads, dff, dropout_rate=0.1):
        super().__init__()

        self.self_attention = GlobalSelfAttention(num_heads=num_heads, key_dim=d_model, dropout=dropout_rate)

        self.ffn = FeedForward(d_model, dff)

    def call(self, x):
        x = self.self_attention(x)
        x = self.ffn(x)
        return x


class Encoder(tf.keras.layers.Layer):
    def __init__(self, *, num_layers, d_model, num_heads, dff, vocab_size, dropout_rate=0.1):
        super().__init__()

        self.d_model = d_model
        self.num_layers = num_layers

        self.pos_embedding = PositionalEmbedding(vocab_size=vocab_size, d_model=d_model)

        self.enc_layers = [
            EncoderLayer(d_model=d_model, num_heads=num_heads, dff=dff, dropout_rate=dropout_rate)
            for _ in range(num_layers)
        ]
        self.dropout = tf.keras.layers.Dropout(dropout_rate)

    def call(self, x):
        # `x` is token-IDs shape: (batch, seq_len)
        x = self.pos_embedding(x)  # Shape `(batch_size, seq_len, d_model)`.

        # Add dropout.
        x = self.dropout(x)

        for i in range(self.num_layers):
            x = self.enc_layers[i](x)

        return x  # Shape `(batch_size, seq_len, d_model)`.


class DecoderLayer(tf.keras.layers.Layer):
    def __init__(self, *, d_model, num_heads, dff, dropout_rate=0.1):
        super(DecoderLayer, self).__init__()

        self.causal_self_attention = CausalSelfAttention(num_heads=num_heads, key_dim=d_model, dropout=dropout_rate)

        self.cross_attention = CrossAttention(num_heads=num_heads, key_dim=d_model, dropout=dropout_rate)

        self.ffn = FeedForward(d_model, dff)

    def call(self, x, context):
        x = self.causal_self_attention(x=x)
        x = self.cross_attention(x=x, context=context)

        # Cache the last attention scores for plotting later
        self.last_attn_scores = self.cross_attention.last_attn_scores

        x = self.ffn(x)  # Shape `(batch_size, seq_len, d_model)`.
        return x


class Decoder(tf.keras.layers.Layer):
    def __init__(self, *, num_layers, d_model, num_heads, dff, vocab_size, dropout_rate=0.1):
        super(Decoder, self).__init__()

        self.d_model = d_model
        self.num_layers = num_layers

        self.pos_embedding = PositionalEmbedding(vocab_size=vocab_size, d_model=d_model)
        self.dropout = tf.keras.layers.Dropout(dropout_rate)
        self.dec_layers = [
            DecoderLayer(d_model=d_model, num_heads=num_heads, dff=dff, dropout_rate=dropout_rate)
            for _ in range(num_layers)
        ]

        self.last_attn_scores = None

    def call(self, x, context):
        # `x` is token-IDs shape (batch, target_seq_len)
        x = self.pos_embedding(x)  # (batch_size, target_seq_len, d_model)

        x = self.dropout(x)

        for i in range(self.num_layers):
            x = self.dec_layers[i](x, context)

        self.last_attn_scores = self.dec_layers[-1].last_attn_scores

        # The shape of x is (batch_size, target_seq_len, d_model).
        return x


class Transformer(tf.keras.Model):
    def __init__(self, *, num_layers, d_model, num_heads, dff, input_vocab_size, target_vocab_size, dropout_rate=0.1):
        super().__init__()
        self.encoder = Encoder(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            vocab_size=input_vocab_size,
            dropout_rate=dropout_rate,
        )

        self.decoder = Decoder(
            num_layers=num_layers,
            d_model=d_model,
            num_heads=num_heads,
            dff=dff,
            vocab_size=target_vocab_size,
            dropout_rate=dropout_rate,
        )

        self.final_layer = tf.keras.layers.Dense(target_vocab_size)

    def call(self, inputs):
        # To use a Keras model with `.fit` you must pass all your inputs in the
        # first argument.
        context, x = inputs

        context = self.encoder(context)  # (batch_size, context_len, d_model)

        x = self.decoder(x, context)  # (batch_size, target_len, d_model)

        # Final linear layer output.
        logits = self.final_layer(x)  # (batch_size, target_len, target_vocab_size)

        try:
            # Drop the keras mask, so it doesn't scale the losses/metrics.
            # b/250038731
            del logits._keras_mask
        except AttributeError:
            pass

        # Return the final output and the attention weights.
        return logits


num_layers = 2
d_model = 32
dff = 64
num_heads = 2
dropout_rate = 0.1

transformer = Transformer(
    num_layers=num_layers,
    d_model=d_model,
    num_heads=num_heads,
    dff=dff,
    input_vocab_size=VOCAB,
    target_vocab_size=VOCAB,
    dropout_rate=dropout_rate,
)

for (pt, en), en_labels in train_batches.take(1):
    break
output = transformer((pt, en))


class CustomSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, d_model, warmup_steps=4000):
        super().__init__()

        self.d_model = d_model
        self.d_model = tf.cast(self.d_model, tf.float32)

        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.cast(step, dtype=tf.float32)
        arg1 = tf.math.rsqrt(step)
        arg2 = step * (self.warmup_steps**-1.5)

        return tf.math.rsqrt(self.d_model) * tf.math.minimum(arg1, arg2)


# The tutorial warms up over 4000 of its steps; these runs take 96 in all.
learning_rate = CustomSchedule(d_model, warmup_steps=100)

optimizer = tf.keras.optimizers.Adam(learning_rate, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def masked_loss(label, pred):
    mask = label != 0
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    loss = loss_object(label, pred)

    mask = tf.cast(mask, dtype=loss.dtype)
    loss *= mask

    loss = tf.reduce_sum(loss) / tf.reduce_sum(mask)
    return loss


def masked_accuracy(label, pred):
    pred = tf.argmax(pred, axis=2)
    label = tf.cast(label, pred.dtype)
    match = label == pred

    mask = label != 0

    match = match & mask

    match = tf.cast(match, dtype=tf.float32)
    mask = tf.cast(mask, dtype=tf.float32)
    return tf.reduce_sum(match) / tf.reduce_sum(mask)


transformer.compile(loss=masked_loss, optimizer=optimizer, metrics=[masked_accuracy])
"""

TRANSFORMER_FIT = """
history = transformer.fit(train_batches, epochs=12, validation_data=val_batches, verbose=0)
"""

TRANSFORMER_TRANSLATE = """
class Translator(tf.Module):
    def __init__(self, transformer):
        self.transformer = transformer

    def __call__(self, sentence, max_length=MAX_TOKENS):
        # The tokenizers' work is done: `sentence` holds the Portuguese tokens with [START] and [END].
        assert isinstance(sentence, tf.Tensor)
        if len(sentence.shape) == 1:
            sentence = sentence[tf.newaxis]

        encoder_input = sentence

        # As the output language is English, initialize the output with the
        # English `[START]` token.
        start_end = tf.constant([2, 3], dtype=tf.int64)
        start = start_end[0][tf.newaxis]
        end = start_end[1][tf.newaxis]

        # `tf.TensorArray` is required here (instead of a Python list), so that the
        # dynamic-loop can be traced by `tf.function`.
        output_array = tf.TensorArray(dtype=tf.int64, size=0, dynamic_size=True)
        output_array = output_array.write(0, start)

        for i in tf.range(max_length):
            output = tf.transpose(output_array.stack())
            predictions = self.transformer([encoder_input, output], training=False)

            # Select the last token from the `seq_len` dimension.
            predictions = predictions[:, -1:, :]  # Shape `(batch_size, 1, vocab_size)`.

            predicted_id = tf.argmax(predictions, axis=-1)

            # Concatenate the `predicted_id` to the output which is given to the
            # decoder as its input.
            output_array = output_array.write(i + 1, predicted_id[0])

            if predicted_id == end:
                break

        output = tf.transpose(output_array.stack())
        # The output shape is `(1, tokens)`.
        tokens = output[0]

        # `tf.function` prevents us from using the attention_weights that were
        # calculated on the last iteration of the loop.
        # So, recalculate them outside the loop.
        self.transformer([encoder_input, output[:, :-1]], training=False)
        attention_weights = self.transformer.decoder.last_attn_scores

        return tokens, attention_weights


translator = Translator(transformer)

translations = []
for p, e in pairs[256:272]:
    tokens, attention_weights = translator(tf.constant(p, dtype=tf.int64), max_length=10)
    translations.append((tokens.numpy().tolist(), e))
words_right = np.mean([t[: len(e)] == e for t, e in translations])

val_loss, val_accuracy = transformer.evaluate(val_batches, verbose=0)
rate_now = float(optimizer.learning_rate)
rate_by_schedule = float(learning_rate(optimizer.iterations))
step_now = int(optimizer.iterations)
"""


def _translate(shell, distribute):
    _cell(shell, TRANSFORMER_DATA)
    ns = _cell(shell, TRANSFORMER_MODEL)
    transformer, optimizer, schedule = ns["transformer"], ns["optimizer"], ns["learning_rate"]
    ns = _cell(shell, TRANSFORMER_FIT, distribute=distribute)
    assert ns["transformer"] is transformer and transformer.optimizer is optimizer
    assert ns["learning_rate"] is schedule and optimizer._learning_rate is schedule
    ns = _cell(shell, TRANSFORMER_TRANSLATE)
    assert ns["attention_weights"].shape[:2] == (1, 2), ns["attention_weights"].shape
    names = ["history", "val_loss", "val_accuracy", "words_right", "rate_now", "rate_by_schedule", "step_now"]
    return {name: ns[name] for name in names}


def test_tensorflow_org_transformer_custom_schedule_and_translator_after_a_distributed_fit(shell):
    """tensorflow.org's Transformer: the notebook's transformer and its Adam over a `CustomSchedule` (no get_config)
    come back trained; the Translator's TensorArray loop decodes with it, and the optimizer's rate is the notebook
    schedule's at the optimizer's step, unscaled."""
    one = _translate(shell, distribute=False)
    two = _translate(shell, distribute=True)
    assert one["step_now"] == 12 * 8 and two["step_now"] == 12 * 4  # 256 pairs in batches of 32, halved on two ranks
    for run in (one, two):
        assert np.isclose(run["rate_now"], run["rate_by_schedule"]), run
    assert one["val_accuracy"] > 0.3, one  # the synthetic task is being learnt in one process
    # Still warming up: two ranks took half as many steps, at the rates one process had at the same samples.
    assert two["val_accuracy"] > 0.2, two  # above the 0.17 of always saying [END]
    close(two["history"].history["loss"][-1], one["history"].history["loss"][-1], 1.6, "training loss")
    close(two["val_accuracy"], one["val_accuracy"], 2.0, "validation accuracy evaluated afterwards")


# ---------------------------------------------------------------------------------------------- keras.io MAE

MAE = """
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.utils.set_random_seed(42)

# Setting seeds for reproducibility.
SEED = 42

# DATA
BUFFER_SIZE = 1024
BATCH_SIZE = 32
AUTO = tf.data.AUTOTUNE
INPUT_SHAPE = (16, 16, 3)
NUM_CLASSES = 10

# OPTIMIZER
LEARNING_RATE = 5e-3
WEIGHT_DECAY = 1e-4

# PRETRAINING
EPOCHS = 4

# AUGMENTATION
IMAGE_SIZE = 24  # We will resize input images to this size.
PATCH_SIZE = 6  # Size of the patches to be extracted from the input images.
NUM_PATCHES = (IMAGE_SIZE // PATCH_SIZE) ** 2
MASK_PROPORTION = 0.75  # We have found 75% masking to give us the best results.

# ENCODER and DECODER
LAYER_NORM_EPS = 1e-6
ENC_PROJECTION_DIM = 32
DEC_PROJECTION_DIM = 16
ENC_NUM_HEADS = 2
ENC_LAYERS = 1
DEC_NUM_HEADS = 2
DEC_LAYERS = 1  # The decoder is lightweight but should be reasonably deep for reconstruction.
ENC_TRANSFORMER_UNITS = [
    ENC_PROJECTION_DIM * 2,
    ENC_PROJECTION_DIM,
]  # Size of the transformer layers.
DEC_TRANSFORMER_UNITS = [
    DEC_PROJECTION_DIM * 2,
    DEC_PROJECTION_DIM,
]

# CIFAR-10 in its dtype, smaller: blobs of a class's colour on noise.
rng = np.random.default_rng(0)


def images_of(n):
    labels = rng.integers(0, NUM_CLASSES, (n, 1))
    pictures = rng.integers(0, 60, (n, *INPUT_SHAPE))
    for picture, label in zip(pictures, labels[:, 0]):
        picture[4:12, 4:12] += np.array([25 * label, 250 - 25 * label, 120])[None, None, :].astype("int64")
    return np.clip(pictures, 0, 255).astype("uint8"), labels.astype("uint8")


(x_train, y_train), (x_test, y_test) = images_of(320), images_of(64)
(x_train, y_train), (x_val, y_val) = (
    (x_train[:256], y_train[:256]),
    (x_train[256:], y_train[256:]),
)

train_ds = tf.data.Dataset.from_tensor_slices(x_train)
train_ds = train_ds.shuffle(BUFFER_SIZE).batch(BATCH_SIZE).prefetch(AUTO)

val_ds = tf.data.Dataset.from_tensor_slices(x_val)
val_ds = val_ds.batch(BATCH_SIZE).prefetch(AUTO)

test_ds = tf.data.Dataset.from_tensor_slices(x_test)
test_ds = test_ds.batch(BATCH_SIZE).prefetch(AUTO)


def get_train_augmentation_model():
    model = keras.Sequential(
        [
            layers.Rescaling(1 / 255.0),
            layers.Resizing(INPUT_SHAPE[0] + 20, INPUT_SHAPE[0] + 20),
            layers.RandomCrop(IMAGE_SIZE, IMAGE_SIZE),
            layers.RandomFlip("horizontal"),
        ],
        name="train_data_augmentation",
    )
    return model


def get_test_augmentation_model():
    model = keras.Sequential(
        [
            layers.Rescaling(1 / 255.0),
            layers.Resizing(IMAGE_SIZE, IMAGE_SIZE),
        ],
        name="test_data_augmentation",
    )
    return model


class Patches(layers.Layer):
    def __init__(self, patch_size=PATCH_SIZE, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size

        # Assuming the image has three channels each patch would be
        # of size (patch_size, patch_size, 3).
        self.resize = layers.Reshape((-1, patch_size * patch_size * 3))

    def call(self, images):
        # Create patches from the input images
        patches = tf.image.extract_patches(
            images=images,
            sizes=[1, self.patch_size, self.patch_size, 1],
            strides=[1, self.patch_size, self.patch_size, 1],
            rates=[1, 1, 1, 1],
            padding="VALID",
        )

        # Reshape the patches to (batch, num_patches, patch_area) and return it.
        patches = self.resize(patches)
        return patches

    def reconstruct_from_patch(self, patch):
        # This utility function takes patches from a *single* image and
        # reconstructs it back into the image. This is useful for the train
        # monitor callback.
        num_patches = patch.shape[0]
        n = int(np.sqrt(num_patches))
        patch = tf.reshape(patch, (num_patches, self.patch_size, self.patch_size, 3))
        rows = tf.split(patch, n, axis=0)
        rows = [tf.concat(tf.unstack(x), axis=1) for x in rows]
        reconstructed = tf.concat(rows, axis=0)
        return reconstructed


class PatchEncoder(layers.Layer):
    def __init__(
        self,
        patch_size=PATCH_SIZE,
        projection_dim=ENC_PROJECTION_DIM,
        mask_proportion=MASK_PROPORTION,
        downstream=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.projection_dim = projection_dim
        self.mask_proportion = mask_proportion
        self.downstream = downstream

    def build(self, input_shape):
        (_, self.num_patches, self.patch_area) = input_shape

        # This is a trainable mask token initialized randomly from a normal
        # distribution.
        self.mask_token = self.add_weight(
            shape=(1, self.patch_area), initializer="random_normal", trainable=True, name="mask_token"
        )

        # Create the projection layer for the patches.
        self.projection = layers.Dense(units=self.projection_dim)

        # Create the positional embedding layer.
        self.position_embedding = layers.Embedding(input_dim=self.num_patches, output_dim=self.projection_dim)

        # Number of patches that will be masked.
        self.num_mask = int(self.mask_proportion * self.num_patches)

    def call(self, patches):
        # Get the positional embeddings.
        batch_size = tf.shape(patches)[0]
        positions = tf.range(start=0, limit=self.num_patches, delta=1)
        pos_embeddings = self.position_embedding(positions[tf.newaxis, ...])
        pos_embeddings = tf.tile(pos_embeddings, [batch_size, 1, 1])  # (B, num_patches, projection_dim)

        # Embed the patches.
        patch_embeddings = self.projection(patches) + pos_embeddings  # (B, num_patches, projection_dim)

        if self.downstream:
            return patch_embeddings
        else:
            mask_indices, unmask_indices = self.get_random_indices(batch_size)
            # The encoder input is the unmasked patch embeddings. Here we gather
            # all the patches that should be unmasked.
            unmasked_embeddings = tf.gather(
                patch_embeddings, unmask_indices, axis=1, batch_dims=1
            )  # (B, unmask_numbers, projection_dim)

            # Get the unmasked and masked position embeddings. We will need them
            # for the decoder.
            unmasked_positions = tf.gather(
                pos_embeddings, unmask_indices, axis=1, batch_dims=1
            )  # (B, unmask_numbers, projection_dim)
            masked_positions = tf.gather(
                pos_embeddings, mask_indices, axis=1, batch_dims=1
            )  # (B, mask_numbers, projection_dim)

            # Repeat the mask token number of mask times.
            # Mask tokens replace the masks of the image.
            mask_tokens = tf.repeat(self.mask_token, repeats=self.num_mask, axis=0)
            mask_tokens = tf.repeat(mask_tokens[tf.newaxis, ...], repeats=batch_size, axis=0)

            # Get the masked embeddings for the tokens.
            masked_embeddings = self.projection(mask_tokens) + masked_positions
            return (
                unmasked_embeddings,  # Input to the encoder.
                masked_embeddings,  # First part of input to the decoder.
                unmasked_positions,  # Added to the encoder outputs.
                mask_indices,  # The indices that were masked.
                unmask_indices,  # The indices that were unmaksed.
            )

    def get_random_indices(self, batch_size):
        # Create random indices from a uniform distribution and then split
        # it into mask and unmask indices.
        rand_indices = tf.argsort(keras.random.uniform(shape=(batch_size, self.num_patches)), axis=-1)
        mask_indices = rand_indices[:, : self.num_mask]
        unmask_indices = rand_indices[:, self.num_mask :]
        return mask_indices, unmask_indices

    def generate_masked_image(self, patches, unmask_indices):
        # Choose a random patch and it corresponding unmask index.
        idx = np.random.choice(patches.shape[0])
        patch = patches[idx]
        unmask_index = unmask_indices[idx]

        # Build a numpy array of same shape as patch.
        new_patch = np.zeros_like(patch)

        # Iterate of the new_patch and plug the unmasked patches.
        count = 0
        for i in range(unmask_index.shape[0]):
            new_patch[unmask_index[i]] = patch[unmask_index[i]]
        return new_patch, idx


def mlp(x, dropout_rate, hidden_units):
    for units in hidden_units:
        x = layers.Dense(units, activation=tf.nn.gelu)(x)
        x = layers.Dropout(dropout_rate)(x)
    return x


def create_encoder(num_heads=ENC_NUM_HEADS, num_layers=ENC_LAYERS):
    inputs = layers.Input((None, ENC_PROJECTION_DIM))
    x = inputs

    for _ in range(num_layers):
        # Layer normalization 1.
        x1 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)(x)

        # Create a multi-head attention layer.
        attention_output = layers.MultiHeadAttention(num_heads=num_heads, key_dim=ENC_PROJECTION_DIM, dropout=0.1)(
            x1, x1
        )

        # Skip connection 1.
        x2 = layers.Add()([attention_output, x])

        # Layer normalization 2.
        x3 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)(x2)

        # MLP.
        x3 = mlp(x3, hidden_units=ENC_TRANSFORMER_UNITS, dropout_rate=0.1)

        # Skip connection 2.
        x = layers.Add()([x3, x2])

    outputs = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)(x)
    return keras.Model(inputs, outputs, name="mae_encoder")


def create_decoder(num_layers=DEC_LAYERS, num_heads=DEC_NUM_HEADS, image_size=IMAGE_SIZE):
    inputs = layers.Input((NUM_PATCHES, ENC_PROJECTION_DIM))
    x = layers.Dense(DEC_PROJECTION_DIM)(inputs)

    for _ in range(num_layers):
        # Layer normalization 1.
        x1 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)(x)

        # Create a multi-head attention layer.
        attention_output = layers.MultiHeadAttention(num_heads=num_heads, key_dim=DEC_PROJECTION_DIM, dropout=0.1)(
            x1, x1
        )

        # Skip connection 1.
        x2 = layers.Add()([attention_output, x])

        # Layer normalization 2.
        x3 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)(x2)

        # MLP.
        x3 = mlp(x3, hidden_units=DEC_TRANSFORMER_UNITS, dropout_rate=0.1)

        # Skip connection 2.
        x = layers.Add()([x3, x2])

    x = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)(x)
    x = layers.Flatten()(x)
    pre_final = layers.Dense(units=image_size * image_size * 3, activation="sigmoid")(x)
    outputs = layers.Reshape((image_size, image_size, 3))(pre_final)

    return keras.Model(inputs, outputs, name="mae_decoder")


class MaskedAutoencoder(keras.Model):
    def __init__(
        self,
        train_augmentation_model,
        test_augmentation_model,
        patch_layer,
        patch_encoder,
        encoder,
        decoder,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.train_augmentation_model = train_augmentation_model
        self.test_augmentation_model = test_augmentation_model
        self.patch_layer = patch_layer
        self.patch_encoder = patch_encoder
        self.encoder = encoder
        self.decoder = decoder

    def calculate_loss(self, images, test=False):
        # Augment the input images.
        if test:
            augmented_images = self.test_augmentation_model(images)
        else:
            augmented_images = self.train_augmentation_model(images)

        # Patch the augmented images.
        patches = self.patch_layer(augmented_images)

        # Encode the patches.
        (
            unmasked_embeddings,
            masked_embeddings,
            unmasked_positions,
            mask_indices,
            unmask_indices,
        ) = self.patch_encoder(patches)

        # Pass the unmaksed patche to the encoder.
        encoder_outputs = self.encoder(unmasked_embeddings)

        # Create the decoder inputs.
        encoder_outputs = encoder_outputs + unmasked_positions
        decoder_inputs = tf.concat([encoder_outputs, masked_embeddings], axis=1)

        # Decode the inputs.
        decoder_outputs = self.decoder(decoder_inputs)
        decoder_patches = self.patch_layer(decoder_outputs)

        loss_patch = tf.gather(patches, mask_indices, axis=1, batch_dims=1)
        loss_output = tf.gather(decoder_patches, mask_indices, axis=1, batch_dims=1)

        # Compute the total loss.
        total_loss = self.compute_loss(y=loss_patch, y_pred=loss_output)

        return total_loss, loss_patch, loss_output

    def train_step(self, images):
        with tf.GradientTape() as tape:
            total_loss, loss_patch, loss_output = self.calculate_loss(images)

        # Apply gradients.
        train_vars = [
            self.train_augmentation_model.trainable_variables,
            self.patch_layer.trainable_variables,
            self.patch_encoder.trainable_variables,
            self.encoder.trainable_variables,
            self.decoder.trainable_variables,
        ]
        grads = tape.gradient(total_loss, train_vars)
        tv_list = []
        for grad, var in zip(grads, train_vars):
            for g, v in zip(grad, var):
                tv_list.append((g, v))
        self.optimizer.apply_gradients(tv_list)

        # Report progress.
        results = {}
        for metric in self.metrics:
            metric.update_state(loss_patch, loss_output)
            results[metric.name] = metric.result()
        return results

    def test_step(self, images):
        total_loss, loss_patch, loss_output = self.calculate_loss(images, test=True)

        # Update the trackers.
        results = {}
        for metric in self.metrics:
            metric.update_state(loss_patch, loss_output)
            results[metric.name] = metric.result()
        return results


train_augmentation_model = get_train_augmentation_model()
test_augmentation_model = get_test_augmentation_model()
patch_layer = Patches()
patch_encoder = PatchEncoder()
encoder = create_encoder()
decoder = create_decoder()

mae_model = MaskedAutoencoder(
    train_augmentation_model=train_augmentation_model,
    test_augmentation_model=test_augmentation_model,
    patch_layer=patch_layer,
    patch_encoder=patch_encoder,
    encoder=encoder,
    decoder=decoder,
)

# Taking a batch of test inputs to measure model's progress.
test_images = next(iter(test_ds))


class TrainMonitor(keras.callbacks.Callback):
    def __init__(self, epoch_interval=None):
        self.epoch_interval = epoch_interval

    def on_epoch_end(self, epoch, logs=None):
        if self.epoch_interval and epoch % self.epoch_interval == 0:
            test_augmented_images = self.model.test_augmentation_model(test_images)
            test_patches = self.model.patch_layer(test_augmented_images)
            (
                test_unmasked_embeddings,
                test_masked_embeddings,
                test_unmasked_positions,
                test_mask_indices,
                test_unmask_indices,
            ) = self.model.patch_encoder(test_patches)
            test_encoder_outputs = self.model.encoder(test_unmasked_embeddings)
            test_encoder_outputs = test_encoder_outputs + test_unmasked_positions
            test_decoder_inputs = tf.concat([test_encoder_outputs, test_masked_embeddings], axis=1)
            test_decoder_outputs = self.model.decoder(test_decoder_inputs)

            # Show a maksed patch image.
            test_masked_patch, idx = self.model.patch_encoder.generate_masked_image(test_patches, test_unmask_indices)
            print(f"\\nIdx chosen: {idx}")
            original_image = test_augmented_images[idx]
            masked_image = self.model.patch_layer.reconstruct_from_patch(test_masked_patch)
            reconstructed_image = test_decoder_outputs[idx]

            fig, ax = plt.subplots(nrows=1, ncols=3, figsize=(15, 5))
            ax[0].imshow(original_image)
            ax[0].set_title(f"Original: {epoch:03d}")

            ax[1].imshow(masked_image)
            ax[1].set_title(f"Masked: {epoch:03d}")

            ax[2].imshow(reconstructed_image)
            ax[2].set_title(f"Resonstructed: {epoch:03d}")

            # The example only shows the figure; saved too, to see who draws it.
            fig.savefig(f"monitor_{epoch:03d}.png")
            plt.show()
            plt.close()


class WarmUpCosine(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, learning_rate_base, total_steps, warmup_learning_rate, warmup_steps):
        super().__init__()

        self.learning_rate_base = learning_rate_base
        self.total_steps = total_steps
        self.warmup_learning_rate = warmup_learning_rate
        self.warmup_steps = warmup_steps
        self.pi = tf.constant(np.pi)

    def __call__(self, step):
        if self.total_steps < self.warmup_steps:
            raise ValueError("Total_steps must be larger or equal to warmup_steps.")

        cos_annealed_lr = tf.cos(
            self.pi * (tf.cast(step, tf.float32) - self.warmup_steps) / float(self.total_steps - self.warmup_steps)
        )
        learning_rate = 0.5 * self.learning_rate_base * (1 + cos_annealed_lr)

        if self.warmup_steps > 0:
            if self.learning_rate_base < self.warmup_learning_rate:
                raise ValueError("Learning_rate_base must be larger or equal to warmup_learning_rate.")
            slope = (self.learning_rate_base - self.warmup_learning_rate) / self.warmup_steps
            warmup_rate = slope * tf.cast(step, tf.float32) + self.warmup_learning_rate
            learning_rate = tf.where(step < self.warmup_steps, warmup_rate, learning_rate)
        return tf.where(step > self.total_steps, 0.0, learning_rate, name="learning_rate")


total_steps = int((len(x_train) / BATCH_SIZE) * EPOCHS)
warmup_epoch_percentage = 0.15
warmup_steps = int(total_steps * warmup_epoch_percentage)
scheduled_lrs = WarmUpCosine(
    learning_rate_base=LEARNING_RATE,
    total_steps=total_steps,
    warmup_learning_rate=0.0,
    warmup_steps=warmup_steps,
)

optimizer = keras.optimizers.AdamW(learning_rate=scheduled_lrs, weight_decay=WEIGHT_DECAY)

# Compile and pretrain the model.
mae_model.compile(optimizer=optimizer, loss=keras.losses.MeanSquaredError(), metrics=["mae"])

# Assemble the callbacks.
train_callbacks = [TrainMonitor(epoch_interval=2)]
"""

MAE_FIT = """
history = mae_model.fit(
    train_ds,
    epochs=EPOCHS,
    validation_data=val_ds,
    callbacks=train_callbacks,
    verbose=0,
)
"""

MAE_DOWNSTREAM = """
# Measure its performance.
loss, mae = mae_model.evaluate(test_ds, verbose=0)
print(f"Loss: {loss:.2f}")
print(f"MAE: {mae:.2f}")

# Extract the augmentation layers.
train_augmentation_model = mae_model.train_augmentation_model
test_augmentation_model = mae_model.test_augmentation_model

# Extract the patchers.
patch_layer = mae_model.patch_layer
patch_encoder = mae_model.patch_encoder
patch_encoder.downstream = True  # Swtich the downstream flag to True.

# Extract the encoder.
encoder = mae_model.encoder

# Pack as a model.
downstream_model = keras.Sequential(
    [
        layers.Input((IMAGE_SIZE, IMAGE_SIZE, 3)),
        patch_layer,
        patch_encoder,
        encoder,
        layers.BatchNormalization(),  # Refer to A.1 (Linear probing).
        layers.GlobalAveragePooling1D(),
        layers.Dense(NUM_CLASSES, activation="softmax"),
    ],
    name="linear_probe_model",
)

# Only the final classification layer of the `downstream_model` should be trainable.
for layer in downstream_model.layers[:-1]:
    layer.trainable = False


def prepare_data(images, labels, is_train=True):
    if is_train:
        augmentation_model = train_augmentation_model
    else:
        augmentation_model = test_augmentation_model

    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    if is_train:
        dataset = dataset.shuffle(BUFFER_SIZE)

    dataset = dataset.batch(BATCH_SIZE).map(lambda x, y: (augmentation_model(x), y), num_parallel_calls=AUTO)
    return dataset.prefetch(AUTO)


train_ds = prepare_data(x_train, y_train)
val_ds = prepare_data(x_train, y_train, is_train=False)
test_ds = prepare_data(x_test, y_test, is_train=False)

downstream_model.compile(
    optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)
probe_history = downstream_model.fit(train_ds, validation_data=val_ds, epochs=2, verbose=0)
probe_loss, probe_accuracy = downstream_model.evaluate(test_ds, verbose=0)
"""


def test_mae_warmup_cosine_patch_encoder_train_monitor_then_linear_probe(shell, tmp_path, monkeypatch):
    """Masked image modeling, reduced: the notebook's mae_model (its PatchEncoder's mask token made in `build`, its
    encoder and decoder) and its AdamW over a `WarmUpCosine` (no get_config) come back trained; TrainMonitor draws
    and saves with `self.model` on rank 0 alone; the patch layer and encoder go into a linear probe afterwards."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, MAE)
    _cell(shell, MAE_FIT)
    one = _cell(shell, MAE_DOWNSTREAM)
    one = {"loss": one["history"].history["loss"][-1], "test_loss": one["loss"], "probe": one["probe_loss"]}
    assert sorted(os.listdir(".")) == ["monitor_000.png", "monitor_002.png"]
    _in_folder(monkeypatch, tmp_path / "two")
    ns = _cell(shell, MAE)
    mae_model, optimizer, schedule = ns["mae_model"], ns["optimizer"], ns["scheduled_lrs"]
    patch_encoder, encoder = ns["patch_encoder"], ns["encoder"]
    ns, shown = _distributed_showing(shell, MAE_FIT)
    assert shown.count("Idx chosen") == 2, shown  # rank 0's lines only
    assert sorted(os.listdir(".")) == ["monitor_000.png", "monitor_002.png"]
    assert ns["mae_model"] is mae_model and mae_model.optimizer is optimizer and optimizer._learning_rate is schedule
    assert mae_model.patch_encoder is patch_encoder and mae_model.encoder is encoder
    assert optimizer.iterations.numpy() == 4 * 4  # 256 images in batches of 32: 4 steps a rank an epoch
    ns = _cell(shell, MAE_DOWNSTREAM)
    assert ns["downstream_model"].layers[1] is patch_encoder and ns["downstream_model"].layers[2] is encoder
    close(ns["history"].history["loss"][-1], one["loss"], 1.5, "reconstruction loss")
    close(ns["loss"], one["test_loss"], 1.5, "test reconstruction loss evaluated afterwards")
    close(ns["probe_loss"], one["probe"], 1.5, "linear probe's test loss")


# ------------------------------------------------------------------------------------------ keras.io miniature GPT

GPT = """
import os
import random
import string

import numpy as np
import tensorflow
import tensorflow.data as tf_data
import tensorflow.strings as tf_strings
import keras
from keras import layers
from keras import ops
from keras.layers import TextVectorization

keras.utils.set_random_seed(0)


def causal_attention_mask(batch_size, n_dest, n_src, dtype):
    \"\"\"
    Mask the upper half of the dot product matrix in self attention.
    This prevents flow of information from future tokens to current token.
    1's in the lower triangle, counting from the lower right corner.
    \"\"\"
    i = ops.arange(n_dest)[:, None]
    j = ops.arange(n_src)
    m = i >= j - n_src + n_dest
    mask = ops.cast(m, dtype)
    mask = ops.reshape(mask, [1, n_dest, n_src])
    # The example tiles by `ops.concatenate([ops.expand_dims(batch_size, -1), ops.convert_to_tensor([1, 1])], 0)`,
    # which fails in one process on Keras 3 / TF 2.21 while the functional model is built
    # (OperatorNotAllowedInGraphError: iterating over a symbolic tf.Tensor); the multiples as a list work.
    return ops.tile(mask, [batch_size, 1, 1])


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads, embed_dim)
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
        input_shape = ops.shape(inputs)
        batch_size = input_shape[0]
        seq_len = input_shape[1]
        causal_mask = causal_attention_mask(batch_size, seq_len, seq_len, "bool")
        attention_output = self.att(inputs, inputs, attention_mask=causal_mask)
        attention_output = self.dropout1(attention_output)
        out1 = self.layernorm1(inputs + attention_output)
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
        positions = ops.arange(0, maxlen, 1)
        positions = self.pos_emb(positions)
        x = self.token_emb(x)
        return x + positions


vocab_size = 200  # Only consider the top 20k words
maxlen = 20  # Max sequence size
embed_dim = 32  # Embedding size for each token
num_heads = 2  # Number of attention heads
feed_forward_dim = 32  # Hidden layer size in feed forward network inside transformer


def create_model():
    inputs = layers.Input(shape=(maxlen,), dtype="int32")
    embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)
    x = embedding_layer(inputs)
    transformer_block = TransformerBlock(embed_dim, num_heads, feed_forward_dim)
    x = transformer_block(x)
    outputs = layers.Dense(vocab_size)(x)
    model = keras.Model(inputs=inputs, outputs=[outputs, x])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(
        "adam",
        loss=[loss_fn, None],
    )  # No loss and optimization based on word embeddings from transformer block
    return model


batch_size = 32

# The aclImdb reviews, one text file each in four folders, here a few made-up ones.
words = "this movie is a good bad film story the acting was great terrible and i loved hated it plot".split()
words += [f"word{k}" for k in range(240)]  # enough to fill the vocabulary: generated ids must have a word
rng = random.Random(0)
directories = ["aclImdb/train/pos", "aclImdb/train/neg", "aclImdb/test/pos", "aclImdb/test/neg"]
for dir in directories:
    os.makedirs(dir, exist_ok=True)
    for k in range(64):
        review = " ".join(rng.choice(words) for _ in range(rng.randint(8, 24)))
        with open(f"{dir}/{k}_7.txt", "w") as f:
            f.write(review.replace(" and ", " <br /> and ", 1) + ".")

filenames = []
for dir in directories:
    for f in os.listdir(dir):
        filenames.append(os.path.join(dir, f))

print(f"{len(filenames)} files")

# Create a dataset from text files
random.shuffle(filenames)
text_ds = tf_data.TextLineDataset(filenames)
text_ds = text_ds.shuffle(buffer_size=256)
text_ds = text_ds.batch(batch_size)


def custom_standardization(input_string):
    \"\"\"Remove html line-break tags and handle punctuation\"\"\"
    lowercased = tf_strings.lower(input_string)
    stripped_html = tf_strings.regex_replace(lowercased, "<br />", " ")
    return tf_strings.regex_replace(stripped_html, f"([{string.punctuation}])", r" \\1")


# Create a vectorization layer and adapt it to the text
vectorize_layer = TextVectorization(
    standardize=custom_standardization,
    max_tokens=vocab_size - 1,
    output_mode="int",
    output_sequence_length=maxlen + 1,
)
vectorize_layer.adapt(text_ds)
vocab = vectorize_layer.get_vocabulary()  # To get words back from token indices


def prepare_lm_inputs_labels(text):
    \"\"\"
    Shift word sequences by 1 position so that the target for position (i) is
    word at position (i+1). The model will use all words up till position (i)
    to predict the next word.
    \"\"\"
    text = tensorflow.expand_dims(text, -1)
    tokenized_sentences = vectorize_layer(text)
    x = tokenized_sentences[:, :-1]
    y = tokenized_sentences[:, 1:]
    return x, y


text_ds = text_ds.map(prepare_lm_inputs_labels, num_parallel_calls=tf_data.AUTOTUNE)
text_ds = text_ds.prefetch(tf_data.AUTOTUNE)


class TextGenerator(keras.callbacks.Callback):
    \"\"\"A callback to generate text from a trained model.
    1. Feed some starting prompt to the model
    2. Predict probabilities for the next token
    3. Sample the next token and add it to the next input

    Arguments:
        max_tokens: Integer, the number of tokens to be generated after prompt.
        start_tokens: List of integers, the token indices for the starting prompt.
        index_to_word: List of strings, obtained from the TextVectorization layer.
        top_k: Integer, sample from the `top_k` token predictions.
        print_every: Integer, print after this many epochs.
    \"\"\"

    def __init__(self, max_tokens, start_tokens, index_to_word, top_k=10, print_every=1):
        self.max_tokens = max_tokens
        self.start_tokens = start_tokens
        self.index_to_word = index_to_word
        self.print_every = print_every
        self.k = top_k

    def sample_from(self, logits):
        logits, indices = ops.top_k(logits, k=self.k, sorted=True)
        indices = np.asarray(indices).astype("int32")
        preds = keras.activations.softmax(ops.expand_dims(logits, 0))[0]
        preds = np.asarray(preds).astype("float32")
        return np.random.choice(indices, p=preds)

    def detokenize(self, number):
        return self.index_to_word[number]

    def on_epoch_end(self, epoch, logs=None):
        start_tokens = [_ for _ in self.start_tokens]
        if (epoch + 1) % self.print_every != 0:
            return
        num_tokens_generated = 0
        tokens_generated = []
        while num_tokens_generated <= self.max_tokens:
            pad_len = maxlen - len(start_tokens)
            sample_index = len(start_tokens) - 1
            if pad_len < 0:
                x = start_tokens[:maxlen]
                sample_index = maxlen - 1
            elif pad_len > 0:
                x = start_tokens + [0] * pad_len
            else:
                x = start_tokens
            x = np.array([x])
            y, _ = self.model.predict(x, verbose=0)
            sample_token = self.sample_from(y[0][sample_index])
            tokens_generated.append(sample_token)
            start_tokens.append(sample_token)
            num_tokens_generated = len(tokens_generated)
        txt = " ".join([self.detokenize(_) for _ in self.start_tokens + tokens_generated])
        print(f"generated text:\\n{txt}\\n")


# Tokenize starting prompt
word_to_index = {}
for index, word in enumerate(vocab):
    word_to_index[word] = index

start_prompt = "this movie is"
start_tokens = [word_to_index.get(_, 1) for _ in start_prompt.split()]
num_tokens_generated = 8
text_gen_callback = TextGenerator(num_tokens_generated, start_tokens, vocab)

model = create_model()
"""

GPT_FIT = """
history = model.fit(text_ds, verbose=2, epochs=3, callbacks=[text_gen_callback])
"""

GPT_GENERATE = """
text_gen_callback.set_model(model)
text_gen_callback.on_epoch_end(0)
x = np.array([start_tokens + [0] * (maxlen - len(start_tokens))])
logits, embeddings = model.predict(x, verbose=0)
"""


def test_miniature_gpt_text_generator_callback_prints_once_then_generates(shell, tmp_path, monkeypatch):
    """Miniature GPT: a TextLineDataset mapped through the notebook's adapted TextVectorization, a two-output model
    compiled with `[loss_fn, None]`; the TextGenerator's samples (`self.model.predict` at each epoch end) and fit's
    verbose=2 lines show once, and the notebook generates with the trained model afterwards."""
    _in_folder(monkeypatch, tmp_path)
    _cell(shell, GPT)
    _cell(shell, GPT_FIT)
    one = _cell(shell, GPT_GENERATE)
    one_steps, one = one["model"].optimizer.iterations.numpy(), one["history"].history["loss"][-1]
    ns = _cell(shell, GPT)
    model, callback = ns["model"], ns["text_gen_callback"]
    ns, shown = _distributed_showing(shell, GPT_FIT)
    assert shown.count("generated text:") == 3, shown  # rank 0's, once an epoch
    assert shown.count("Epoch 3/3") == 1, shown
    assert ns["model"] is model and ns["text_gen_callback"] is callback
    # The reviews' batches of 32 lines, shared between the ranks: half each, the odd one to both.
    assert model.optimizer.iterations.numpy() == 3 * ((one_steps // 3 + 1) // 2), one_steps
    ns = _cell(shell, GPT_GENERATE)
    assert ns["logits"].shape == (1, 20, 200) and ns["embeddings"].shape == (1, 20, 32)
    close(ns["history"].history["loss"][-1], one, 1.3, "training loss")
