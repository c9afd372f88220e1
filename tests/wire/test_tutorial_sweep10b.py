"""Tutorials, sweep 10b: tensorflow.org's tutorials as they write them (tf.keras spelling), set up in plain cells,
`%%distribute -n 2` on the training cell only, the tutorial's later cells in plain cells after it.

"Classification on imbalanced data" (`make_model(metrics=METRICS, output_bias=None)` over the tutorial's list of
metrics with both AUCs, an initial bias from `np.log([pos / neg])`, initial weights saved to a `.weights.h5` in a
plain cell and loaded in the training cell, EarlyStopping on `val_prc` with `restore_best_weights`, the
`class_weight` fit, and the oversampled `sample_from_datasets` dataset with `steps_per_epoch`; then `predict`,
`evaluate(return_dict=True)`, `zip(model.metrics_names, results)` and `plot_metrics(history)`), "Neural style
transfer" (a `StyleContentModel` over a small conv stack standing in for VGG19, the notebook's `tf.Variable` image
optimized by the `@tf.function train_step(image)` loop, with and without `tf.image.total_variation`, then
`tensor_to_image(image)`), "Load CSV data" (titanic's preprocessing head of Inputs, Normalization, StringLookup and
CategoryEncoding under `titanic_model`, saved to `.keras` and loaded back, then `make_csv_dataset` and `CsvDataset`
pipelines over the CSV file; pandas 3 reads string columns as `str`, not `object`, so the head's
`dtype == object` test also takes `pd.api.types.is_string_dtype`). In "Classification on imbalanced data" two lines
fail on Keras 3 in one process and are written as they work there: labels are `.reshape(-1, 1)` (the
BinaryCrossentropy metric wants the output's rank) and `resampled_steps_per_epoch = int(np.ceil(...))` (a float
fails in Keras' epoch iterator).
Each runs in one process and on two ranks; the later plain cells must work after both, with comparable results.
Data is synthetic, in the tutorials' shapes, the models smaller.
"""

import os

import numpy as np
import pytest
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


def _cell_shown(shell, code, distribute):
    """`_cell`, also returning what the cell printed."""
    from IPython.utils.capture import capture_output

    header = f"%%distribute -n 2 --backend {os.environ.get('JDL_TEST_BACKEND', 'horovod')}\n" if distribute else ""
    with capture_output() as shown:
        result = shell.run_cell(header + code, store_history=False)
    text = shown.stdout + shown.stderr
    assert result.success, f"{result.error_before_exec or result.error_in_exec!r}\n{text[-3000:]}"
    assert "did not come back" not in text and "the ranks trained apart" not in text, text
    return shell.user_ns, text


def _weights(model):
    return [w.copy() for w in model.get_weights()]


def _changed(before, model):
    return any(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))


# ---------------------------------------------------------------------------------- classification on imbalanced data

IMBALANCED_DATA = """
import os
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from tensorflow import keras

tf.keras.utils.set_random_seed(0)

# The credit-card fraud table's shape: 29 standardised features, about one positive in ten here (the tutorial's is
# 0.17 %), positives shifted along a few features.
rng = np.random.default_rng(0)
n = 3000
labels = (rng.uniform(size=n) < 0.1).astype("int64").reshape(-1, 1)  # the tutorial's .reshape(-1, 1)
features = rng.standard_normal((n, 29)).astype("float32")
features[labels[:, 0] == 1, :5] += 1.5

train_features, val_features, test_features = features[:2000], features[2000:2500], features[2500:]
train_labels, val_labels, test_labels = labels[:2000], labels[2000:2500], labels[2500:]
bool_train_labels = train_labels[:, 0] != 0

neg, pos = np.bincount(labels[:, 0])
total = neg + pos

METRICS = [
    keras.metrics.BinaryCrossentropy(name="cross entropy"),  # same as model's loss
    keras.metrics.MeanSquaredError(name="Brier score"),
    keras.metrics.TruePositives(name="tp"),
    keras.metrics.FalsePositives(name="fp"),
    keras.metrics.TrueNegatives(name="tn"),
    keras.metrics.FalseNegatives(name="fn"),
    keras.metrics.BinaryAccuracy(name="accuracy"),
    keras.metrics.Precision(name="precision"),
    keras.metrics.Recall(name="recall"),
    keras.metrics.AUC(name="auc"),
    keras.metrics.AUC(name="prc", curve="PR"),  # precision-recall curve
]


def make_model(metrics=METRICS, output_bias=None):
    if output_bias is not None:
        output_bias = tf.keras.initializers.Constant(output_bias)
    model = keras.Sequential(
        [
            keras.layers.Dense(16, activation="relu", input_shape=(train_features.shape[-1],)),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(1, activation="sigmoid", bias_initializer=output_bias),
        ]
    )

    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-3), loss=keras.losses.BinaryCrossentropy(), metrics=metrics
    )

    return model


EPOCHS = 8
BATCH_SIZE = 64

early_stopping = tf.keras.callbacks.EarlyStopping(
    monitor="val_prc", verbose=1, patience=10, mode="max", restore_best_weights=True
)

initial_bias = np.log([pos / neg])
model = make_model(output_bias=initial_bias)
model.predict(train_features[:10])
results = model.evaluate(train_features, train_labels, batch_size=BATCH_SIZE, verbose=0)

initial_weights = os.path.join(tempfile.mkdtemp(), "initial.weights.h5")
model.save_weights(initial_weights)
"""

IMBALANCED_BASELINE = """
model = make_model()
model.load_weights(initial_weights)
baseline_history = model.fit(
    train_features,
    train_labels,
    batch_size=BATCH_SIZE,
    epochs=EPOCHS,
    callbacks=[early_stopping],
    validation_data=(val_features, val_labels),
)
"""

IMBALANCED_PLOTS = """
colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def plot_metrics(history):
    metrics = ["loss", "prc", "precision", "recall"]
    for n, metric in enumerate(metrics):
        name = metric.replace("_", " ").capitalize()
        plt.subplot(2, 2, n + 1)
        plt.plot(history.epoch, history.history[metric], color=colors[0], label="Train")
        plt.plot(history.epoch, history.history["val_" + metric], color=colors[0], linestyle="--", label="Val")
        plt.xlabel("Epoch")
        plt.ylabel(name)
        plt.legend()


plot_metrics(baseline_history)

train_predictions_baseline = model.predict(train_features, batch_size=BATCH_SIZE)
test_predictions_baseline = model.predict(test_features, batch_size=BATCH_SIZE)

baseline_results = model.evaluate(test_features, test_labels, batch_size=BATCH_SIZE, verbose=0)
named_baseline = dict(zip(model.metrics_names, baseline_results))
baseline_dict = model.evaluate(test_features, test_labels, batch_size=BATCH_SIZE, verbose=0, return_dict=True)
"""

IMBALANCED_WEIGHTS = """
weight_for_0 = (1 / neg) * (total / 2.0)
weight_for_1 = (1 / pos) * (total / 2.0)

class_weight = {0: weight_for_0, 1: weight_for_1}
"""

IMBALANCED_WEIGHTED = """
weighted_model = make_model()
weighted_model.load_weights(initial_weights)

weighted_history = weighted_model.fit(
    train_features,
    train_labels,
    batch_size=BATCH_SIZE,
    epochs=EPOCHS,
    callbacks=[early_stopping],
    validation_data=(val_features, val_labels),
    # The class weights go here
    class_weight=class_weight,
)
"""

IMBALANCED_WEIGHTED_AFTER = """
plot_metrics(weighted_history)
test_predictions_weighted = weighted_model.predict(test_features, batch_size=BATCH_SIZE)
weighted_dict = weighted_model.evaluate(test_features, test_labels, batch_size=BATCH_SIZE, verbose=0, return_dict=True)
"""

IMBALANCED_RESAMPLE = """
pos_features = train_features[bool_train_labels]
neg_features = train_features[~bool_train_labels]

pos_labels = train_labels[bool_train_labels]
neg_labels = train_labels[~bool_train_labels]

BUFFER_SIZE = 100000


def make_ds(features, labels):
    ds = tf.data.Dataset.from_tensor_slices((features, labels))  # .cache()
    ds = ds.shuffle(BUFFER_SIZE).repeat()
    return ds


pos_ds = make_ds(pos_features, pos_labels)
neg_ds = make_ds(neg_features, neg_labels)

resampled_ds = tf.data.Dataset.sample_from_datasets([pos_ds, neg_ds], weights=[0.5, 0.5])
resampled_ds = resampled_ds.batch(BATCH_SIZE).prefetch(2)

for features, label in resampled_ds.take(1):
    print(label.numpy().mean())

# Keras 3 takes no float here ("'numpy.float64' object cannot be interpreted as an integer"): int() it
resampled_steps_per_epoch = int(np.ceil(2.0 * neg / BATCH_SIZE))

val_ds = tf.data.Dataset.from_tensor_slices((val_features, val_labels)).cache()
val_ds = val_ds.batch(BATCH_SIZE).prefetch(2)
"""

IMBALANCED_RESAMPLED = """
resampled_model = make_model()
resampled_model.load_weights(initial_weights)

# Reset the bias to zero, since this dataset is balanced.
output_layer = resampled_model.layers[-1]
output_layer.bias.assign([0])

resampled_history = resampled_model.fit(
    resampled_ds,
    epochs=EPOCHS,
    steps_per_epoch=resampled_steps_per_epoch,
    callbacks=[early_stopping],
    validation_data=val_ds,
)
"""

IMBALANCED_RESAMPLED_AFTER = """
plot_metrics(resampled_history)
test_predictions_resampled = resampled_model.predict(test_features, batch_size=BATCH_SIZE)
resampled_dict = resampled_model.evaluate(
    test_features, test_labels, batch_size=BATCH_SIZE, verbose=0, return_dict=True
)
"""


def _imbalanced(shell, monkeypatch, folder, distribute):
    _in_folder(monkeypatch, folder)
    ns = _cell(shell, IMBALANCED_DATA)
    early_stopping = ns["early_stopping"]
    first = ns["model"]
    ns = _cell(shell, IMBALANCED_BASELINE, distribute=distribute)
    model = ns["model"]
    assert model is not first and ns["early_stopping"] is early_stopping
    assert int(model.optimizer.iterations.numpy()) > 0
    history = ns["baseline_history"]
    assert history is model.history
    assert len(history.epoch) == ns["EPOCHS"] == len(history.history["val_prc"])
    ns = _cell(shell, IMBALANCED_PLOTS)
    baseline = ns["baseline_dict"]
    assert set(ns["named_baseline"]) >= {"loss", "compile_metrics"} or set(ns["named_baseline"]) >= {"loss", "prc"}
    assert ns["test_predictions_baseline"].shape == (500, 1)
    _cell(shell, IMBALANCED_WEIGHTS)
    ns = _cell(shell, IMBALANCED_WEIGHTED, distribute=distribute)
    weighted_model = ns["weighted_model"]
    assert int(weighted_model.optimizer.iterations.numpy()) > 0 and ns["weighted_history"] is weighted_model.history
    ns = _cell(shell, IMBALANCED_WEIGHTED_AFTER)
    weighted = ns["weighted_dict"]
    ns = _cell(shell, IMBALANCED_RESAMPLE)
    resampled_ds = ns["resampled_ds"]
    ns = _cell(shell, IMBALANCED_RESAMPLED, distribute=distribute)
    resampled_model = ns["resampled_model"]
    assert ns["resampled_ds"] is resampled_ds
    resampled_history = ns["resampled_history"]
    assert resampled_history is resampled_model.history
    if not distribute:
        assert resampled_history.params["steps"] == ns["resampled_steps_per_epoch"]
    iterations = int(resampled_model.optimizer.iterations.numpy())
    ns = _cell(shell, IMBALANCED_RESAMPLED_AFTER)
    return {
        "baseline": baseline,
        "weighted": weighted,
        "resampled": ns["resampled_dict"],
        "history": {k: list(v) for k, v in history.history.items()},
        "resampled_history": {k: list(v) for k, v in resampled_history.history.items()},
        "iterations": iterations,
        "steps": int(ns["resampled_steps_per_epoch"]),
        "epochs": len(resampled_history.epoch),
    }


def test_imbalanced_data_baseline_class_weights_and_oversampling(shell, tmp_path, monkeypatch):
    """tensorflow.org's "Classification on imbalanced data": the three fits train the notebook's models from the
    saved initial weights, with the tutorial's eleven metrics (both AUCs among them) in the history, EarlyStopping
    on `val_prc`; `plot_metrics`, `predict` and `evaluate(return_dict=True)` work afterwards."""
    one = _imbalanced(shell, monkeypatch, tmp_path / "one", distribute=False)
    two = _imbalanced(shell, monkeypatch, tmp_path / "two", distribute=True)
    assert set(two["history"]) == set(one["history"]), (sorted(two["history"]), sorted(one["history"]))
    assert {"prc", "val_prc", "auc", "tp", "fn", "cross entropy", "Brier score"} <= set(one["history"])
    for run in (one, two):
        assert run["baseline"]["auc"] > 0.8 and run["weighted"]["auc"] > 0.8 and run["resampled"]["auc"] > 0.8, run
        # tp + fn is the number of positives in the validation split, every epoch, whole
        positives = [tp + fn for tp, fn in zip(run["history"]["val_tp"], run["history"]["val_fn"])]
        assert len(set(positives)) == 1, positives
        # and the four counts of an epoch's training add up to the 2000 training samples (summed over the ranks).
        # Not the first epoch: METRICS is make_model's default, the same metric objects in every model, and Keras
        # starts the first epoch from the counts the evaluate of the data cell left (4000 in one process).
        history = run["history"]
        seen = [sum(history[k][e] for k in ("tp", "fp", "tn", "fn")) for e in range(len(history["tp"]))]
        assert seen[1:] == [2000.0] * (len(seen) - 1), (seen, run is two)
    assert two["history"]["val_tp"][0] + two["history"]["val_fn"][0] == (
        one["history"]["val_tp"][0] + one["history"]["val_fn"][0]
    )
    # the oversampled fit: steps_per_epoch counts global batches, so two ranks take half the steps each
    assert one["iterations"] == one["steps"] * one["epochs"], one
    assert (
        two["iterations"] == (one["steps"] // 2 + one["steps"] % 2) * two["epochs"]
        or two["iterations"] == (one["steps"] // 2) * two["epochs"]
    ), two
    for key in ("baseline", "weighted", "resampled"):
        close(two[key]["prc"], one[key]["prc"], 1.5, f"{key} test prc")
        close(two[key]["loss"], one[key]["loss"], 1.5, f"{key} test loss")


# ---------------------------------------------------------------------------------------------- neural style transfer

STYLE_SETUP = """
import numpy as np
import PIL.Image
import tensorflow as tf

tf.keras.utils.set_random_seed(0)


def tensor_to_image(tensor):
    tensor = tensor * 255
    tensor = np.array(tensor, dtype=np.uint8)
    if np.ndim(tensor) > 3:
        assert tensor.shape[0] == 1
        tensor = tensor[0]
    return PIL.Image.fromarray(tensor)


# load_img's result: a [1, h, w, 3] float image in [0, 1] (here 32x32, generated)
rng = np.random.default_rng(0)
yy, xx = np.mgrid[0:32, 0:32] / 31.0
content_image = tf.constant(np.stack([xx, yy, 0.5 * np.ones_like(xx)], -1)[None].astype("float32"))
style_image = tf.constant(rng.uniform(size=(1, 32, 32, 3)).astype("float32"))

# VGG19's role, smaller and without downloaded weights: a fixed conv stack whose layers are named as the
# tutorial's.
content_layers = ["block5_conv2"]
style_layers = ["block1_conv1", "block2_conv1", "block3_conv1", "block4_conv1", "block5_conv1"]
num_content_layers = len(content_layers)
num_style_layers = len(style_layers)


def vgg_layers(layer_names):
    \"\"\"Creates a VGG model that returns a list of intermediate output values.\"\"\"
    inputs = tf.keras.Input(shape=(None, None, 3))
    x = inputs
    for block in range(1, 6):
        x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu", name=f"block{block}_conv1")(x)
        x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu", name=f"block{block}_conv2")(x)
    vgg = tf.keras.Model(inputs, x)
    vgg.trainable = False

    outputs = [vgg.get_layer(name).output for name in layer_names]

    model = tf.keras.Model([vgg.input], outputs)
    return model


def gram_matrix(input_tensor):
    result = tf.linalg.einsum("bijc,bijd->bcd", input_tensor, input_tensor)
    input_shape = tf.shape(input_tensor)
    num_locations = tf.cast(input_shape[1] * input_shape[2], tf.float32)
    return result / (num_locations)


class StyleContentModel(tf.keras.models.Model):
    def __init__(self, style_layers, content_layers):
        super(StyleContentModel, self).__init__()
        self.vgg = vgg_layers(style_layers + content_layers)
        self.style_layers = style_layers
        self.content_layers = content_layers
        self.num_style_layers = len(style_layers)
        self.vgg.trainable = False

    def call(self, inputs):
        "Expects float input in [0,1]"
        inputs = inputs * 255.0
        preprocessed_input = tf.keras.applications.vgg19.preprocess_input(inputs)
        outputs = self.vgg(preprocessed_input)
        style_outputs, content_outputs = (outputs[: self.num_style_layers], outputs[self.num_style_layers :])

        style_outputs = [gram_matrix(style_output) for style_output in style_outputs]

        content_dict = {content_name: value for content_name, value in zip(self.content_layers, content_outputs)}

        style_dict = {style_name: value for style_name, value in zip(self.style_layers, style_outputs)}

        return {"content": content_dict, "style": style_dict}


extractor = StyleContentModel(style_layers, content_layers)

results = extractor(tf.constant(content_image))

style_targets = extractor(style_image)["style"]
content_targets = extractor(content_image)["content"]

image = tf.Variable(content_image)


def clip_0_1(image):
    return tf.clip_by_value(image, clip_value_min=0.0, clip_value_max=1.0)


opt = tf.keras.optimizers.Adam(learning_rate=0.02, beta_1=0.99, epsilon=1e-1)

style_weight = 1e-2
content_weight = 1e4


def style_content_loss(outputs):
    style_outputs = outputs["style"]
    content_outputs = outputs["content"]
    style_loss = tf.add_n(
        [tf.reduce_mean((style_outputs[name] - style_targets[name]) ** 2) for name in style_outputs.keys()]
    )
    style_loss *= style_weight / num_style_layers

    content_loss = tf.add_n(
        [tf.reduce_mean((content_outputs[name] - content_targets[name]) ** 2) for name in content_outputs.keys()]
    )
    content_loss *= content_weight / num_content_layers
    loss = style_loss + content_loss
    return loss


@tf.function()
def train_step(image):
    with tf.GradientTape() as tape:
        outputs = extractor(image)
        loss = style_content_loss(outputs)

    grad = tape.gradient(loss, image)
    opt.apply_gradients([(grad, image)])
    image.assign(clip_0_1(image))


first_loss = float(style_content_loss(extractor(image)))
"""

STYLE_TRAIN = """
import time

start = time.time()

epochs = 2
steps_per_epoch = 10

step = 0
for n in range(epochs):
    for m in range(steps_per_epoch):
        step += 1
        train_step(image)
        print(".", end="", flush=True)
    print("Train step: {}".format(step))

end = time.time()
print("Total time: {:.1f}".format(end - start))
"""

STYLE_AFTER = """
styled = tensor_to_image(image)
styled.save("stylized-image.png")
final_loss = float(style_content_loss(extractor(image)))
"""

STYLE_TV = """
total_variation_weight = 30


@tf.function()
def train_step(image):
    with tf.GradientTape() as tape:
        outputs = extractor(image)
        loss = style_content_loss(outputs)
        loss += total_variation_weight * tf.image.total_variation(image)

    grad = tape.gradient(loss, image)
    opt.apply_gradients([(grad, image)])
    image.assign(clip_0_1(image))


opt = tf.keras.optimizers.Adam(learning_rate=0.02, beta_1=0.99, epsilon=1e-1)
image = tf.Variable(content_image)
"""


def _style(shell, monkeypatch, folder, distribute):
    _in_folder(monkeypatch, folder)
    ns = _cell(shell, STYLE_SETUP)
    image, opt, extractor = ns["image"], ns["opt"], ns["extractor"]
    content = ns["content_image"].numpy()
    ns, shown = _cell_shown(shell, STYLE_TRAIN, distribute)
    assert ns["image"] is image and ns["extractor"] is extractor
    assert ns["opt"] is opt, shown
    assert int(opt.iterations.numpy()) == 20 and ns["step"] == 20
    stylised = image.numpy()
    assert not np.allclose(stylised, content) and stylised.min() >= 0.0 and stylised.max() <= 1.0
    ns = _cell(shell, STYLE_AFTER)
    assert ns["styled"].size == (32, 32) and os.path.exists("stylized-image.png")
    assert np.allclose(np.asarray(ns["styled"]), (stylised[0] * 255).astype("uint8"))
    first, final = ns["first_loss"], ns["final_loss"]
    ns = _cell(shell, STYLE_TV)
    tv_image, tv_opt = ns["image"], ns["opt"]
    ns = _cell(shell, STYLE_TRAIN, distribute=distribute)
    assert ns["image"] is tv_image and ns["opt"] is tv_opt and int(tv_opt.iterations.numpy()) == 20
    tv = float(ns["tf"].image.total_variation(tv_image).numpy()[0])
    return {"image": stylised, "first": first, "final": final, "tv_image": tv_image.numpy(), "tv": tv}


def test_neural_style_transfer_stylises_the_notebook_s_image_variable(shell, tmp_path, monkeypatch):
    """tensorflow.org's "Neural style transfer": the loop over the `@tf.function` `train_step(image)` updates the
    notebook's `tf.Variable` image through the notebook's Adam (and clips it), as one process does; the total
    variation variant too. The loop reads the same image on every rank, so two ranks give one process's image."""
    one = _style(shell, monkeypatch, tmp_path / "one", distribute=False)
    two = _style(shell, monkeypatch, tmp_path / "two", distribute=True)
    for run in (one, two):
        assert run["final"] < run["first"] * 0.9, run
    assert np.allclose(two["image"], one["image"], atol=1e-3), np.abs(two["image"] - one["image"]).max()
    assert np.allclose(two["tv_image"], one["tv_image"], atol=1e-3)
    close(two["tv"], one["tv"], 1.05, "total variation of the stylised image")


# ----------------------------------------------------------------------------------------------------- load CSV data

CSV_FILES = """
import numpy as np
import pandas as pd

# titanic's train.csv columns, generated: survival mostly by sex and class, a little by age and fare.
rng = np.random.default_rng(0)
n = 400
sex = rng.choice(["male", "female"], n)
klass = rng.choice(["First", "Second", "Third"], n)
age = rng.uniform(1, 70, n).round(1)
fare = rng.uniform(5, 100, n).round(2)
score = (sex == "female") * 2.0 + (klass == "First") * 1.0 - (klass == "Third") * 1.0 - 0.5 + rng.normal(0, 0.5, n)
pd.DataFrame(
    {
        "survived": (score > 0).astype("int64"),
        "sex": sex,
        "age": age,
        "n_siblings_spouses": rng.integers(0, 4, n),
        "parch": rng.integers(0, 3, n),
        "fare": fare,
        "class": klass,
        "deck": rng.choice(["unknown", "A", "B", "C"], n),
        "embark_town": rng.choice(["Southampton", "Cherbourg", "Queenstown"], n),
        "alone": rng.choice(["y", "n"], n),
    }
).to_csv("train.csv", index=False)
titanic_file_path = "train.csv"
"""

CSV_PREPROCESSING = """
import numpy as np
import pandas as pd
import tensorflow as tf
from tensorflow.keras import layers

tf.keras.utils.set_random_seed(0)

titanic = pd.read_csv(titanic_file_path)
titanic_features = titanic.copy()
titanic_labels = titanic_features.pop("survived")

inputs = {}

for name, column in titanic_features.items():
    dtype = column.dtype
    if dtype == object or pd.api.types.is_string_dtype(dtype):  # pandas 3 reads strings as `str`, not object
        dtype = tf.string
    else:
        dtype = tf.float32

    inputs[name] = tf.keras.Input(shape=(1,), name=name, dtype=dtype)

numeric_inputs = {name: input for name, input in inputs.items() if input.dtype == tf.float32}

x = layers.Concatenate()(list(numeric_inputs.values()))
norm = layers.Normalization()
norm.adapt(np.array(titanic[numeric_inputs.keys()]))
all_numeric_inputs = norm(x)

preprocessed_inputs = [all_numeric_inputs]

for name, input in inputs.items():
    if input.dtype == tf.float32:
        continue

    lookup = layers.StringLookup(vocabulary=np.unique(titanic_features[name]))
    one_hot = layers.CategoryEncoding(num_tokens=lookup.vocabulary_size())

    x = lookup(input)
    x = one_hot(x)
    preprocessed_inputs.append(x)

preprocessed_inputs_cat = layers.Concatenate()(preprocessed_inputs)

titanic_preprocessing = tf.keras.Model(inputs, preprocessed_inputs_cat)

titanic_features_dict = {name: np.array(value) for name, value in titanic_features.items()}

features_dict = {name: values[:1] for name, values in titanic_features_dict.items()}
preprocessed_one = titanic_preprocessing(features_dict)


def titanic_model(preprocessing_head, inputs):
    body = tf.keras.Sequential([layers.Dense(64, activation="relu"), layers.Dense(1)])

    preprocessed_inputs = preprocessing_head(inputs)
    result = body(preprocessed_inputs)
    model = tf.keras.Model(inputs, result)

    model.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=True), optimizer=tf.keras.optimizers.Adam())
    return model


titanic_model = titanic_model(titanic_preprocessing, inputs)
"""

CSV_FIT = """
titanic_model.fit(x=titanic_features_dict, y=titanic_labels, epochs=10)
"""

CSV_AFTER = """
titanic_model.save("test.keras")
reloaded = tf.keras.models.load_model("test.keras")

features_dict = {name: values[:1] for name, values in titanic_features_dict.items()}

before = titanic_model(features_dict)
after = reloaded(features_dict)
assert (abs(before - after) < 1e-3).numpy().all()
loss = titanic_model.evaluate(titanic_features_dict, titanic_labels, verbose=0)
"""

CSV_DATASETS = """
titanic_csv_ds = tf.data.experimental.make_csv_dataset(
    titanic_file_path, batch_size=32, label_name="survived", num_epochs=1, ignore_errors=True, shuffle=False
)

# make_csv_dataset's batches are dicts of (batch,) columns; the model's inputs are (batch, 1)
def add_feature_axis(features, label):
    return {name: tf.expand_dims(value, -1) for name, value in features.items()}, label


titanic_batches = titanic_csv_ds.map(add_feature_axis)

column_names = list(titanic.columns)
record_defaults = [0, "", 0.0, 0, 0, 0.0, "", "", "", ""]
simple_titanic = tf.data.experimental.CsvDataset(titanic_file_path, record_defaults=record_defaults, header=True)


def to_example(*row):
    features = {name: tf.reshape(value, [1]) for name, value in zip(column_names, row)}
    label = features.pop("survived")
    features = {
        name: tf.cast(value, tf.float32) if value.dtype != tf.string else value for name, value in features.items()
    }
    return features, label


simple_batches = simple_titanic.map(to_example).batch(32)
"""

CSV_DATASET_FIT = """
csv_history = titanic_model.fit(titanic_batches, epochs=3)
simple_history = titanic_model.fit(simple_batches, epochs=3)
"""


def _csv(shell, monkeypatch, folder, distribute):
    _in_folder(monkeypatch, folder)
    _cell(shell, CSV_FILES)
    ns = _cell(shell, CSV_PREPROCESSING)
    model, head, norm = ns["titanic_model"], ns["titanic_preprocessing"], ns["norm"]
    optimizer = model.optimizer
    mean = np.array(norm.mean)
    before = _weights(model)
    ns = _cell(shell, CSV_FIT, distribute=distribute)
    assert ns["titanic_model"] is model and model.optimizer is optimizer and ns["titanic_preprocessing"] is head
    assert model.layers[-2] is head or head in model.layers
    assert np.allclose(np.array(norm.mean), mean) and _changed(before, model)
    assert len(model.history.epoch) == 10
    fit_iterations = int(optimizer.iterations.numpy())
    ns = _cell(shell, CSV_AFTER)
    loss = ns["loss"]
    ns = _cell(shell, CSV_DATASETS)
    ns = _cell(shell, CSV_DATASET_FIT, distribute=distribute)
    assert ns["titanic_model"] is model and model.optimizer is optimizer
    csv_history, simple_history = ns["csv_history"], ns["simple_history"]
    assert len(csv_history.history["loss"]) == 3 and len(simple_history.history["loss"]) == 3
    return {
        "loss": loss,
        "fit_iterations": fit_iterations,
        "iterations": int(optimizer.iterations.numpy()),
        "csv_loss": csv_history.history["loss"][-1],
        "simple_loss": simple_history.history["loss"][-1],
        "final": float(model.evaluate(ns["titanic_features_dict"], ns["titanic_labels"], verbose=0)),
    }


def test_load_csv_titanic_preprocessing_head_fits_saves_and_reads_csv_datasets(shell, tmp_path, monkeypatch):
    """tensorflow.org's "Load CSV data": the titanic model over its preprocessing head (a dict of Inputs,
    Normalization adapted on the numbers, StringLookup + CategoryEncoding on the strings) trains in the notebook,
    saves to `.keras` and loads back with the same prediction for one row; then fits `make_csv_dataset` and
    `CsvDataset` pipelines over the CSV file."""
    one = _csv(shell, monkeypatch, tmp_path / "one", distribute=False)
    two = _csv(shell, monkeypatch, tmp_path / "two", distribute=True)
    assert one["fit_iterations"] == 10 * 13 and two["fit_iterations"] == 10 * 7, (one, two)  # 400 rows, batches of 32
    for run in (one, two):
        assert run["final"] < 0.5, run
    close(two["loss"], one["loss"], 1.5, "loss after the dict fit")
    close(two["final"], one["final"], 1.5, "loss after the dataset fits")


# ------------------------------------------------------------------------------------ distributed training with Keras

KERAS_STRATEGY = """
import glob
import os

import numpy as np
import tensorflow as tf

tf.keras.utils.set_random_seed(0)

# MNIST's shapes, generated: each digit a bright bar at its own row, in noise.
rng = np.random.default_rng(0)


def digits(count):
    labels = rng.integers(0, 10, count)
    images = rng.integers(0, 60, (count, 28, 28, 1))
    for i, label in enumerate(labels):
        images[i, 2 + 2 * label : 4 + 2 * label, 4:24] = 255
    return tf.data.Dataset.from_tensor_slices((images.astype("uint8"), labels.astype("int64")))


mnist_train, mnist_test = digits(512), digits(128)

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))

BUFFER_SIZE = 10000

BATCH_SIZE_PER_REPLICA = 64
BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync


def scale(image, label):
    image = tf.cast(image, tf.float32)
    image /= 255

    return image, label


train_dataset = mnist_train.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)
eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )

    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.Adam(),
        metrics=["accuracy"],
    )

# Define the checkpoint directory to store the checkpoints.
checkpoint_dir = "./training_checkpoints"
# Define the name of the checkpoint files (Keras 3 saves weights to .weights.h5 files).
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5")


# Define a function for decaying the learning rate.
def decay(epoch):
    if epoch < 3:
        return 1e-3
    elif epoch >= 3 and epoch < 7:
        return 1e-4
    else:
        return 1e-5


# Define a callback for printing the learning rate at the end of each epoch.
class PrintLR(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print("\\nLearning rate for epoch {} is {}".format(epoch + 1, self.model.optimizer.learning_rate.numpy()))


# Put all the callbacks together.
callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir="./logs"),
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
    tf.keras.callbacks.LearningRateScheduler(decay),
    PrintLR(),
]

EPOCHS = 8
"""

KERAS_STRATEGY_FIT = """
model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks)
"""

KERAS_STRATEGY_AFTER = """
latest = sorted(glob.glob(os.path.join(checkpoint_dir, "ckpt_*.weights.h5")), key=os.path.getmtime)[-1]
model.load_weights(latest)

eval_loss, eval_acc = model.evaluate(eval_dataset)

print("Eval loss: {}, Eval accuracy: {}".format(eval_loss, eval_acc))
"""


def _keras_strategy(shell, monkeypatch, folder, distribute):
    _in_folder(monkeypatch, folder)
    ns = _cell(shell, KERAS_STRATEGY)
    model, optimizer = ns["model"], ns["model"].optimizer
    before = _weights(model)
    ns, shown = _cell_shown(shell, KERAS_STRATEGY_FIT, distribute)
    assert ns["model"] is model and model.optimizer is optimizer, distribute
    assert _changed(before, model), distribute
    assert int(optimizer.iterations.numpy()) == 8 * (8 if not distribute else 4), shown.stdout[-3000:]
    assert float(optimizer.learning_rate.numpy()) == pytest.approx(1e-5)
    printed = [line for line in shown.splitlines() if line.startswith("Learning rate for epoch")]
    files = sorted(os.listdir("training_checkpoints"))
    ns = _cell(shell, KERAS_STRATEGY_AFTER)
    return {"printed": printed, "files": files, "eval_acc": ns["eval_acc"], "eval_loss": ns["eval_loss"]}


def test_distributed_training_with_keras_strategy_made_in_an_earlier_cell(shell, tmp_path, monkeypatch):
    """tensorflow.org's "Distributed training with Keras": the model built and compiled under a
    `MirroredStrategy().scope()` in a plain cell trains on two ranks from the `%%distribute` fit cell with the
    tutorial's callbacks (TensorBoard, weights checkpoints per epoch, LearningRateScheduler, `PrintLR`, which prints
    the single-rank rate); the last checkpoint loads and evaluates afterwards."""
    one = _keras_strategy(shell, monkeypatch, tmp_path / "one", distribute=False)
    two = _keras_strategy(shell, monkeypatch, tmp_path / "two", distribute=True)
    assert one["files"] == two["files"] == [f"ckpt_{e}.weights.h5" for e in sorted(range(1, 9), key=str)], two
    assert two["printed"] == one["printed"] and len(one["printed"]) == 8, (two["printed"], one["printed"])
    for run in (one, two):
        assert run["eval_acc"] > 0.8, run
    close(two["eval_loss"], one["eval_loss"], 2.0, "eval loss")


# ------------------------------------------------------------------------------------------- image classification

FLOWER_FILES = """
import pathlib

import numpy as np
import PIL.Image

# flower_photos' layout: one folder of JPEG/PNG images per class. Each "flower" here is a disc of its class's
# colour on a noisy ground, placed at random.
rng = np.random.default_rng(0)
data_dir = pathlib.Path("flower_photos")
colours = {"daisy": (240, 240, 240), "dandelion": (250, 220, 0), "roses": (220, 20, 40)}
yy, xx = np.mgrid[0:40, 0:40]
for name, colour in colours.items():
    (data_dir / name).mkdir(parents=True, exist_ok=True)
    for i in range(40):
        image = rng.integers(0, 120, (40, 40, 3)).astype("uint8")
        cy, cx = rng.integers(12, 28, 2)
        image[(yy - cy) ** 2 + (xx - cx) ** 2 < 64] = colour
        PIL.Image.fromarray(image).save(data_dir / name / f"{i}.png")
"""

FLOWER_DATA = """
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import PIL
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers
from tensorflow.keras.models import Sequential

tf.keras.utils.set_random_seed(0)

image_count = len(list(data_dir.glob("*/*.png")))

batch_size = 16
img_height = 32
img_width = 32

train_ds = tf.keras.utils.image_dataset_from_directory(
    data_dir, validation_split=0.2, subset="training", seed=123, image_size=(img_height, img_width),
    batch_size=batch_size
)
val_ds = tf.keras.utils.image_dataset_from_directory(
    data_dir,
    validation_split=0.2,
    subset="validation",
    seed=123,
    image_size=(img_height, img_width),
    batch_size=batch_size,
)

class_names = train_ds.class_names

AUTOTUNE = tf.data.AUTOTUNE

train_ds = train_ds.cache().shuffle(1000).prefetch(buffer_size=AUTOTUNE)
val_ds = val_ds.cache().prefetch(buffer_size=AUTOTUNE)

num_classes = len(class_names)

data_augmentation = keras.Sequential(
    [
        layers.RandomFlip("horizontal", input_shape=(img_height, img_width, 3)),
        layers.RandomRotation(0.1),
        layers.RandomZoom(0.1),
    ]
)

model = Sequential(
    [
        data_augmentation,
        layers.Rescaling(1.0 / 255),
        layers.Conv2D(8, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Dropout(0.2),
        layers.Flatten(),
        layers.Dense(32, activation="relu"),
        layers.Dense(num_classes, name="outputs"),
    ]
)

model.compile(
    optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"]
)
"""

FLOWER_FIT = """
epochs = 15
history = model.fit(train_ds, validation_data=val_ds, epochs=epochs)
"""

FLOWER_AFTER = """
acc = history.history["accuracy"]
val_acc = history.history["val_accuracy"]

loss = history.history["loss"]
val_loss = history.history["val_loss"]

epochs_range = range(epochs)

plt.figure(figsize=(8, 8))
plt.subplot(1, 2, 1)
plt.plot(epochs_range, acc, label="Training Accuracy")
plt.plot(epochs_range, val_acc, label="Validation Accuracy")
plt.legend(loc="lower right")
plt.title("Training and Validation Accuracy")

plt.subplot(1, 2, 2)
plt.plot(epochs_range, loss, label="Training Loss")
plt.plot(epochs_range, val_loss, label="Validation Loss")
plt.legend(loc="upper right")
plt.title("Training and Validation Loss")

sunflower_path = str(data_dir / "roses" / "0.png")

img = tf.keras.utils.load_img(sunflower_path, target_size=(img_height, img_width))
img_array = tf.keras.utils.img_to_array(img)
img_array = tf.expand_dims(img_array, 0)  # Create a batch

predictions = model.predict(img_array)
score = tf.nn.softmax(predictions[0])

print(
    "This image most likely belongs to {} with a {:.2f} percent confidence.".format(
        class_names[np.argmax(score)], 100 * np.max(score)
    )
)
said = class_names[np.argmax(score)]
evaluated = model.evaluate(val_ds, return_dict=True)
"""

FLOWER_TFLITE = """
# Convert the model.
converter = tf.lite.TFLiteConverter.from_keras_model(model)
tflite_model = converter.convert()

# Save the model.
with open("model.tflite", "wb") as f:
    f.write(tflite_model)

TF_MODEL_FILE_PATH = "model.tflite"  # The default path to the saved TensorFlow Lite model

interpreter = tf.lite.Interpreter(model_path=TF_MODEL_FILE_PATH)
classify_lite = interpreter.get_signature_runner("serving_default")
predictions_lite = classify_lite(**{interpreter.get_signature_list()["serving_default"]["inputs"][0]: img_array})[
    "output_0"
]
score_lite = tf.nn.softmax(predictions_lite)
"""


def _flowers(shell, monkeypatch, folder, distribute, tflite):
    _in_folder(monkeypatch, folder)
    _cell(shell, FLOWER_FILES)
    ns = _cell(shell, FLOWER_DATA)
    model, augmentation, optimizer = ns["model"], ns["data_augmentation"], ns["model"].optimizer
    train_ds = ns["train_ds"]
    before = _weights(model)
    ns = _cell(shell, FLOWER_FIT, distribute=distribute)
    assert ns["model"] is model and model.optimizer is optimizer and ns["data_augmentation"] is augmentation
    assert model.layers[0] is augmentation and ns["train_ds"] is train_ds and ns["history"] is model.history
    assert _changed(before, model) and len(model.history.epoch) == 15
    iterations = int(optimizer.iterations.numpy())
    ns = _cell(shell, FLOWER_AFTER)
    result = {"evaluated": ns["evaluated"], "said": ns["said"], "iterations": iterations, "val_loss": ns["val_loss"]}
    if tflite:
        ns = _cell(shell, FLOWER_TFLITE)
        assert np.allclose(ns["predictions_lite"], ns["predictions"], atol=1e-4)
    return result


def test_image_classification_flowers_with_augmentation_layers_then_predicts_one_image(shell, tmp_path, monkeypatch):
    """tensorflow.org's "Image classification": PNGs through `image_dataset_from_directory` (class_names,
    `.cache().shuffle().prefetch()`), the `data_augmentation` Sequential of RandomFlip/RandomRotation/RandomZoom as
    the model's first layer, Rescaling, Dropout, logits; afterwards the history plots, one image's
    `tf.nn.softmax(predictions[0])`, and the model converted to TFLite gives the same predictions."""
    try:
        import tensorflow as tf

        tf.lite.TFLiteConverter  # noqa: B018
        tflite = True
    except AttributeError:
        tflite = False
    one = _flowers(shell, monkeypatch, tmp_path / "one", distribute=False, tflite=tflite)
    two = _flowers(shell, monkeypatch, tmp_path / "two", distribute=True, tflite=tflite)
    # 96 training images in batches of 16: 6 steps an epoch, 3 a rank on two ranks
    assert one["iterations"] == 15 * 6 and two["iterations"] == 15 * 3, (one["iterations"], two["iterations"])
    for run in (one, two):
        assert run["evaluated"]["accuracy"] > 0.8 and run["said"] == "roses", run
    close(two["evaluated"]["loss"], one["evaluated"]["loss"], 2.5, "validation loss")
