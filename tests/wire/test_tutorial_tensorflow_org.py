"""tensorflow.org tutorials copied into a notebook: plain cells for data, definitions and compile, `%%distribute -n 2`
on the training cell, plain cells after it using what came back.

"Basic regression: Predict fuel efficiency" (a pandas frame read from the Auto MPG file, a Normalization adapted on
`np.array(train_features)`, `build_and_compile_model(norm)`, `fit(..., validation_split=0.2)`, then evaluate, predict,
`pd.DataFrame(history.history)` and a `.keras` file reloaded), "Classify structured data using Keras preprocessing
layers" (PetFinder-shaped: `df_to_dataset` over `dict(df)`, lambdas over adapted StringLookup/IntegerLookup and
CategoryEncoding, a functional model over a dict of inputs, saved, reloaded and asked about one pet), "Text generation
with an RNN" (`MyModel(vocab_size, embedding_dim, rnn_units)` with a stateful `call`, a weights-only ModelCheckpoint,
then `OneStep` generating over the trained model), "Intro to Autoencoders" (`Autoencoder(latent_dim, shape)`,
`Denoise`, `AnomalyDetector` and its threshold) and "Convolutional Variational Autoencoder" (`CVAE` with a
`@tf.function` `sample`, `compute_loss`, a `@tf.function` `train_step(model, x, optimizer)` and the epoch loop with its
test-set ELBO). Each runs in one process and on two ranks; the later plain cells must work after both, with comparable
results. Data is synthetic, in the tutorials' shapes, written to files where the tutorial reads one.

Two lines differ from the text-generation tutorial as tensorflow.org prints it, because Keras 3 refuses them in one
process as well: `super().__init__()` (not `super().__init__(self)`) and `get_initial_state(tf.shape(x)[0])` (Keras 3
takes a batch size); `int(...)` around the autoencoder's `tf.math.reduce_prod(shape).numpy()` (Keras 3's Dense
refuses a NumPy integer); the structured-data split uses `train_test_split`, as `np.split` of a frame gives arrays in
pandas 3. The checkpoint path ends in ".weights.h5", which Keras 3 requires of `save_weights_only=True`.
"""

import os

import numpy as np
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


# ------------------------------------------------------------------------------------------------ basic regression


def _write_auto_mpg(path):
    """auto-mpg.data's layout: space-separated numbers, '?' for a missing horsepower, a tab, the car's name."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(398):
        cylinders = int(rng.choice([4, 6, 8], p=[0.5, 0.25, 0.25]))
        displacement = cylinders * 40.0 + rng.normal(0, 15)
        horsepower = cylinders * 15.0 + rng.normal(0, 8)
        weight = 1500.0 + cylinders * 350.0 + rng.normal(0, 200)
        acceleration = 20.0 - cylinders * 0.6 + rng.normal(0, 1.5)
        year = int(rng.integers(70, 83))
        origin = int(rng.choice([1, 2, 3]))
        mpg = 48.0 - weight / 150.0 + (year - 70) * 0.7 + (origin - 1) * 1.5 + rng.normal(0, 1.5)
        hp = "?" if i % 70 == 5 else f"{horsepower:.1f}"
        lines.append(
            f"{mpg:.1f}   {cylinders}   {displacement:.1f}      {hp}      {weight:.1f}      {acceleration:.1f}   "
            f'{year}  {origin}\t"car {i}"'
        )
    path.write_text("\n".join(lines) + "\n")


REGRESSION = """
import numpy as np
import pandas as pd
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers

tf.keras.utils.set_random_seed(1)
url = 'auto-mpg.data'
column_names = ['MPG', 'Cylinders', 'Displacement', 'Horsepower', 'Weight',
                'Acceleration', 'Model Year', 'Origin']

raw_dataset = pd.read_csv(url, names=column_names,
                          na_values='?', comment='\\t',
                          sep=' ', skipinitialspace=True)
dataset = raw_dataset.copy()
dataset = dataset.dropna()
dataset['Origin'] = dataset['Origin'].map({1: 'USA', 2: 'Europe', 3: 'Japan'})
dataset = pd.get_dummies(dataset, columns=['Origin'], prefix='', prefix_sep='')
train_dataset = dataset.sample(frac=0.8, random_state=0)
test_dataset = dataset.drop(train_dataset.index)
train_features = train_dataset.copy()
test_features = test_dataset.copy()

train_labels = train_features.pop('MPG')
test_labels = test_features.pop('MPG')
normalizer = tf.keras.layers.Normalization(axis=-1)
normalizer.adapt(np.array(train_features))
test_results = {}
horsepower = np.array(train_features['Horsepower'])

horsepower_normalizer = layers.Normalization(input_shape=[1,], axis=None)
horsepower_normalizer.adapt(horsepower)
horsepower_model = tf.keras.Sequential([
    horsepower_normalizer,
    layers.Dense(units=1)
])
horsepower_model.compile(
    optimizer=tf.keras.optimizers.Adam(learning_rate=0.1),
    loss='mean_absolute_error')
linear_model = tf.keras.Sequential([
    normalizer,
    layers.Dense(units=1)
])
linear_model.predict(train_features[:10])
linear_model.compile(
    optimizer=tf.keras.optimizers.Adam(learning_rate=0.1),
    loss='mean_absolute_error')


def build_and_compile_model(norm):
  model = keras.Sequential([
      norm,
      layers.Dense(64, activation='relu'),
      layers.Dense(64, activation='relu'),
      layers.Dense(1)
  ])

  model.compile(loss='mean_absolute_error',
                optimizer=tf.keras.optimizers.Adam(0.001))
  return model


dnn_model = build_and_compile_model(normalizer)
"""

REGRESSION_FIT = """history = horsepower_model.fit(
    train_features['Horsepower'],
    train_labels,
    epochs=40,
    # Suppress logging.
    verbose=0,
    # Calculate validation results on 20% of the training data.
    validation_split = 0.2)
test_results['horsepower_model'] = horsepower_model.evaluate(
    test_features['Horsepower'],
    test_labels, verbose=0)
history = linear_model.fit(
    train_features,
    train_labels,
    epochs=40,
    # Suppress logging.
    verbose=0,
    # Calculate validation results on 20% of the training data.
    validation_split = 0.2)
test_results['linear_model'] = linear_model.evaluate(
    test_features, test_labels, verbose=0)
history = dnn_model.fit(
    train_features,
    train_labels,
    validation_split=0.2,
    verbose=0, epochs=40)
"""

REGRESSION_AFTER = """hist = pd.DataFrame(history.history)
hist['epoch'] = history.epoch
test_results['dnn_model'] = dnn_model.evaluate(test_features, test_labels, verbose=0)
test_predictions = dnn_model.predict(test_features).flatten()
dnn_model.save('dnn_model.keras')
reloaded = tf.keras.models.load_model('dnn_model.keras')
test_results['reloaded'] = reloaded.evaluate(
    test_features, test_labels, verbose=0)
summary = pd.DataFrame(test_results, index=['Mean absolute error [MPG]']).T
x = tf.linspace(0.0, 250, 251)
y = horsepower_model.predict(x)
linear_again = linear_model.evaluate(test_features, test_labels, verbose=0)
"""


def test_basic_regression_predicts_fuel_efficiency(shell, tmp_path, monkeypatch):
    results = {}
    for run, distribute in (("one", False), ("two", True)):
        _in_folder(monkeypatch, tmp_path / run)
        _write_auto_mpg(tmp_path / run / "auto-mpg.data")
        ns = _cell(shell, REGRESSION)
        objects = {
            name: ns[name]
            for name in (
                "dnn_model",
                "linear_model",
                "horsepower_model",
                "normalizer",
                "train_features",
                "test_results",
            )
        }
        model, normalizer, features = ns["dnn_model"], ns["normalizer"], ns["train_features"]
        mean = np.array(normalizer.mean)
        ns = _cell(shell, REGRESSION_FIT, distribute=distribute)
        assert all(ns[name] is value for name, value in objects.items()), "a notebook object was replaced"
        # One Normalization layer, adapted once, in both models (as the tutorial builds them).
        assert model.layers[0] is normalizer and ns["linear_model"].layers[0] is normalizer
        np.testing.assert_allclose(np.array(normalizer.mean), mean)  # adapted in the notebook, left as it was
        assert "MPG" not in features.columns
        ns = _cell(shell, REGRESSION_AFTER)
        hist = ns["hist"]
        assert list(hist.columns) == ["loss", "val_loss", "epoch"] and len(hist) == 40, hist
        assert ns["test_predictions"].shape == (len(ns["test_features"]),)
        test_results = ns["test_results"]
        assert abs(test_results["reloaded"] - test_results["dnn_model"]) < 1e-4
        # What the distributed cell put into the notebook's dict is what the model that came back scores.
        assert abs(test_results["linear_model"] - ns["linear_again"]) < 1e-3, (test_results, ns["linear_again"])
        assert ns["y"].shape == (251, 1)
        results[run] = dict(test_results, first=hist["loss"].iloc[0], last=hist["loss"].iloc[-1])
    one, two = results["one"], results["two"]
    assert two["last"] < two["first"] / 2, two  # trained
    for name in ("horsepower_model", "linear_model", "dnn_model"):
        close(two[name], one[name], 1.5, f"{name}: test mean absolute error")


# ---------------------------------------------------------------------------------------------- structured data


def _write_petfinder(path):
    """petfinder-mini.csv's columns, with an adoption speed that depends on type, age, fee and photos."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 1200
    kind = rng.choice(["Cat", "Dog"], n)
    age = rng.integers(1, 40, n)
    fee = rng.choice([0, 0, 0, 50, 100, 200], n)
    photos = rng.integers(0, 10, n).astype(float)
    score = (kind == "Dog") * 1.0 - age / 20.0 - fee / 150.0 + photos / 5.0 + rng.normal(0, 0.4, n)
    frame = pd.DataFrame(
        {
            "Type": kind,
            "Age": age,
            "Breed1": rng.choice(["Tabby", "Mixed Breed", "Domestic Short Hair", "Labrador", "Beagle"], n),
            "Gender": rng.choice(["Male", "Female"], n),
            "Color1": rng.choice(["Black", "Brown", "Golden", "White", "Cream"], n),
            "Color2": rng.choice(["White", "No Color", "Brown", "Gray"], n),
            "MaturitySize": rng.choice(["Small", "Medium", "Large"], n),
            "FurLength": rng.choice(["Short", "Medium", "Long"], n),
            "Vaccinated": rng.choice(["Yes", "No", "Not Sure"], n),
            "Sterilized": rng.choice(["Yes", "No", "Not Sure"], n),
            "Health": rng.choice(["Healthy", "Minor Injury"], n),
            "Fee": fee,
            "Description": ["a pet"] * n,
            "PhotoAmt": photos,
            "AdoptionSpeed": np.where(score > 0, rng.integers(0, 4, n), 4),
        }
    )
    frame.to_csv(path, index=False)


STRUCTURED = """
import numpy as np
import pandas as pd
import tensorflow as tf
from sklearn.model_selection import train_test_split
from tensorflow.keras import layers

tf.keras.utils.set_random_seed(1)
csv_file = 'datasets/petfinder-mini/petfinder-mini.csv'
dataframe = pd.read_csv(csv_file)
dataframe['target'] = np.where(dataframe['AdoptionSpeed']==4, 0, 1)
dataframe = dataframe.drop(columns=['AdoptionSpeed', 'Description'])
train, test = train_test_split(dataframe, test_size=0.1, random_state=0)
train, val = train_test_split(train, test_size=0.1, random_state=0)


def df_to_dataset(dataframe, shuffle=True, batch_size=32):
  df = dataframe.copy()
  labels = df.pop('target')
  df = {key: value.to_numpy()[:,tf.newaxis] for key, value in dataframe.items()}
  ds = tf.data.Dataset.from_tensor_slices((dict(df), labels))
  if shuffle:
    ds = ds.shuffle(buffer_size=len(dataframe))
  ds = ds.batch(batch_size)
  ds = ds.prefetch(batch_size)
  return ds


def get_normalization_layer(name, dataset):
  # Create a Normalization layer for the feature.
  normalizer = layers.Normalization(axis=None)

  # Prepare a Dataset that only yields the feature.
  feature_ds = dataset.map(lambda x, y: x[name])

  # Learn the statistics of the data.
  normalizer.adapt(feature_ds)

  return normalizer


def get_category_encoding_layer(name, dataset, dtype, max_tokens=None):
  # Create a layer that turns strings into integer indices.
  if dtype == 'string':
    index = layers.StringLookup(max_tokens=max_tokens)
  # Otherwise, create a layer that turns integer values into integer indices.
  else:
    index = layers.IntegerLookup(max_tokens=max_tokens)

  # Prepare a `tf.data.Dataset` that only yields the feature.
  feature_ds = dataset.map(lambda x, y: x[name])

  # Learn the set of possible values and assign them a fixed integer index.
  index.adapt(feature_ds)

  # Encode the integer indices.
  encoder = layers.CategoryEncoding(num_tokens=index.vocabulary_size())

  # Apply multi-hot encoding to the indices. The lambda function captures the
  # layer, so you can use them, or include them in the Keras Functional model later.
  return lambda feature: encoder(index(feature))


batch_size = 32
train_ds = df_to_dataset(train, batch_size=batch_size)
val_ds = df_to_dataset(val, shuffle=False, batch_size=batch_size)
test_ds = df_to_dataset(test, shuffle=False, batch_size=batch_size)

all_inputs = {}
encoded_features = []

# Numerical features.
for header in ['PhotoAmt', 'Fee']:
  numeric_col = tf.keras.Input(shape=(1,), name=header)
  normalization_layer = get_normalization_layer(header, train_ds)
  encoded_numeric_col = normalization_layer(numeric_col)
  all_inputs[header] = numeric_col
  encoded_features.append(encoded_numeric_col)

age_col = tf.keras.Input(shape=(1,), name='Age', dtype='int64')

encoding_layer = get_category_encoding_layer(name='Age',
                                             dataset=train_ds,
                                             dtype='int64',
                                             max_tokens=5)
encoded_age_col = encoding_layer(age_col)
all_inputs['Age'] = age_col
encoded_features.append(encoded_age_col)

categorical_cols = ['Type', 'Color1', 'Color2', 'Gender', 'MaturitySize',
                    'FurLength', 'Vaccinated', 'Sterilized', 'Health', 'Breed1']

for header in categorical_cols:
  categorical_col = tf.keras.Input(shape=(1,), name=header, dtype='string')
  encoding_layer = get_category_encoding_layer(name=header,
                                               dataset=train_ds,
                                               dtype='string',
                                               max_tokens=5)
  encoded_categorical_col = encoding_layer(categorical_col)
  all_inputs[header] = categorical_col
  encoded_features.append(encoded_categorical_col)

all_features = tf.keras.layers.concatenate(encoded_features)
x = tf.keras.layers.Dense(32, activation="relu")(all_features)
x = tf.keras.layers.Dropout(0.5)(x)
output = tf.keras.layers.Dense(1)(x)

model = tf.keras.Model(all_inputs, output)
model.compile(optimizer='adam',
              loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
              metrics=["accuracy"])
"""

STRUCTURED_FIT = "model.fit(train_ds, epochs=10, validation_data=val_ds)\n"

STRUCTURED_AFTER = """result = model.evaluate(test_ds, return_dict=True)
model.save('my_pet_classifier.keras')
reloaded_model = tf.keras.models.load_model('my_pet_classifier.keras')
sample = {
    'Type': 'Cat',
    'Age': 3,
    'Breed1': 'Tabby',
    'Gender': 'Male',
    'Color1': 'Black',
    'Color2': 'White',
    'MaturitySize': 'Small',
    'FurLength': 'Short',
    'Vaccinated': 'No',
    'Sterilized': 'No',
    'Health': 'Healthy',
    'Fee': 100,
    'PhotoAmt': 2,
}

input_dict = {name: tf.convert_to_tensor([value]) for name, value in sample.items()}
predictions = reloaded_model.predict(input_dict)
prob = tf.nn.sigmoid(predictions[0])
direct = float(tf.nn.sigmoid(model.predict(input_dict)[0])[0])
"""


def test_structured_data_with_preprocessing_layers_classifies_a_pet(shell, tmp_path, monkeypatch):
    results = {}
    for run, distribute in (("one", False), ("two", True)):
        _in_folder(monkeypatch, tmp_path / run)
        os.makedirs("datasets/petfinder-mini")
        _write_petfinder(tmp_path / run / "datasets/petfinder-mini/petfinder-mini.csv")
        ns = _cell(shell, STRUCTURED)
        model, inputs, train_ds = ns["model"], ns["all_inputs"], ns["train_ds"]
        before = [w.copy() for w in model.get_weights()]
        ns = _cell(shell, STRUCTURED_FIT, distribute=distribute)
        assert ns["model"] is model and ns["all_inputs"] is inputs and ns["train_ds"] is train_ds
        assert any(not np.allclose(a, b) for a, b in zip(before, model.get_weights())), "the model did not train"
        ns = _cell(shell, STRUCTURED_AFTER)
        probability = float(ns["prob"][0])
        assert 0.0 < probability < 1.0 and abs(probability - ns["direct"]) < 1e-5, (probability, ns["direct"])
        results[run] = ns["result"]
    one, two = results["one"], results["two"]
    assert two["accuracy"] > one["accuracy"] - 0.1, (two, one)
    close(two["loss"], one["loss"], 1.4, "test loss")


# ------------------------------------------------------------------------------------------------ text generation

LINES = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n",
    "ROMEO:\nBut, soft! what light through yonder window breaks?\n\n",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n\n",
    "MENENIUS:\nEither you must confess yourselves wondrous malicious, or be accused of folly.\n\n",
)


def _write_shakespeare(path):
    rng = np.random.default_rng(0)
    path.write_bytes("".join(LINES[i] for i in rng.integers(0, len(LINES), 600)).encode("utf-8"))


TEXT = """
import os
import time
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(1)
path_to_file = 'shakespeare.txt'
text = open(path_to_file, 'rb').read().decode(encoding='utf-8')
vocab = sorted(set(text))
ids_from_chars = tf.keras.layers.StringLookup(
    vocabulary=list(vocab), mask_token=None)
chars_from_ids = tf.keras.layers.StringLookup(
    vocabulary=ids_from_chars.get_vocabulary(), invert=True, mask_token=None)


def text_from_ids(ids):
  return tf.strings.reduce_join(chars_from_ids(ids), axis=-1)


all_ids = ids_from_chars(tf.strings.unicode_split(text, 'UTF-8'))
ids_dataset = tf.data.Dataset.from_tensor_slices(all_ids)
seq_length = 100
sequences = ids_dataset.batch(seq_length+1, drop_remainder=True)


def split_input_target(sequence):
    input_text = sequence[:-1]
    target_text = sequence[1:]
    return input_text, target_text


dataset = sequences.map(split_input_target)
# Batch size
BATCH_SIZE = 16

# Buffer size to shuffle the dataset
# (TF data is designed to work with possibly infinite sequences,
# so it doesn't attempt to shuffle the entire sequence in memory. Instead,
# it maintains a buffer in which it shuffles elements).
BUFFER_SIZE = 10000

dataset = (
    dataset
    .shuffle(BUFFER_SIZE)
    .batch(BATCH_SIZE, drop_remainder=True)
    .prefetch(tf.data.experimental.AUTOTUNE))
# Length of the vocabulary in StringLookup Layer
vocab_size = len(ids_from_chars.get_vocabulary())

# The embedding dimension
embedding_dim = 32

# Number of RNN units
rnn_units = 128


class MyModel(tf.keras.Model):
  def __init__(self, vocab_size, embedding_dim, rnn_units):
    super().__init__()
    self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)
    self.gru = tf.keras.layers.GRU(rnn_units,
                                   return_sequences=True,
                                   return_state=True)
    self.dense = tf.keras.layers.Dense(vocab_size)

  def call(self, inputs, states=None, return_state=False, training=False):
    x = inputs
    x = self.embedding(x, training=training)
    if states is None:
      states = self.gru.get_initial_state(tf.shape(x)[0])
    x, states = self.gru(x, initial_state=states, training=training)
    x = self.dense(x, training=training)

    if return_state:
      return x, states
    else:
      return x


model = MyModel(
    vocab_size=vocab_size,
    embedding_dim=embedding_dim,
    rnn_units=rnn_units)
for input_example_batch, target_example_batch in dataset.take(1):
    example_batch_predictions = model(input_example_batch)
    print(example_batch_predictions.shape, "# (batch_size, sequence_length, vocab_size)")
model.summary()
loss = tf.losses.SparseCategoricalCrossentropy(from_logits=True)
example_batch_mean_loss = loss(target_example_batch, example_batch_predictions)
model.compile(optimizer='adam', loss=loss)
# Directory where the checkpoints will be saved
checkpoint_dir = './training_checkpoints'
# Name of the checkpoint files
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5")

checkpoint_callback = tf.keras.callbacks.ModelCheckpoint(
    filepath=checkpoint_prefix,
    save_weights_only=True)
EPOCHS = 6
"""

TEXT_FIT = "history = model.fit(dataset, epochs=EPOCHS, callbacks=[checkpoint_callback])\n"

TEXT_AFTER = """
class OneStep(tf.keras.Model):
  def __init__(self, model, chars_from_ids, ids_from_chars, temperature=1.0):
    super().__init__()
    self.temperature = temperature
    self.model = model
    self.chars_from_ids = chars_from_ids
    self.ids_from_chars = ids_from_chars

    # Create a mask to prevent "[UNK]" from being generated.
    skip_ids = self.ids_from_chars(['[UNK]'])[:, None]
    sparse_mask = tf.SparseTensor(
        # Put a -inf at each bad index.
        values=[-float('inf')]*len(skip_ids),
        indices=skip_ids,
        # Match the shape to the vocabulary
        dense_shape=[len(ids_from_chars.get_vocabulary())])
    self.prediction_mask = tf.sparse.to_dense(sparse_mask)

  @tf.function
  def generate_one_step(self, inputs, states=None):
    # Convert strings to token IDs.
    input_chars = tf.strings.unicode_split(inputs, 'UTF-8')
    input_ids = self.ids_from_chars(input_chars).to_tensor()

    # Run the model.
    # predicted_logits.shape is [batch, char, next_char_logits]
    predicted_logits, states = self.model(inputs=input_ids, states=states,
                                          return_state=True)
    # Only use the last prediction.
    predicted_logits = predicted_logits[:, -1, :]
    predicted_logits = predicted_logits/self.temperature
    # Apply the prediction mask: prevent "[UNK]" from being generated.
    predicted_logits = predicted_logits + self.prediction_mask

    # Sample the output logits to generate token IDs.
    predicted_ids = tf.random.categorical(predicted_logits, num_samples=1)
    predicted_ids = tf.squeeze(predicted_ids, axis=-1)

    # Convert from token ids to characters
    predicted_chars = self.chars_from_ids(predicted_ids)

    # Return the characters and model state.
    return predicted_chars, states


one_step_model = OneStep(model, chars_from_ids, ids_from_chars)
start = time.time()
states = None
next_char = tf.constant(['ROMEO:'])
result = [next_char]

for n in range(40):
  next_char, states = one_step_model.generate_one_step(next_char, states=states)
  result.append(next_char)

result = tf.strings.join(result)
end = time.time()
generated = result[0].numpy().decode('utf-8')
mean_loss = model.evaluate(dataset, verbose=0)
restored = MyModel(vocab_size=vocab_size, embedding_dim=embedding_dim, rnn_units=rnn_units)
restored(input_example_batch)
restored.load_weights(os.path.join(checkpoint_dir, f"ckpt_{EPOCHS}.weights.h5"))
restored_max_difference = float(tf.reduce_max(tf.abs(restored(input_example_batch) - model(input_example_batch))))
"""


TEXT_CUSTOM = """
class CustomTraining(MyModel):
  @tf.function
  def train_step(self, inputs):
      inputs, labels = inputs
      with tf.GradientTape() as tape:
          predictions = self(inputs, training=True)
          loss = self.loss(labels, predictions)
      grads = tape.gradient(loss, model.trainable_variables)
      self.optimizer.apply_gradients(zip(grads, model.trainable_variables))

      return {'loss': loss}


model = CustomTraining(
    vocab_size=len(ids_from_chars.get_vocabulary()),
    embedding_dim=embedding_dim,
    rnn_units=rnn_units)
model.compile(optimizer = tf.keras.optimizers.Adam(),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
EPOCHS = 2
"""

TEXT_CUSTOM_TRAIN = """model.fit(dataset, epochs=1)

mean = tf.metrics.Mean()

for epoch in range(EPOCHS):
    start = time.time()

    mean.reset_state()
    for (batch_n, (inp, target)) in enumerate(dataset):
        logs = model.train_step([inp, target])
        mean.update_state(logs['loss'])

        if batch_n % 50 == 0:
            template = f"Epoch {epoch+1} Batch {batch_n} Loss {logs['loss']:.4f}"
            print(template)

    # saving (checkpoint) the model every 5 epochs
    if (epoch + 1) % 5 == 0:
        model.save_weights(checkpoint_prefix.format(epoch=epoch))

    print()
    print(f'Epoch {epoch+1} Loss: {mean.result().numpy():.4f}')
    print(f'Time taken for 1 epoch {time.time() - start:.2f} sec')
    print("_"*80)

model.save_weights(checkpoint_prefix.format(epoch=epoch))
"""

TEXT_CUSTOM_AFTER = """custom_loss = float(mean.result())
custom_steps = int(model.optimizer.iterations)
one_step_model = OneStep(model, chars_from_ids, ids_from_chars)
next_char, states = one_step_model.generate_one_step(tf.constant(['ROMEO:']), states=None)
next_char, states = one_step_model.generate_one_step(next_char, states=states)
tf.saved_model.save(one_step_model, 'one_step')
one_step_reloaded = tf.saved_model.load('one_step')
states = None
next_char = tf.constant(['ROMEO:'])
result = [next_char]

for n in range(20):
  next_char, states = one_step_reloaded.generate_one_step(next_char, states=states)
  result.append(next_char)

exported = tf.strings.join(result)[0].numpy().decode("utf-8")
"""


def test_text_generation_with_an_rnn_generates_from_the_trained_model(shell, tmp_path, monkeypatch):
    results = {}
    for run, distribute in (("one", False), ("two", True)):
        _in_folder(monkeypatch, tmp_path / run)
        _write_shakespeare(tmp_path / run / "shakespeare.txt")
        ns = _cell(shell, TEXT)
        objects = {name: ns[name] for name in ("model", "dataset", "ids_from_chars", "chars_from_ids", "loss")}
        first_loss = float(ns["example_batch_mean_loss"])
        ns = _cell(shell, TEXT_FIT, distribute=distribute)
        assert all(ns[name] is value for name, value in objects.items()), "a notebook object was replaced"
        saved = sorted(os.listdir(tmp_path / run / "training_checkpoints"))
        assert saved == sorted(f"ckpt_{epoch}.weights.h5" for epoch in range(1, 7)), saved
        ns = _cell(shell, TEXT_AFTER)
        generated = ns["generated"]
        assert generated.startswith("ROMEO:") and len(generated) == 46 and "[UNK]" not in generated, generated
        assert ns["restored_max_difference"] < 1e-4, ns["restored_max_difference"]
        losses = ns["history"].history["loss"]
        assert len(losses) == 6 and losses[-1] < first_loss - 0.4, (losses, first_loss)
        # "Customized training": a subclass whose train_step names the notebook's global `model`, fitted once and
        # then driven batch by batch from a loop of the distributed cell.
        ns = _cell(shell, TEXT_CUSTOM)
        custom = ns["model"]
        ns = _cell(shell, TEXT_CUSTOM_TRAIN, distribute=distribute)
        assert ns["model"] is custom, "the custom model was replaced"
        assert "ckpt_1.weights.h5" in os.listdir(tmp_path / run / "training_checkpoints")
        ns = _cell(shell, TEXT_CUSTOM_AFTER)
        assert ns["exported"].startswith("ROMEO:") and len(ns["exported"]) == 26, ns["exported"]
        results[run] = losses, ns["mean_loss"], ns["custom_loss"], ns["custom_steps"]
    (one_losses, _, one_custom, one_steps), (two_losses, two_mean, two_custom, two_steps) = (
        results["one"],
        results["two"],
    )
    # Two ranks take half the steps each epoch (the batches are shared out): after 6 epochs they stand where one
    # process stands after 3 (measured: 2.06 and 2.37; one process reaches 0.79 after 6).
    assert max(two_losses[-1], two_mean) < one_losses[2] * 1.15, (two_losses, two_mean, one_losses)
    # The fit shares the batches out; the loop reads every batch on each rank.
    batches = one_steps // 3
    assert two_steps == batches // 2 + 2 * batches, (two_steps, one_steps)
    close(two_custom, one_custom, 1.3, "custom loop's loss")


# ---------------------------------------------------------------------------------------------------- autoencoders


def _fashion_shaped(digits):
    """Digits scaled up to 28x28 uint8 images, standing in for `fashion_mnist.load_data()`."""

    def images(rows):
        big = np.kron(rows.reshape(-1, 8, 8), np.ones((3, 3)))
        return np.pad(np.round(big * 255), ((0, 0), (2, 2), (2, 2))).astype("uint8")

    return {"fashion_train": images(digits["x_train"]), "fashion_test": images(digits["x_test"])}


def _write_ecg(path):
    """ecg.csv's layout: 140 readings and a label (1 normal, 0 anomalous), no header."""
    rng = np.random.default_rng(0)
    t = np.linspace(0, 2 * np.pi, 140)
    rows = []
    for i in range(900):
        normal = i % 5 != 0
        wave = np.sin(t * 2 + rng.normal(0, 0.1)) if normal else np.sign(np.sin(t * 5)) * 0.8 + 0.3 * np.cos(t)
        rows.append(np.append(wave + rng.normal(0, 0.1, 140), 1.0 if normal else 0.0))
    np.savetxt(path, np.array(rows), delimiter=",", fmt="%.5f")


AUTOENCODER = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import tensorflow as tf

from sklearn.metrics import accuracy_score, precision_score, recall_score
from sklearn.model_selection import train_test_split
from tensorflow.keras import layers, losses
from tensorflow.keras.models import Model

tf.keras.utils.set_random_seed(1)
(x_train, _), (x_test, _) = (fashion_train, None), (fashion_test, None)  # fashion_mnist.load_data()

x_train = x_train.astype('float32') / 255.
x_test = x_test.astype('float32') / 255.


class Autoencoder(Model):
  def __init__(self, latent_dim, shape):
    super(Autoencoder, self).__init__()
    self.latent_dim = latent_dim
    self.shape = shape
    self.encoder = tf.keras.Sequential([
      layers.Flatten(),
      layers.Dense(latent_dim, activation='relu'),
    ])
    self.decoder = tf.keras.Sequential([
      layers.Dense(int(tf.math.reduce_prod(shape).numpy()), activation='sigmoid'),
      layers.Reshape(shape)
    ])

  def call(self, x):
    encoded = self.encoder(x)
    decoded = self.decoder(encoded)
    return decoded


shape = x_test.shape[1:]
latent_dim = 64
autoencoder = Autoencoder(latent_dim, shape)
autoencoder.compile(optimizer='adam', loss=losses.MeanSquaredError())
"""

AUTOENCODER_FIT = """autoencoder.fit(x_train, x_train,
                epochs=10,
                shuffle=True,
                validation_data=(x_test, x_test))
"""

AUTOENCODER_AFTER = """encoded_imgs = autoencoder.encoder(x_test).numpy()
decoded_imgs = autoencoder.decoder(encoded_imgs).numpy()
reconstruction_mse = float(np.mean((decoded_imgs - x_test) ** 2))
"""

DENOISE = """x_train = x_train[..., tf.newaxis]
x_test = x_test[..., tf.newaxis]
noise_factor = 0.2
x_train_noisy = x_train + noise_factor * tf.random.normal(shape=x_train.shape)
x_test_noisy = x_test + noise_factor * tf.random.normal(shape=x_test.shape)

x_train_noisy = tf.clip_by_value(x_train_noisy, clip_value_min=0., clip_value_max=1.)
x_test_noisy = tf.clip_by_value(x_test_noisy, clip_value_min=0., clip_value_max=1.)


class Denoise(Model):
  def __init__(self):
    super(Denoise, self).__init__()
    self.encoder = tf.keras.Sequential([
      layers.Input(shape=(28, 28, 1)),
      layers.Conv2D(16, (3, 3), activation='relu', padding='same', strides=2),
      layers.Conv2D(8, (3, 3), activation='relu', padding='same', strides=2)])

    self.decoder = tf.keras.Sequential([
      layers.Conv2DTranspose(8, kernel_size=3, strides=2, activation='relu', padding='same'),
      layers.Conv2DTranspose(16, kernel_size=3, strides=2, activation='relu', padding='same'),
      layers.Conv2D(1, kernel_size=(3, 3), activation='sigmoid', padding='same')])

  def call(self, x):
    encoded = self.encoder(x)
    decoded = self.decoder(encoded)
    return decoded


autoencoder = Denoise()
autoencoder.compile(optimizer='adam', loss=losses.MeanSquaredError())
"""

DENOISE_FIT = """autoencoder.fit(x_train_noisy, x_train,
                epochs=6,
                shuffle=True,
                validation_data=(x_test_noisy, x_test))
"""

DENOISE_AFTER = """autoencoder.encoder.summary()
autoencoder.decoder.summary()
encoded_imgs = autoencoder.encoder(x_test_noisy).numpy()
decoded_imgs = autoencoder.decoder(encoded_imgs).numpy()
denoised_mse = float(np.mean((decoded_imgs - x_test) ** 2))
"""

ANOMALY = """
# Download the dataset
dataframe = pd.read_csv('ecg.csv', header=None)
raw_data = dataframe.values
# The last element contains the labels
labels = raw_data[:, -1]

# The other data points are the electrocadriogram data
data = raw_data[:, 0:-1]

train_data, test_data, train_labels, test_labels = train_test_split(
    data, labels, test_size=0.2, random_state=21
)
min_val = tf.reduce_min(train_data)
max_val = tf.reduce_max(train_data)

train_data = (train_data - min_val) / (max_val - min_val)
test_data = (test_data - min_val) / (max_val - min_val)

train_data = tf.cast(train_data, tf.float32)
test_data = tf.cast(test_data, tf.float32)
train_labels = train_labels.astype(bool)
test_labels = test_labels.astype(bool)

normal_train_data = train_data[train_labels]
normal_test_data = test_data[test_labels]

anomalous_train_data = train_data[~train_labels]
anomalous_test_data = test_data[~test_labels]


class AnomalyDetector(Model):
  def __init__(self):
    super(AnomalyDetector, self).__init__()
    self.encoder = tf.keras.Sequential([
      layers.Dense(32, activation="relu"),
      layers.Dense(16, activation="relu"),
      layers.Dense(8, activation="relu")])

    self.decoder = tf.keras.Sequential([
      layers.Dense(16, activation="relu"),
      layers.Dense(32, activation="relu"),
      layers.Dense(140, activation="sigmoid")])

  def call(self, x):
    encoded = self.encoder(x)
    decoded = self.decoder(encoded)
    return decoded


autoencoder = AnomalyDetector()
autoencoder.compile(optimizer='adam', loss='mae')
"""

ANOMALY_FIT = """history = autoencoder.fit(normal_train_data, normal_train_data,
          epochs=20,
          batch_size=64,
          validation_data=(test_data, test_data),
          shuffle=True)
"""

ANOMALY_AFTER = """plt.plot(history.history["loss"], label="Training Loss")
plt.plot(history.history["val_loss"], label="Validation Loss")
plt.legend()
encoded_data = autoencoder.encoder(normal_test_data).numpy()
decoded_data = autoencoder.decoder(encoded_data).numpy()
reconstructions = autoencoder.predict(normal_train_data)
train_loss = tf.keras.losses.mae(reconstructions, normal_train_data)
threshold = np.mean(train_loss) + np.std(train_loss)


def predict(model, data, threshold):
  reconstructions = model(data)
  loss = tf.keras.losses.mae(reconstructions, data)
  return tf.math.less(loss, threshold)


def print_stats(predictions, labels):
  print("Accuracy = {}".format(accuracy_score(labels, predictions)))
  print("Precision = {}".format(precision_score(labels, predictions)))
  print("Recall = {}".format(recall_score(labels, predictions)))


preds = predict(autoencoder, test_data, threshold)
print_stats(preds, test_labels)
anomaly_accuracy = accuracy_score(test_labels, preds)
"""


def test_autoencoders_denoise_and_detect_anomalies(shell, digits, tmp_path, monkeypatch):
    """The three models of "Intro to Autoencoders", one after another under the one name `autoencoder`, each
    fitted in its own distributed cell (a tf.Tensor of noisy images, tf.Tensors picked by a boolean mask)."""
    results = {}
    for run, distribute in (("one", False), ("two", True)):
        _in_folder(monkeypatch, tmp_path / run)
        _write_ecg(tmp_path / run / "ecg.csv")
        shell.user_ns.update(_fashion_shaped(digits))
        found = {}
        for setup, fit, after, measure in (
            (AUTOENCODER, AUTOENCODER_FIT, AUTOENCODER_AFTER, "reconstruction_mse"),
            (DENOISE, DENOISE_FIT, DENOISE_AFTER, "denoised_mse"),
            (ANOMALY, ANOMALY_FIT, ANOMALY_AFTER, "anomaly_accuracy"),
        ):
            ns = _cell(shell, setup)
            model, encoder = ns["autoencoder"], ns["autoencoder"].encoder
            ns = _cell(shell, fit, distribute=distribute)
            assert ns["autoencoder"] is model and model.encoder is encoder, f"{measure}: the model was replaced"
            ns = _cell(shell, after)
            found[measure] = float(ns[measure])
        assert ns["autoencoder"].encoder.layers[-1].units == 8
        results[run] = found
    one, two = results["one"], results["two"]
    close(two["reconstruction_mse"], one["reconstruction_mse"], 1.5, "reconstruction error")
    close(two["denoised_mse"], one["denoised_mse"], 1.5, "denoised error")
    assert two["reconstruction_mse"] < 0.03 and two["denoised_mse"] < 0.05, two  # trained (untrained: ~0.1)
    assert two["anomaly_accuracy"] > min(one["anomaly_accuracy"] - 0.1, 0.85), (two, one)


# ---------------------------------------------------------------------------------------------------------- CVAE

CVAE_SETUP = """
from IPython import display

import glob
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import time

tf.keras.utils.set_random_seed(1)
(train_images, _), (test_images, _) = (fashion_train, None), (fashion_test, None)  # mnist.load_data()


def preprocess_images(images):
  images = images.reshape((images.shape[0], 28, 28, 1)) / 255.
  return np.where(images > .5, 1.0, 0.0).astype('float32')


train_images = preprocess_images(train_images)
test_images = preprocess_images(test_images)
train_size = 1400
batch_size = 32
test_size = 400
train_dataset = (tf.data.Dataset.from_tensor_slices(train_images)
                 .shuffle(train_size).batch(batch_size))
test_dataset = (tf.data.Dataset.from_tensor_slices(test_images)
                .shuffle(test_size).batch(batch_size))


class CVAE(tf.keras.Model):
  \"\"\"Convolutional variational autoencoder.\"\"\"

  def __init__(self, latent_dim):
    super(CVAE, self).__init__()
    self.latent_dim = latent_dim
    self.encoder = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(
                filters=32, kernel_size=3, strides=(2, 2), activation='relu'),
            tf.keras.layers.Conv2D(
                filters=64, kernel_size=3, strides=(2, 2), activation='relu'),
            tf.keras.layers.Flatten(),
            # No activation
            tf.keras.layers.Dense(latent_dim + latent_dim),
        ]
    )

    self.decoder = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(latent_dim,)),
            tf.keras.layers.Dense(units=7*7*32, activation=tf.nn.relu),
            tf.keras.layers.Reshape(target_shape=(7, 7, 32)),
            tf.keras.layers.Conv2DTranspose(
                filters=64, kernel_size=3, strides=2, padding='same',
                activation='relu'),
            tf.keras.layers.Conv2DTranspose(
                filters=32, kernel_size=3, strides=2, padding='same',
                activation='relu'),
            # No activation
            tf.keras.layers.Conv2DTranspose(
                filters=1, kernel_size=3, strides=1, padding='same'),
        ]
    )

  @tf.function
  def sample(self, eps=None):
    if eps is None:
      eps = tf.random.normal(shape=(100, self.latent_dim))
    return self.decode(eps, apply_sigmoid=True)

  def encode(self, x):
    mean, logvar = tf.split(self.encoder(x), num_or_size_splits=2, axis=1)
    return mean, logvar

  def reparameterize(self, mean, logvar):
    eps = tf.random.normal(shape=mean.shape)
    return eps * tf.exp(logvar * .5) + mean

  def decode(self, z, apply_sigmoid=False):
    logits = self.decoder(z)
    if apply_sigmoid:
      probs = tf.sigmoid(logits)
      return probs
    return logits


optimizer = tf.keras.optimizers.Adam(1e-3)


def log_normal_pdf(sample, mean, logvar, raxis=1):
  log2pi = tf.math.log(2. * np.pi)
  return tf.reduce_sum(
      -.5 * ((sample - mean) ** 2. * tf.exp(-logvar) + logvar + log2pi),
      axis=raxis)


def compute_loss(model, x):
  mean, logvar = model.encode(x)
  z = model.reparameterize(mean, logvar)
  x_logit = model.decode(z)
  cross_ent = tf.nn.sigmoid_cross_entropy_with_logits(logits=x_logit, labels=x)
  logpx_z = -tf.reduce_sum(cross_ent, axis=[1, 2, 3])
  logpz = log_normal_pdf(z, 0., 0.)
  logqz_x = log_normal_pdf(z, mean, logvar)
  return -tf.reduce_mean(logpx_z + logpz - logqz_x)


@tf.function
def train_step(model, x, optimizer):
  \"\"\"Executes one training step and returns the loss.

  This function computes the loss and gradients, and uses the latter to
  update the model's parameters.
  \"\"\"
  with tf.GradientTape() as tape:
    loss = compute_loss(model, x)
  gradients = tape.gradient(loss, model.trainable_variables)
  optimizer.apply_gradients(zip(gradients, model.trainable_variables))


epochs = 4
# set the dimensionality of the latent space to a plane for visualization later
latent_dim = 2
num_examples_to_generate = 16

# keeping the random vector constant for generation (prediction) so
# it will be easier to see the improvement.
random_vector_for_generation = tf.random.normal(
    shape=[num_examples_to_generate, latent_dim])
model = CVAE(latent_dim)


def generate_and_save_images(model, epoch, test_sample):
  mean, logvar = model.encode(test_sample)
  z = model.reparameterize(mean, logvar)
  predictions = model.sample(z)
  fig = plt.figure(figsize=(4, 4))

  for i in range(predictions.shape[0]):
    plt.subplot(4, 4, i + 1)
    plt.imshow(predictions[i, :, :, 0], cmap='gray')
    plt.axis('off')

  # tight_layout minimizes the overlap between 2 subplots
  plt.savefig('image_at_epoch_{:04d}.png'.format(epoch))
  plt.show()


# Pick a sample of the test set for generating output images
assert batch_size >= num_examples_to_generate
for test_batch in test_dataset.take(1):
  test_sample = test_batch[0:num_examples_to_generate, :, :, :]
generate_and_save_images(model, 0, test_sample)
"""

CVAE_LOOP = """for epoch in range(1, epochs + 1):
  start_time = time.time()
  for train_x in train_dataset:
    train_step(model, train_x, optimizer)
  end_time = time.time()

  loss = tf.keras.metrics.Mean()
  for test_x in test_dataset:
    loss(compute_loss(model, test_x))
  elbo = -loss.result()
  display.clear_output(wait=False)
  print('Epoch: {}, Test set ELBO: {}, time elapse for current epoch: {}'
        .format(epoch, elbo, end_time - start_time))
  generate_and_save_images(model, epoch, test_sample)
"""

CVAE_AFTER = """samples = model.sample(random_vector_for_generation).numpy()
drawn = model.sample().numpy()
mean, logvar = model.encode(test_images[:8])
steps = int(optimizer.iterations.numpy())
anim_file = sorted(glob.glob('image*.png'))
"""


def test_convolutional_vae_trains_in_its_own_loop_and_samples_afterwards(shell, digits, tmp_path, monkeypatch):
    results = {}
    for run, distribute in (("one", False), ("two", True)):
        _in_folder(monkeypatch, tmp_path / run)
        shell.user_ns.update(_fashion_shaped(digits))
        ns = _cell(shell, CVAE_SETUP)
        model, optimizer, first = ns["model"], ns["optimizer"], ns["model"].get_weights()
        ns = _cell(shell, CVAE_LOOP, distribute=distribute)
        assert ns["model"] is model and ns["optimizer"] is optimizer, "a notebook object was replaced"
        assert any(not np.allclose(a, b) for a, b in zip(first, model.get_weights())), "the model did not train"
        ns = _cell(shell, CVAE_AFTER)
        assert ns["samples"].shape == (16, 28, 28, 1) and ns["drawn"].shape == (100, 28, 28, 1)
        assert np.isfinite(ns["samples"]).all() and ns["mean"].shape == (8, 2)
        assert ns["anim_file"] == [f"image_at_epoch_{i:04d}.png" for i in range(5)], ns["anim_file"]
        results[run] = (float(ns["elbo"]), ns["steps"])
    (one_elbo, one_steps), (two_elbo, two_steps) = results["one"], results["two"]
    # A custom loop reads every batch on each rank: as many optimizer steps as one process takes.
    assert two_steps == one_steps == 4 * 44, (two_steps, one_steps)
    close(-two_elbo, -one_elbo, 1.15, "negative test ELBO")
