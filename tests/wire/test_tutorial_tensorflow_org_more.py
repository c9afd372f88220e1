"""tensorflow.org tutorials, eighth sweep: copied into a notebook as the tutorials write them, plain cells for data,
definitions and compile, `%%distribute -n 2` on the training cell, plain cells after it using what came back.

"Time series forecasting" (a `WindowGenerator` whose `split_window`, `plot`, `make_dataset` and the `train`/`val`/
`test`/`example` properties are plain functions of later cells attached to the class, `example` cached in the
instance; `compile_and_fit(model, window)` of an earlier cell; the `Baseline` models, an LSTM, a `ResidualWrapper` and
the autoregressive `FeedBack` model whose `warmup` and `call` are attached after it was built; the `val_performance`
dicts filled afterwards and `window.plot(model)`), "Basic classification" (Fashion MNIST: a Flatten/Dense Sequential,
then a `probability_model` wrapping the trained model), "word2vec" (`generate_training_data` over skip-grams and
negative samples, a `Word2Vec` model of two Embeddings and an einsum, a TensorBoard callback, then the embedding
weights and the vocabulary), "Overfit and underfit" (a gzipped CSV read by `CsvDataset`, `pack_row` over batches,
`InverseTimeDecay`, `compile_and_fit(model, name)` storing into `size_histories` / `regularizer_histories`, l2 and
Dropout variants) and "Save and load models" (`create_model()`, a ModelCheckpoint every 5 epochs with a `{epoch:04d}`
name, the latest checkpoint loaded into a new model, then a whole `.keras` model saved and reloaded). Each runs in one
process and on two ranks; the later plain cells must work after both, with comparable results. Data is synthetic, in
the tutorials' shapes, written to files where the tutorial reads one.

Lines that differ from tensorflow.org, because they fail in one process as well or need what is not installed:
`tfdocs.modeling.EpochDots()` and `tfdocs.plots.HistoryPlotter` (tensorflow_docs is not installed) are left out or
replaced by plain matplotlib; the epoch counts and model widths are smaller, to fit two cores. Two lines fail on
Keras 3 in one process: the overfitting tutorial's `pack_row` returns labels of shape (batch,), which Keras 3's
`BinaryCrossentropy` metric refuses against the model's (batch, 1) (here `row[0][:, tf.newaxis]`), and "Save and load"
calls `model.save_weights("training_2/cp-0000.weights.h5")` before the folder exists, which h5py does not make (here an
`os.makedirs(checkpoint_dir, exist_ok=True)` before it).
"""

import gzip
import os

import numpy as np
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


def _both(shell, tmp_path, monkeypatch, write, steps):
    """Runs `steps(run, distribute)` in one process, then on two ranks, each in a folder of its own with the data
    `write(folder)` puts there; returns both results."""
    results = {}
    for run, distribute in (("one", False), ("two", True)):
        _in_folder(monkeypatch, tmp_path / run)
        write(tmp_path / run)
        results[run] = steps(run, distribute)
    return results["one"], results["two"]


# ------------------------------------------------------------------------------------------ time series forecasting


def _write_jena_climate(folder):
    """jena_climate_2009_2016.csv's layout (a row every 10 minutes), fewer columns and days: pressure, temperature,
    humidity, wind speed and direction, with a daily cycle."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 6 * 24 * 42
    minutes = np.arange(n) * 10
    day = np.sin(2 * np.pi * minutes / (24 * 60))
    times = pd.Timestamp("2009-01-01 00:10:00") + pd.to_timedelta(minutes, unit="min")
    temperature = 8 + 6 * day + np.cumsum(rng.normal(0, 0.05, n))
    frame = pd.DataFrame(
        {
            "Date Time": times.strftime("%d.%m.%Y %H:%M:%S"),
            "p (mbar)": 990 + np.cumsum(rng.normal(0, 0.05, n)),
            "T (degC)": temperature,
            "rh (%)": np.clip(80 - 4 * temperature + rng.normal(0, 2, n), 5, 100),
            "wv (m/s)": np.abs(2 + rng.normal(0, 1, n)),
            "wd (deg)": rng.uniform(0, 360, n),
        }
    )
    frame.to_csv(folder / "jena_climate_2009_2016.csv", index=False)


TIME_SERIES = """
import os
import datetime

import IPython
import IPython.display
import matplotlib
matplotlib.use("Agg")
import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import tensorflow as tf

mpl.rcParams['figure.figsize'] = (8, 6)
mpl.rcParams['axes.grid'] = False
tf.keras.utils.set_random_seed(1)
csv_path = 'jena_climate_2009_2016.csv'
df = pd.read_csv(csv_path)
# Slice [start:stop:step], starting from index 5 take every 6th record.
df = df[5::6]

date_time = pd.to_datetime(df.pop('Date Time'), format='%d.%m.%Y %H:%M:%S')
wv = df.pop('wv (m/s)')

# Convert to radians.
wd_rad = df.pop('wd (deg)')*np.pi / 180

# Calculate the wind x and y components.
df['Wx'] = wv*np.cos(wd_rad)
df['Wy'] = wv*np.sin(wd_rad)
timestamp_s = date_time.map(pd.Timestamp.timestamp)
day = 24*60*60
year = (365.2425)*day

df['Day sin'] = np.sin(timestamp_s * (2 * np.pi / day))
df['Day cos'] = np.cos(timestamp_s * (2 * np.pi / day))
df['Year sin'] = np.sin(timestamp_s * (2 * np.pi / year))
df['Year cos'] = np.cos(timestamp_s * (2 * np.pi / year))
column_indices = {name: i for i, name in enumerate(df.columns)}

n = len(df)
train_df = df[0:int(n*0.7)]
val_df = df[int(n*0.7):int(n*0.9)]
test_df = df[int(n*0.9):]

num_features = df.shape[1]
train_mean = train_df.mean()
train_std = train_df.std()

train_df = (train_df - train_mean) / train_std
val_df = (val_df - train_mean) / train_std
test_df = (test_df - train_mean) / train_std


class WindowGenerator():
  def __init__(self, input_width, label_width, shift,
               train_df=train_df, val_df=val_df, test_df=test_df,
               label_columns=None):
    # Store the raw data.
    self.train_df = train_df
    self.val_df = val_df
    self.test_df = test_df

    # Work out the label column indices.
    self.label_columns = label_columns
    if label_columns is not None:
      self.label_columns_indices = {name: i for i, name in
                                    enumerate(label_columns)}
    self.column_indices = {name: i for i, name in
                           enumerate(train_df.columns)}

    # Work out the window parameters.
    self.input_width = input_width
    self.label_width = label_width
    self.shift = shift

    self.total_window_size = input_width + shift

    self.input_slice = slice(0, input_width)
    self.input_indices = np.arange(self.total_window_size)[self.input_slice]

    self.label_start = self.total_window_size - self.label_width
    self.labels_slice = slice(self.label_start, None)
    self.label_indices = np.arange(self.total_window_size)[self.labels_slice]

  def __repr__(self):
    return '\\n'.join([
        f'Total window size: {self.total_window_size}',
        f'Input indices: {self.input_indices}',
        f'Label indices: {self.label_indices}',
        f'Label column name(s): {self.label_columns}'])
"""

TIME_SERIES_WINDOW = """
def split_window(self, features):
  inputs = features[:, self.input_slice, :]
  labels = features[:, self.labels_slice, :]
  if self.label_columns is not None:
    labels = tf.stack(
        [labels[:, :, self.column_indices[name]] for name in self.label_columns],
        axis=-1)

  # Slicing doesn't preserve static shape information, so set the shapes
  # manually. This way the `tf.data.Datasets` are easier to inspect.
  inputs.set_shape([None, self.input_width, None])
  labels.set_shape([None, self.label_width, None])

  return inputs, labels

WindowGenerator.split_window = split_window


def plot(self, model=None, plot_col='T (degC)', max_subplots=3):
  inputs, labels = self.example
  plt.figure(figsize=(12, 8))
  plot_col_index = self.column_indices[plot_col]
  max_n = min(max_subplots, len(inputs))
  for n in range(max_n):
    plt.subplot(max_n, 1, n+1)
    plt.ylabel(f'{plot_col} [normed]')
    plt.plot(self.input_indices, inputs[n, :, plot_col_index],
             label='Inputs', marker='.', zorder=-10)

    if self.label_columns:
      label_col_index = self.label_columns_indices.get(plot_col, None)
    else:
      label_col_index = plot_col_index

    if label_col_index is None:
      continue

    plt.scatter(self.label_indices, labels[n, :, label_col_index],
                edgecolors='k', label='Labels', c='#2ca02c', s=64)
    if model is not None:
      predictions = model(inputs)
      plt.scatter(self.label_indices, predictions[n, :, label_col_index],
                  marker='X', edgecolors='k', label='Predictions',
                  c='#ff7f0e', s=64)

    if n == 0:
      plt.legend()

  plt.xlabel('Time [h]')

WindowGenerator.plot = plot


def make_dataset(self, data):
  data = np.array(data, dtype=np.float32)
  ds = tf.keras.utils.timeseries_dataset_from_array(
      data=data,
      targets=None,
      sequence_length=self.total_window_size,
      sequence_stride=1,
      shuffle=True,
      batch_size=32,)

  ds = ds.map(self.split_window)

  return ds

WindowGenerator.make_dataset = make_dataset


@property
def train(self):
  return self.make_dataset(self.train_df)

@property
def val(self):
  return self.make_dataset(self.val_df)

@property
def test(self):
  return self.make_dataset(self.test_df)

@property
def example(self):
  \"\"\"Get and cache an example batch of `inputs, labels` for plotting.\"\"\"
  result = getattr(self, '_example', None)
  if result is None:
    # No example batch was found, so get one from the `.train` dataset
    result = next(iter(self.train))
    # And cache it for next time
    self._example = result
  return result

WindowGenerator.train = train
WindowGenerator.val = val
WindowGenerator.test = test
WindowGenerator.example = example
"""

TIME_SERIES_MODELS = """
single_step_window = WindowGenerator(
    input_width=1, label_width=1, shift=1,
    label_columns=['T (degC)'])
for example_inputs, example_labels in single_step_window.train.take(1):
  print(f'Inputs shape (batch, time, features): {example_inputs.shape}')


class Baseline(tf.keras.Model):
  def __init__(self, label_index=None):
    super().__init__()
    self.label_index = label_index

  def call(self, inputs):
    if self.label_index is None:
      return inputs
    result = inputs[:, :, self.label_index]
    return result[:, :, tf.newaxis]


baseline = Baseline(label_index=column_indices['T (degC)'])

baseline.compile(loss=tf.keras.losses.MeanSquaredError(),
                 metrics=[tf.keras.metrics.MeanAbsoluteError()])

val_performance = {}
performance = {}
val_performance['Baseline'] = baseline.evaluate(single_step_window.val, return_dict=True)
performance['Baseline'] = baseline.evaluate(single_step_window.test, verbose=0, return_dict=True)
wide_window = WindowGenerator(
    input_width=24, label_width=24, shift=1,
    label_columns=['T (degC)'])
wide_window.plot(baseline)

# MAX_EPOCHS = 20 in the tutorial.
MAX_EPOCHS = 4

def compile_and_fit(model, window, patience=2):
  early_stopping = tf.keras.callbacks.EarlyStopping(monitor='val_loss',
                                                    patience=patience,
                                                    mode='min')

  model.compile(loss=tf.keras.losses.MeanSquaredError(),
                optimizer=tf.keras.optimizers.Adam(),
                metrics=[tf.keras.metrics.MeanAbsoluteError()])

  history = model.fit(window.train, epochs=MAX_EPOCHS,
                      validation_data=window.val,
                      callbacks=[early_stopping])
  return history


lstm_model = tf.keras.models.Sequential([
    # Shape [batch, time, features] => [batch, time, lstm_units]
    tf.keras.layers.LSTM(32, return_sequences=True),
    # Shape => [batch, time, features]
    tf.keras.layers.Dense(units=1)
])
print('Input shape:', wide_window.example[0].shape)
print('Output shape:', lstm_model(wide_window.example[0]).shape)
"""

TIME_SERIES_LSTM_FIT = "history = compile_and_fit(lstm_model, wide_window)\n"

TIME_SERIES_LSTM_AFTER = """
IPython.display.clear_output()
val_performance['LSTM'] = lstm_model.evaluate(wide_window.val, return_dict=True)
performance['LSTM'] = lstm_model.evaluate(wide_window.test, verbose=0, return_dict=True)
wide_window.plot(lstm_model)
x = np.arange(len(performance))
width = 0.3
metric_name = 'mean_absolute_error'
val_mae = [v[metric_name] for v in val_performance.values()]
test_mae = [v[metric_name] for v in performance.values()]

plt.ylabel('mean_absolute_error [T (degC), normalized]')
plt.bar(x - 0.17, val_mae, width, label='Validation')
plt.bar(x + 0.17, test_mae, width, label='Test')
plt.xticks(ticks=x, labels=performance.keys(),
           rotation=45)
_ = plt.legend()


class ResidualWrapper(tf.keras.Model):
  def __init__(self, model):
    super().__init__()
    self.model = model

  def call(self, inputs, *args, **kwargs):
    delta = self.model(inputs, *args, **kwargs)

    # The prediction for each time step is the input
    # from the previous time step plus the delta
    # calculated by the model.
    return inputs + delta
"""

TIME_SERIES_RESIDUAL_FIT = """residual_lstm = ResidualWrapper(
    tf.keras.Sequential([
    tf.keras.layers.LSTM(32, return_sequences=True),
    tf.keras.layers.Dense(
        num_features,
        # The predicted deltas should start small.
        # Therefore, initialize the output layer with zeros.
        kernel_initializer=tf.initializers.zeros())
]))

history = compile_and_fit(residual_lstm, wide_window)
"""

TIME_SERIES_FEEDBACK = """
IPython.display.clear_output()
residual_val = residual_lstm.evaluate(wide_window.val, return_dict=True)
OUT_STEPS = 24
multi_window = WindowGenerator(input_width=24,
                               label_width=OUT_STEPS,
                               shift=OUT_STEPS)


class MultiStepLastBaseline(tf.keras.Model):
  def call(self, inputs):
    return tf.tile(inputs[:, -1:, :], [1, OUT_STEPS, 1])


last_baseline = MultiStepLastBaseline()
last_baseline.compile(loss=tf.keras.losses.MeanSquaredError(),
                      metrics=[tf.keras.metrics.MeanAbsoluteError()])

multi_val_performance = {}
multi_performance = {}

multi_val_performance['Last'] = last_baseline.evaluate(multi_window.val, return_dict=True)
multi_performance['Last'] = last_baseline.evaluate(multi_window.test, verbose=0, return_dict=True)
multi_window.plot(last_baseline)


class FeedBack(tf.keras.Model):
  def __init__(self, units, out_steps):
    super().__init__()
    self.out_steps = out_steps
    self.units = units
    self.lstm_cell = tf.keras.layers.LSTMCell(units)
    # Also wrap the LSTMCell in an RNN to simplify the `warmup` method.
    self.lstm_rnn = tf.keras.layers.RNN(self.lstm_cell, return_state=True)
    self.dense = tf.keras.layers.Dense(num_features)


feedback_model = FeedBack(units=32, out_steps=OUT_STEPS)
"""

TIME_SERIES_WARMUP = """
def warmup(self, inputs):
  # inputs.shape => (batch, time, features)
  # x.shape => (batch, lstm_units)
  x, *state = self.lstm_rnn(inputs)

  # predictions.shape => (batch, features)
  prediction = self.dense(x)
  return prediction, state

FeedBack.warmup = warmup
prediction, state = feedback_model.warmup(multi_window.example[0])
prediction.shape
"""

TIME_SERIES_CALL = """
def call(self, inputs, training=None):
  # Use a TensorArray to capture dynamically unrolled outputs.
  predictions = []
  # Initialize the LSTM state.
  prediction, state = self.warmup(inputs)

  # Insert the first prediction.
  predictions.append(prediction)

  # Run the rest of the prediction steps.
  for n in range(1, self.out_steps):
    # Use the last prediction as input.
    x = prediction
    # Execute one lstm step.
    x, state = self.lstm_cell(x, states=state,
                              training=training)
    # Convert the lstm output to a prediction.
    prediction = self.dense(x)
    # Add the prediction to the output.
    predictions.append(prediction)

  # predictions.shape => (time, batch, features)
  predictions = tf.stack(predictions)
  # predictions.shape => (batch, time, features)
  predictions = tf.transpose(predictions, [1, 0, 2])
  return predictions

FeedBack.call = call
print('Output shape (batch, time, features): ', feedback_model(multi_window.example[0]).shape)
"""

TIME_SERIES_FEEDBACK_FIT = "history = compile_and_fit(feedback_model, multi_window)\n"

TIME_SERIES_FEEDBACK_AFTER = """
IPython.display.clear_output()

multi_val_performance['AR LSTM'] = feedback_model.evaluate(multi_window.val, return_dict=True)
multi_performance['AR LSTM'] = feedback_model.evaluate(multi_window.test, verbose=0, return_dict=True)
multi_window.plot(feedback_model)
feedback_epochs = len(history.history['loss'])
plt.close('all')
"""


def test_time_series_forecasting_windows_residual_and_feedback_models(shell, tmp_path, monkeypatch):
    def steps(run, distribute):
        ns = _cell(shell, TIME_SERIES)
        _cell(shell, TIME_SERIES_WINDOW)
        ns = _cell(shell, TIME_SERIES_MODELS)
        wide_window, example = ns["wide_window"], ns["wide_window"]._example
        ns = _cell(shell, TIME_SERIES_LSTM_FIT, distribute=distribute)
        assert ns["wide_window"] is wide_window
        assert wide_window._example is example, "the window's cached example batch was replaced"
        assert 1 <= len(ns["history"].history["loss"]) <= 4
        ns = _cell(shell, TIME_SERIES_LSTM_AFTER)
        assert list(ns["val_performance"]) == ["Baseline", "LSTM"], ns["val_performance"]
        ns = _cell(shell, TIME_SERIES_RESIDUAL_FIT, distribute=distribute)
        residual = ns["residual_lstm"]
        assert isinstance(residual, ns["ResidualWrapper"]) and isinstance(residual.model, ns["tf"].keras.Sequential)
        ns = _cell(shell, TIME_SERIES_FEEDBACK)
        _cell(shell, TIME_SERIES_WARMUP)
        ns = _cell(shell, TIME_SERIES_CALL)
        ns = _cell(shell, TIME_SERIES_FEEDBACK_FIT, distribute=distribute)
        ns = _cell(shell, TIME_SERIES_FEEDBACK_AFTER)
        assert ns["feedback_model"].lstm_rnn.cell is ns["feedback_model"].lstm_cell
        return {
            "baseline": ns["val_performance"]["Baseline"]["mean_absolute_error"],
            "lstm": ns["val_performance"]["LSTM"]["mean_absolute_error"],
            "residual": ns["residual_val"]["mean_absolute_error"],
            "last": ns["multi_val_performance"]["Last"]["mean_absolute_error"],
            "feedback": ns["multi_val_performance"]["AR LSTM"]["mean_absolute_error"],
        }

    one, two = _both(shell, tmp_path, monkeypatch, _write_jena_climate, steps)
    assert two["baseline"] == one["baseline"], (two, one)  # no training: the same data, the same windows
    for name in ("lstm", "residual", "feedback"):
        close(two[name], one[name], 1.6, f"{name}: validation mean absolute error")
    assert two["last"] == one["last"], (two, one)


# --------------------------------------------------------------------------------------------- basic classification


def _fashion_mnist(n, seed):
    """Fashion MNIST's shapes and dtypes (28x28 uint8 images, uint8 labels 0-9): each class a bright band at its
    own rows, over noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = rng.integers(0, 90, (n, 28, 28)).astype(np.uint8)
    for k in range(10):
        images[labels == k, 2 + 2 * k : 6 + 2 * k, 4:24] = 220
    return images, labels


def _write_fashion_mnist(folder):
    (train_images, train_labels), (test_images, test_labels) = _fashion_mnist(3000, 0), _fashion_mnist(500, 1)
    np.savez(
        folder / "fashion_mnist.npz",
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
    )


CLASSIFICATION = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(1)
# fashion_mnist.load_data(), from a file written in its shapes.
with np.load('fashion_mnist.npz') as f:
    (train_images, train_labels), (test_images, test_labels) = (
        (f['train_images'], f['train_labels']), (f['test_images'], f['test_labels']))
class_names = ['T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat',
               'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot']
train_images = train_images / 255.0

test_images = test_images / 255.0
model = tf.keras.Sequential([
    tf.keras.layers.Flatten(input_shape=(28, 28)),
    tf.keras.layers.Dense(128, activation='relu'),
    tf.keras.layers.Dense(10)
])
model.compile(optimizer='adam',
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=['accuracy'])
"""

CLASSIFICATION_FIT = "model.fit(train_images, train_labels, epochs=10)\n"

CLASSIFICATION_AFTER = """
test_loss, test_acc = model.evaluate(test_images,  test_labels, verbose=2)

print('\\nTest accuracy:', test_acc)
probability_model = tf.keras.Sequential([model,
                                         tf.keras.layers.Softmax()])
predictions = probability_model.predict(test_images)
predictions[0]
first = np.argmax(predictions[0])


def plot_image(i, predictions_array, true_label, img):
  true_label, img = true_label[i], img[i]
  plt.grid(False)
  plt.xticks([])
  plt.yticks([])

  plt.imshow(img, cmap=plt.cm.binary)

  predicted_label = np.argmax(predictions_array)
  if predicted_label == true_label:
    color = 'blue'
  else:
    color = 'red'

  plt.xlabel("{} {:2.0f}% ({})".format(class_names[predicted_label],
                                100*np.max(predictions_array),
                                class_names[true_label]),
                                color=color)


def plot_value_array(i, predictions_array, true_label):
  true_label = true_label[i]
  plt.grid(False)
  plt.xticks(range(10))
  plt.yticks([])
  thisplot = plt.bar(range(10), predictions_array, color="#777777")
  plt.ylim([0, 1])
  predicted_label = np.argmax(predictions_array)

  thisplot[predicted_label].set_color('red')
  thisplot[true_label].set_color('blue')


i = 0
plt.figure(figsize=(6,3))
plt.subplot(1,2,1)
plot_image(i, predictions[i], test_labels, test_images)
plt.subplot(1,2,2)
plot_value_array(i, predictions[i],  test_labels)
plt.show()
# Grab an image from the test dataset.
img = test_images[1]
# Add the image to a batch where it's the only member.
img = (np.expand_dims(img,0))
predictions_single = probability_model.predict(img)
single = np.argmax(predictions_single[0])
plt.close('all')
"""


def test_basic_classification_wraps_the_trained_model_in_a_probability_model(shell, tmp_path, monkeypatch):
    def steps(run, distribute):
        ns = _cell(shell, CLASSIFICATION)
        model, images = ns["model"], ns["train_images"]
        ns = _cell(shell, CLASSIFICATION_FIT, distribute=distribute)
        assert ns["model"] is model and ns["train_images"] is images
        assert len(model.history.history["loss"]) == 10
        ns = _cell(shell, CLASSIFICATION_AFTER)
        assert ns["probability_model"].layers[0] is model
        predictions = ns["predictions"]
        assert predictions.shape == (500, 10) and np.allclose(predictions.sum(axis=1), 1, atol=1e-4)
        assert ns["first"] == ns["test_labels"][0] and ns["single"] == ns["test_labels"][1]
        return ns["test_loss"], ns["test_acc"]

    (one_loss, one_acc), (two_loss, two_acc) = _both(shell, tmp_path, monkeypatch, _write_fashion_mnist, steps)
    assert two_acc > 0.9 and two_acc > one_acc - 0.05, (two_acc, one_acc)
    close(two_loss, one_loss, 3, "test loss")  # both near zero: a loose factor


# ---------------------------------------------------------------------------------------------------------- word2vec


def _write_shakespeare_lines(folder):
    """A text of sentences over 2,000 words in 20 topics (a sentence keeps to one topic), with blank lines: the
    skip-gram sampling table keeps a word of frequency rank r with probability about sqrt(1e-5 r ln r), so a text
    over a few dozen words would give almost no pairs."""
    rng = np.random.default_rng(0)
    lines = []
    for k in range(500):
        topic = rng.integers(0, 20)
        lines.append(" ".join(f"w{topic}x{w}" for w in rng.integers(0, 100, 10)) + ".")
        if k % 9 == 0:
            lines.append("")  # dropped by the tutorial's filter
    (folder / "shakespeare.txt").write_text("\n".join(lines) + "\n")


WORD2VEC = """
import io
import re
import string
import tqdm

import numpy as np

import tensorflow as tf
from tensorflow.keras import layers
SEED = 42
AUTOTUNE = tf.data.AUTOTUNE
tf.keras.utils.set_random_seed(SEED)


# Generates skip-gram pairs with negative sampling for a list of sequences
# (int-encoded sentences) based on window size, number of negative samples
# and vocabulary size.
def generate_training_data(sequences, window_size, num_ns, vocab_size, seed):
  # Elements of each training example are appended to these lists.
  targets, contexts, labels = [], [], []

  # Build the sampling table for `vocab_size` tokens.
  sampling_table = tf.keras.preprocessing.sequence.make_sampling_table(vocab_size)

  # Iterate over all sequences (sentences) in the dataset.
  for sequence in tqdm.tqdm(sequences):

    # Generate positive skip-gram pairs for a sequence (sentence).
    positive_skip_grams, _ = tf.keras.preprocessing.sequence.skipgrams(
          sequence,
          vocabulary_size=vocab_size,
          sampling_table=sampling_table,
          window_size=window_size,
          negative_samples=0)

    # Iterate over each positive skip-gram pair to produce training examples
    # with a positive context word and negative samples.
    for target_word, context_word in positive_skip_grams:
      context_class = tf.expand_dims(
          tf.constant([context_word], dtype="int64"), 1)
      negative_sampling_candidates, _, _ = tf.random.log_uniform_candidate_sampler(
          true_classes=context_class,
          num_true=1,
          num_sampled=num_ns,
          unique=True,
          range_max=vocab_size,
          seed=seed,
          name="negative_sampling")

      # Build context and label vectors (for one target word)
      context = tf.concat([tf.squeeze(context_class,1), negative_sampling_candidates], 0)
      label = tf.constant([1] + [0]*num_ns, dtype="int64")

      # Append each element from the training example to global lists.
      targets.append(target_word)
      contexts.append(context)
      labels.append(label)

  return targets, contexts, labels


path_to_file = 'shakespeare.txt'
text_ds = tf.data.TextLineDataset(path_to_file).filter(lambda x: tf.cast(tf.strings.length(x), bool))


# Now, create a custom standardization function to lowercase the text and
# remove punctuation.
def custom_standardization(input_data):
  lowercase = tf.strings.lower(input_data)
  return tf.strings.regex_replace(lowercase,
                                  '[%s]' % re.escape(string.punctuation), '')


# Define the vocabulary size and the number of words in a sequence.
vocab_size = 4096
sequence_length = 10

# Use the `TextVectorization` layer to normalize, split, and map strings to
# integers. Set the `output_sequence_length` length to pad all samples to the
# same length.
vectorize_layer = layers.TextVectorization(
    standardize=custom_standardization,
    max_tokens=vocab_size,
    output_mode='int',
    output_sequence_length=sequence_length)
vectorize_layer.adapt(text_ds.batch(1024))
inverse_vocab = vectorize_layer.get_vocabulary()
# Vectorize the data in text_ds.
text_vector_ds = text_ds.batch(1024).prefetch(AUTOTUNE).map(vectorize_layer).unbatch()
sequences = list(text_vector_ds.as_numpy_iterator())
targets, contexts, labels = generate_training_data(
    sequences=sequences,
    window_size=2,
    num_ns=4,
    vocab_size=vocab_size,
    seed=SEED)

targets = np.array(targets)
contexts = np.array(contexts)
labels = np.array(labels)
# BATCH_SIZE = 1024 in the tutorial, over a larger text.
BATCH_SIZE = 64
BUFFER_SIZE = 10000
dataset = tf.data.Dataset.from_tensor_slices(((targets, contexts), labels))
dataset = dataset.shuffle(BUFFER_SIZE).batch(BATCH_SIZE, drop_remainder=True)
dataset = dataset.cache().prefetch(buffer_size=AUTOTUNE)


class Word2Vec(tf.keras.Model):
  def __init__(self, vocab_size, embedding_dim):
    super(Word2Vec, self).__init__()
    self.target_embedding = layers.Embedding(vocab_size,
                                      embedding_dim,
                                      name="w2v_embedding")
    self.context_embedding = layers.Embedding(vocab_size,
                                       embedding_dim)

  def call(self, pair):
    target, context = pair
    # target: (batch, dummy?)  # The dummy axis doesn't exist in TF2.7+
    # context: (batch, context)
    if len(target.shape) == 2:
      target = tf.squeeze(target, axis=1)
    # target: (batch,)
    word_emb = self.target_embedding(target)
    # word_emb: (batch, embed)
    context_emb = self.context_embedding(context)
    # context_emb: (batch, context, embed)
    dots = tf.einsum('be,bce->bc', word_emb, context_emb)
    # dots: (batch, context)
    return dots


embedding_dim = 128
word2vec = Word2Vec(vocab_size, embedding_dim)
word2vec.compile(optimizer='adam',
                 loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True),
                 metrics=['accuracy'])
tensorboard_callback = tf.keras.callbacks.TensorBoard(log_dir="logs")
"""

# epochs=20 in the tutorial.
WORD2VEC_FIT = "word2vec.fit(dataset, epochs=8, callbacks=[tensorboard_callback])\n"

WORD2VEC_AFTER = """
weights = word2vec.get_layer('w2v_embedding').get_weights()[0]
vocab = vectorize_layer.get_vocabulary()
out_v = io.open('vectors.tsv', 'w', encoding='utf-8')
out_m = io.open('metadata.tsv', 'w', encoding='utf-8')

for index, word in enumerate(vocab):
  if index == 0:
    continue  # skip 0, it's padding.
  vec = weights[index]
  out_v.write('\\t'.join([str(x) for x in vec]) + "\\n")
  out_m.write(word + "\\n")
out_v.close()
out_m.close()
final = word2vec.evaluate(dataset, return_dict=True, verbose=0)


def similarity(a, b):
  u, v = weights[vocab.index(a)], weights[vocab.index(b)]
  return float(np.dot(u, v) / np.linalg.norm(u) / np.linalg.norm(v))
"""


def test_word2vec_embeddings_and_vocabulary_after_training(shell, tmp_path, monkeypatch):
    def steps(run, distribute):
        ns = _cell(shell, WORD2VEC)
        word2vec, vectorize_layer = ns["word2vec"], ns["vectorize_layer"]
        vocabulary = vectorize_layer.get_vocabulary()
        ns = _cell(shell, WORD2VEC_FIT, distribute=distribute)
        assert ns["word2vec"] is word2vec and ns["vectorize_layer"] is vectorize_layer
        assert os.listdir("logs"), "TensorBoard wrote nothing"
        losses = list(word2vec.history.history["loss"])
        ns = _cell(shell, WORD2VEC_AFTER)
        assert word2vec.history.history["loss"] == losses, (run, word2vec.history.history)  # evaluate keeps it
        assert ns["vocab"] == vocabulary and ns["weights"].shape == (4096, 128)
        lines = (tmp_path / run / "vectors.tsv").read_text().splitlines()
        assert len(lines) == len(vocabulary) - 1 and len(lines[0].split("\t")) == 128
        return ns["final"], losses, int(word2vec.optimizer.iterations), len(ns["targets"]) // 64

    one, two = _both(shell, tmp_path, monkeypatch, _write_shakespeare_lines, steps)
    (one_final, _, one_steps, batches), (two_final, two_losses, two_steps, _) = one, two
    assert (one_steps, two_steps) == (8 * batches, 8 * (batches // 2)), (one_steps, two_steps, batches)
    assert two_losses[-1] < two_losses[0] * 0.8, two_losses
    # Adam moves each embedding row by about the rate whenever its word is in a batch, on either rank: at twice the
    # rate (--lr-scale linear) two ranks go further in 8 epochs (measured: 0.43 against one process's 0.73).
    assert 0.3 * one_final["loss"] < two_final["loss"] < 1.2 * one_final["loss"], (two_final, one_final)
    assert two_final["accuracy"] > 0.9, two_final


# -------------------------------------------------------------------------------------------- overfit and underfit


def _write_higgs(folder):
    """HIGGS.csv.gz's layout: gzipped CSV rows, the label first, then 28 features; the label depends on a few."""
    rng = np.random.default_rng(0)
    n = 3200
    features = rng.normal(0, 1, (n, 28))
    score = features[:, 0] + 0.8 * features[:, 3] * features[:, 5] - 0.6 * features[:, 7] + rng.normal(0, 0.7, n)
    rows = np.column_stack([(score > 0).astype(float), features])
    with gzip.open(folder / "HIGGS.csv.gz", "wt") as f:
        f.write("\n".join(",".join(f"{v:.6e}" for v in row) for row in rows) + "\n")


OVERFIT = """
import tensorflow as tf

from tensorflow.keras import layers
from tensorflow.keras import regularizers
import matplotlib
matplotlib.use("Agg")
from matplotlib import pyplot as plt
import numpy as np

import pathlib
import shutil
import tempfile

tf.keras.utils.set_random_seed(1)
logdir = pathlib.Path(tempfile.mkdtemp())/"tensorboard_logs"
shutil.rmtree(logdir, ignore_errors=True)
gz = 'HIGGS.csv.gz'
FEATURES = 28
ds = tf.data.experimental.CsvDataset(gz,[float(),]*(FEATURES+1), compression_type="GZIP")


def pack_row(*row):
  # `label = row[0]` in the tutorial: Keras 3's BinaryCrossentropy metric refuses labels of shape (batch,) against
  # the model's (batch, 1), in one process too.
  label = row[0][:, tf.newaxis]
  features = tf.stack(row[1:],1)
  return features, label


packed_ds = ds.batch(10000).map(pack_row).unbatch()
# The tutorial's sizes are 1e3, 1e4, 1e4 and 500 (over 11 million rows).
N_VALIDATION = int(2e2)
N_TRAIN = int(2e3)
BUFFER_SIZE = int(2e3)
BATCH_SIZE = 100
STEPS_PER_EPOCH = N_TRAIN//BATCH_SIZE
validate_ds = packed_ds.take(N_VALIDATION).cache()
train_ds = packed_ds.skip(N_VALIDATION).take(N_TRAIN).cache()
validate_ds = validate_ds.batch(BATCH_SIZE)
train_ds = train_ds.shuffle(BUFFER_SIZE).repeat().batch(BATCH_SIZE)
lr_schedule = tf.keras.optimizers.schedules.InverseTimeDecay(
  0.001,
  decay_steps=STEPS_PER_EPOCH*1000,
  decay_rate=1,
  staircase=False)


def get_optimizer():
  return tf.keras.optimizers.Adam(lr_schedule)


def get_callbacks(name):
  return [
    # tfdocs.modeling.EpochDots() in the tutorial: tensorflow_docs is not installed here.
    tf.keras.callbacks.EarlyStopping(monitor='val_binary_crossentropy', patience=200),
    tf.keras.callbacks.TensorBoard(logdir/name),
  ]


# max_epochs=10000 in the tutorial (with EarlyStopping's patience of 200).
def compile_and_fit(model, name, optimizer=None, max_epochs=6):
  if optimizer is None:
    optimizer = get_optimizer()
  model.compile(optimizer=optimizer,
                loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
                metrics=[
                  tf.keras.metrics.BinaryCrossentropy(
                      from_logits=True, name='binary_crossentropy'),
                  'accuracy'])

  model.summary()

  history = model.fit(
    train_ds,
    steps_per_epoch = STEPS_PER_EPOCH,
    epochs=max_epochs,
    validation_data=validate_ds,
    callbacks=get_callbacks(name),
    verbose=0)
  return history


tiny_model = tf.keras.Sequential([
    layers.Dense(16, activation='elu', input_shape=(FEATURES,)),
    layers.Dense(1)
])
size_histories = {}
"""

OVERFIT_TINY = "size_histories['Tiny'] = compile_and_fit(tiny_model, 'sizes/Tiny')\n"

OVERFIT_REGULARIZERS = """
tiny_val = size_histories['Tiny'].history['val_binary_crossentropy']
plt.plot(size_histories['Tiny'].epoch, tiny_val, label='Tiny')
plt.ylim([0.5, 0.7])
shutil.rmtree(logdir/'regularizers/Tiny', ignore_errors=True)
shutil.copytree(logdir/'sizes/Tiny', logdir/'regularizers/Tiny')
regularizer_histories = {}
regularizer_histories['Tiny'] = size_histories['Tiny']
# 512 units in the tutorial.
l2_model = tf.keras.Sequential([
    layers.Dense(64, activation='elu',
                 kernel_regularizer=regularizers.l2(0.001),
                 input_shape=(FEATURES,)),
    layers.Dense(64, activation='elu',
                 kernel_regularizer=regularizers.l2(0.001)),
    layers.Dense(1)
])
dropout_model = tf.keras.Sequential([
    layers.Dense(64, activation='elu', input_shape=(FEATURES,)),
    layers.Dropout(0.5),
    layers.Dense(64, activation='elu'),
    layers.Dropout(0.5),
    layers.Dense(1)
])
"""

OVERFIT_L2_DROPOUT = """regularizer_histories['l2'] = compile_and_fit(l2_model, "regularizers/l2")
regularizer_histories['dropout'] = compile_and_fit(dropout_model, "regularizers/dropout")
"""

OVERFIT_AFTER = """
for features, label in packed_ds.batch(1000).take(1):
  result = l2_model(features)
regularization_loss=tf.add_n(l2_model.losses)
final_val = {name: h.history['val_binary_crossentropy'][-1] for name, h in regularizer_histories.items()}
for name, h in regularizer_histories.items():
  plt.plot(h.epoch, h.history['val_binary_crossentropy'], label=name)
plt.legend()
plt.close('all')
"""


def test_overfit_and_underfit_histories_kept_in_dicts(shell, tmp_path, monkeypatch):
    def steps(run, distribute):
        ns = _cell(shell, OVERFIT)
        histories, train_ds = ns["size_histories"], ns["train_ds"]
        ns = _cell(shell, OVERFIT_TINY, distribute=distribute)
        assert ns["size_histories"] is histories and ns["train_ds"] is train_ds
        assert len(histories["Tiny"].history["val_binary_crossentropy"]) == 6, histories["Tiny"].history
        assert sorted(os.listdir(ns["logdir"] / "sizes/Tiny")) == ["train", "validation"]
        ns = _cell(shell, OVERFIT_REGULARIZERS)
        ns = _cell(shell, OVERFIT_L2_DROPOUT, distribute=distribute)
        assert ns["regularizer_histories"]["Tiny"] is histories["Tiny"]
        ns = _cell(shell, OVERFIT_AFTER)
        assert ns["result"].shape == (1000, 1) and float(ns["regularization_loss"]) > 0
        return ns["final_val"], float(ns["regularization_loss"])

    (one, one_l2), (two, two_l2) = _both(shell, tmp_path, monkeypatch, _write_higgs, steps)
    assert set(two) == {"Tiny", "l2", "dropout"}, two
    for name in two:
        close(two[name], one[name], 1.3, f"{name}: validation binary cross-entropy")
    close(two_l2, one_l2, 1.3, "l2 regularization loss")


# --------------------------------------------------------------------------------------------- save and load models


def _write_mnist(folder):
    """mnist.npz's arrays (28x28 uint8 digits, uint8 labels): each digit a bright block at its own place."""
    rng = np.random.default_rng(0)

    def digits(n):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for k in range(10):
            images[labels == k, 2 * k + 2 : 2 * k + 8, 3 + k : 12 + k] = 255
        return images, labels

    (x_train, y_train), (x_test, y_test) = digits(1000), digits(1000)
    np.savez(folder / "mnist.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


SAVE_LOAD = """
import os
import math

import numpy as np
import tensorflow as tf
from tensorflow import keras

tf.keras.utils.set_random_seed(1)
# tf.keras.datasets.mnist.load_data(), from a file written in its shapes.
with np.load('mnist.npz') as f:
    (train_images, train_labels), (test_images, test_labels) = (
        (f['x_train'], f['y_train']), (f['x_test'], f['y_test']))

train_labels = train_labels[:1000]
test_labels = test_labels[:1000]

train_images = train_images[:1000].reshape(-1, 28 * 28) / 255.0
test_images = test_images[:1000].reshape(-1, 28 * 28) / 255.0


# Define a simple sequential model
def create_model():
  model = tf.keras.Sequential([
    keras.layers.Dense(512, activation='relu', input_shape=(784,)),
    keras.layers.Dropout(0.2),
    keras.layers.Dense(10)
  ])

  model.compile(optimizer='adam',
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  return model


# Include the epoch in the file name (uses `str.format`)
checkpoint_path = "training_2/cp-{epoch:04d}.weights.h5"
checkpoint_dir = os.path.dirname(checkpoint_path)

batch_size = 32

# Calculate the number of batches per epoch
n_batches = len(train_images) / batch_size
n_batches = math.ceil(n_batches)    # round up the number of batches to the nearest whole integer

# Create a callback that saves the model's weights every 5 epochs
cp_callback = tf.keras.callbacks.ModelCheckpoint(
    filepath=checkpoint_path,
    verbose=1,
    save_weights_only=True,
    save_freq=5*n_batches)

# Create a new model instance
model = create_model()

# Not in the tutorial: Keras 3 writes a .weights.h5 file through h5py, which makes no folder (one process too).
os.makedirs(checkpoint_dir, exist_ok=True)
# Save the weights using the `checkpoint_path` format
model.save_weights(checkpoint_path.format(epoch=0))
"""

# epochs=50 in the tutorial.
SAVE_LOAD_FIT = """# Train the model with the new callback
model.fit(train_images,
          train_labels,
          epochs=10,
          batch_size=batch_size,
          callbacks=[cp_callback],
          validation_data=(test_images, test_labels),
          verbose=0)
"""

SAVE_LOAD_AFTER = """
saved = os.listdir(checkpoint_dir)


def load_latest_checkpoint(checkpoint_dir):
    latest = max(os.listdir(checkpoint_dir), key=lambda f: int(f.split('-')[1].split('.')[0]))
    return os.path.join(checkpoint_dir, latest)


latest = load_latest_checkpoint(checkpoint_dir)
# Create a new model instance
model_latest = create_model()

# Load the previously saved weights
model_latest.load_weights(latest)

# Re-evaluate the model
loss, acc = model_latest.evaluate(test_images, test_labels, verbose=2)
print("Restored model, accuracy: {:5.2f}%".format(100 * acc))
trained_loss, trained_acc = model.evaluate(test_images, test_labels, verbose=2)
# Save the entire model as a `.keras` zip archive.
model.save('my_model.keras')
new_model = tf.keras.models.load_model('my_model.keras')

# Show the model architecture
new_model.summary()
# Evaluate the restored model
new_loss, new_acc = new_model.evaluate(test_images, test_labels, verbose=2)
print('Restored model, accuracy: {:5.2f}%'.format(100 * new_acc))
print(new_model.predict(test_images).shape)
"""


def test_save_and_load_models_checkpoints_every_five_epochs(shell, tmp_path, monkeypatch):
    def steps(run, distribute):
        ns = _cell(shell, SAVE_LOAD)
        model, callback = ns["model"], ns["cp_callback"]
        ns = _cell(shell, SAVE_LOAD_FIT, distribute=distribute)
        assert ns["model"] is model and ns["cp_callback"] is callback
        ns = _cell(shell, SAVE_LOAD_AFTER)
        assert sorted(ns["saved"]) == ["cp-0000.weights.h5", "cp-0005.weights.h5", "cp-0010.weights.h5"], ns["saved"]
        assert ns["latest"] == os.path.join("training_2", "cp-0010.weights.h5")
        # The checkpoint after the last epoch is the trained model, and so is the whole-model archive.
        assert abs(ns["loss"] - ns["trained_loss"]) < 1e-5 and abs(ns["new_loss"] - ns["trained_loss"]) < 1e-5
        return ns["loss"], ns["acc"]

    (one_loss, one_acc), (two_loss, two_acc) = _both(shell, tmp_path, monkeypatch, _write_mnist, steps)
    assert two_acc > 0.9 and two_acc > one_acc - 0.05, (two_acc, one_acc)
    close(two_loss, one_loss, 3, "test loss")  # both near zero: a loose factor
