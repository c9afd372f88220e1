"""Tutorials, sweep 9c: keras.io's guides and examples as keras.io writes them (Keras 3 versions), set up in plain
cells, `%%distribute -n 2` on the training cell, the tutorial's later cells in plain cells after it.

"Making new layers and models via subclassing" (`Linear`, `ComputeSum` with its non-trainable weight, `MLPBlock`,
`ActivityRegularizationLayer` calling `self.add_loss`, then the end-to-end `VariationalAutoEncoder(keras.Model)` of
`Sampling` / `Encoder` / `Decoder` layers adding its KL loss in `call`, trained with `compile(optimizer, loss=...)`
and `fit`, whose encoder and decoder are used afterwards), "Save, serialize, and export models" (registered
`CustomLayer` and `custom_fn`, `model = train_model(model)`, `model.save` on the ranks, then `load_model` with the
registry, `custom_objects=` and `custom_object_scope`), "Classification with Gated Residual and Variable Selection
Networks" (`make_csv_dataset` pipelines mapped through StringLookups, sample weights, EarlyStopping) and "Deep
Deterministic Policy Gradient" (a custom loop whose `Buffer` class applies two notebook optimizers in a `tf.function`
method). Each runs in one process and on two ranks; the later plain cells must work after both, with comparable
results. Data is synthetic, in the tutorials' shapes, the models smaller.
"""

import os

import numpy as np
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


# ------------------------------------------------------------------------------- keras.io subclassing guide: layers

LAYERS = """
import numpy as np
import keras
from keras import ops
from keras import layers

keras.utils.set_random_seed(0)


class Linear(keras.layers.Layer):
    def __init__(self, units=32):
        super().__init__()
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(
            shape=(input_shape[-1], self.units),
            initializer="random_normal",
            trainable=True,
        )
        self.b = self.add_weight(shape=(self.units,), initializer="random_normal", trainable=True)

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b


class ComputeSum(keras.layers.Layer):
    def __init__(self, input_dim):
        super().__init__()
        self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

    def call(self, inputs):
        self.total.assign_add(ops.sum(inputs, axis=0))
        return self.total


class MLPBlock(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.linear_1 = Linear(32)
        self.linear_2 = Linear(32)
        self.linear_3 = Linear(1)

    def call(self, inputs):
        x = self.linear_1(inputs)
        x = keras.activations.relu(x)
        x = self.linear_2(x)
        x = keras.activations.relu(x)
        return self.linear_3(x)


# A layer that creates an activity regularization loss
class ActivityRegularizationLayer(keras.layers.Layer):
    def __init__(self, rate=1e-2):
        super().__init__()
        self.rate = rate

    def call(self, inputs):
        self.add_loss(self.rate * ops.mean(inputs))
        return inputs


x = ops.ones((2, 2))
my_sum = ComputeSum(2)

mlp = MLPBlock()
y = mlp(ops.ones(shape=(3, 64)))  # The first call to the `mlp` will create the weights
print("weights:", len(mlp.weights))
print("trainable weights:", len(mlp.trainable_weights))

inputs = keras.Input(shape=(3,))
outputs = ActivityRegularizationLayer()(inputs)
model = keras.Model(inputs, outputs)

# The guide's MLPBlock trained with fit: the block under an activity regularizer, on a regression target.
mlp_model = keras.Sequential([keras.Input((64,)), mlp, ActivityRegularizationLayer()])
rng = np.random.default_rng(0)
mlp_x = rng.normal(size=(256, 64)).astype("float32")
mlp_y = (mlp_x[:, :8].sum(axis=1, keepdims=True) > 0).astype("float32")
add_loss_x, add_loss_y = np.random.random((2, 3)), np.random.random((2, 3))
"""

LAYERS_FIT = """
y = my_sum(x)
print(y.numpy())
y = my_sum(x)
print(y.numpy())

# If there is a loss passed in `compile`, the regularization
# losses get added to it
model.compile(optimizer="adam", loss="mse")
model.fit(add_loss_x, add_loss_y)

# It's also possible not to pass any loss in `compile`,
# since the model already has a loss to minimize, via the `add_loss`
# call during the forward pass!
model.compile(optimizer="adam")
model.fit(add_loss_x, add_loss_y)

mlp_model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
mlp_history = mlp_model.fit(mlp_x, mlp_y, batch_size=32, epochs=4, verbose=0)
"""

LAYERS_AFTER = """
total = my_sum.total.numpy()
mlp_loss = mlp_model.evaluate(mlp_x, mlp_y, verbose=0)
block_out = mlp(ops.ones(shape=(3, 64)))
regularized = model(ops.ones((2, 3)))
"""


def test_subclassing_guide_layers_add_loss_and_non_trainable_weight(shell):
    """The guide's layers: `my_sum` (ComputeSum) called twice in the training cell holds [4, 4] afterwards, the
    weightless add_loss model compiles and fits twice, and the notebook's `mlp` block comes back trained inside the
    notebook's `mlp_model`."""
    _cell(shell, LAYERS)
    _cell(shell, LAYERS_FIT)
    one = _cell(shell, LAYERS_AFTER)
    assert one["total"].tolist() == [4.0, 4.0]
    one_loss = one["mlp_loss"]
    ns = _cell(shell, LAYERS)
    my_sum, mlp, mlp_model, model = ns["my_sum"], ns["mlp"], ns["mlp_model"], ns["model"]
    before = [w.numpy().copy() for w in mlp.trainable_weights]
    ns = _cell(shell, LAYERS_FIT, distribute=True)
    assert ns["my_sum"] is my_sum and ns["mlp"] is mlp and ns["mlp_model"] is mlp_model and ns["model"] is model
    assert mlp_model.layers[0] is mlp
    assert all(not np.allclose(b, w.numpy()) for b, w in zip(before, mlp.trainable_weights))
    ns = _cell(shell, LAYERS_AFTER)
    assert ns["total"].tolist() == [4.0, 4.0]
    assert model.loss is None and mlp_model.optimizer.iterations.numpy() == 4 * 4  # 128 samples a rank, batches of 32
    close(ns["mlp_loss"], one_loss, 1.5, "the MLP block's loss evaluated afterwards")


# ---------------------------------------------------------------------------------- keras.io subclassing guide: VAE

VAE = """
import numpy as np
import keras
from keras import ops
from keras import layers

keras.utils.set_random_seed(0)


class Sampling(layers.Layer):
    \"\"\"Uses (z_mean, z_log_var) to sample z, the vector encoding a digit.\"\"\"

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim))
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class Encoder(layers.Layer):
    \"\"\"Maps MNIST digits to a triplet (z_mean, z_log_var, z).\"\"\"

    def __init__(self, latent_dim=32, intermediate_dim=64, name="encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_mean = layers.Dense(latent_dim)
        self.dense_log_var = layers.Dense(latent_dim)
        self.sampling = Sampling()

    def call(self, inputs):
        x = self.dense_proj(inputs)
        z_mean = self.dense_mean(x)
        z_log_var = self.dense_log_var(x)
        z = self.sampling((z_mean, z_log_var))
        return z_mean, z_log_var, z


class Decoder(layers.Layer):
    \"\"\"Converts z, the encoded digit vector, back into a readable digit.\"\"\"

    def __init__(self, original_dim, intermediate_dim=64, name="decoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_output = layers.Dense(original_dim, activation="sigmoid")

    def call(self, inputs):
        x = self.dense_proj(inputs)
        return self.dense_output(x)


class VariationalAutoEncoder(keras.Model):
    \"\"\"Combines the encoder and decoder into an end-to-end model for training.\"\"\"

    def __init__(self, original_dim, intermediate_dim=64, latent_dim=32, name="autoencoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.original_dim = original_dim
        self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
        self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

    def call(self, inputs):
        z_mean, z_log_var, z = self.encoder(inputs)
        reconstructed = self.decoder(z)
        # Add KL divergence regularization loss.
        kl_loss = -0.5 * ops.mean(z_log_var - ops.square(z_mean) - ops.exp(z_log_var) + 1)
        self.add_loss(kl_loss)
        return reconstructed


# MNIST's shapes: 28x28 digits flattened to 784 values in [0, 1] (here bright strokes on a dark ground).
rng = np.random.default_rng(0)
x_train = np.zeros((1024, 28, 28), "uint8")
for i, (row, col) in enumerate(rng.integers(4, 20, (1024, 2))):
    x_train[i, row : row + 6, col : col + (2 if i % 2 else 6)] = 255
x_train = x_train.reshape(1024, 784).astype("float32") / 255

original_dim = 784
vae = VariationalAutoEncoder(784, 64, 32)

optimizer = keras.optimizers.Adam(learning_rate=1e-3)
"""

VAE_FIT = """
vae.compile(optimizer, loss=keras.losses.MeanSquaredError())

vae.fit(x_train, x_train, epochs=2, batch_size=64)
"""

VAE_AFTER = """
z_mean, z_log_var, z = vae.encoder(x_train[:64])
reconstructed = vae.decoder(z_mean)
reconstruction_error = float(ops.mean(ops.square(reconstructed - x_train[:64])))
generated = vae.decoder(keras.random.normal((4, 32)))
loss = vae.evaluate(x_train, x_train, verbose=0)
"""


def test_subclassing_guide_vae_with_kl_add_loss_then_encoder_and_decoder(shell):
    """The guide's end-to-end VAE: the notebook's `vae` (never called before its fit) and its optimizer come back
    trained, `vae.encoder` / `vae.decoder` still the notebook's layers, and they encode and decode afterwards."""
    _cell(shell, VAE)
    _cell(shell, VAE_FIT)
    one = _cell(shell, VAE_AFTER)
    one = {"fit": one["vae"].history.history["loss"][-1], "error": one["reconstruction_error"], "loss": one["loss"]}
    ns = _cell(shell, VAE)
    vae, optimizer, encoder, decoder = ns["vae"], ns["optimizer"], ns["vae"].encoder, ns["vae"].decoder
    ns = _cell(shell, VAE_FIT, distribute=True)
    assert ns["vae"] is vae and vae.optimizer is optimizer
    assert vae.encoder is encoder and vae.decoder is decoder
    assert optimizer.iterations.numpy() == 2 * 8  # 512 images a rank in batches of 64
    ns = _cell(shell, VAE_AFTER)
    assert ns["generated"].shape == (4, 784)
    close(vae.history.history["loss"][-1], one["fit"], 1.3, "training loss")
    close(ns["reconstruction_error"], one["error"], 1.3, "reconstruction error afterwards")
    close(ns["loss"], one["loss"], 1.3, "loss evaluated afterwards")


# ------------------------------------------------------------------- keras.io "Save, serialize, and export models"

SAVING = """
import numpy as np
import keras
from keras import ops

keras.utils.set_random_seed(0)

# Clear all previously registered custom objects
keras.saving.get_custom_objects().clear()


# Upon registration, you can optionally specify a package or a name.
# If left blank, the package defaults to `Custom` and the name defaults to
# the class name.
@keras.saving.register_keras_serializable(package="MyLayers")
class CustomLayer(keras.layers.Layer):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {"factor": self.factor}


@keras.saving.register_keras_serializable(package="my_package", name="custom_fn")
def custom_fn(x):
    return x**2


# Create the model.
def get_model():
    inputs = keras.Input(shape=(4,))
    mid = CustomLayer(0.5)(inputs)
    outputs = keras.layers.Dense(1, activation=custom_fn)(mid)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="rmsprop", loss="mean_squared_error")
    return model


# Train the model.
def train_model(model):
    input = np.random.random((4, 4))
    target = np.random.random((4, 1))
    model.fit(input, target)
    return model


test_input = np.random.random((4, 4))
test_target = np.random.random((4, 1))
"""

SAVING_FIT = """
model = get_model()
model = train_model(model)
model.save("custom_model.keras")
"""

SAVING_LOAD = """
# Now, we can simply load without worrying about our custom objects.
reconstructed_model = keras.models.load_model("custom_model.keras")

# Let's check:
np.testing.assert_allclose(model.predict(test_input), reconstructed_model.predict(test_input))
"""

SAVING_MODEL = """
model = get_model()
"""

SAVING_FIT_AGAIN = """
model = train_model(model)

# Calling `save('my_model.keras')` creates a zip archive `my_model.keras`.
model.save("custom_model.keras")
"""

SAVING_CUSTOM_OBJECTS = """
# Upon loading, pass a dict containing the custom objects used in the
# `custom_objects` argument of `keras.models.load_model()`.
reconstructed_model = keras.models.load_model(
    "custom_model.keras",
    custom_objects={"CustomLayer": CustomLayer, "custom_fn": custom_fn},
)

# Let's check:
np.testing.assert_allclose(model.predict(test_input), reconstructed_model.predict(test_input))

# Pass the custom objects dictionary to a custom object scope and place
# the `keras.models.load_model()` call within the scope.
custom_objects = {"CustomLayer": CustomLayer, "custom_fn": custom_fn}

with keras.saving.custom_object_scope(custom_objects):
    scoped_model = keras.models.load_model("custom_model.keras")

np.testing.assert_allclose(model.predict(test_input), scoped_model.predict(test_input))
test_loss = model.evaluate(test_input, test_target, verbose=0)
new_model = keras.models.clone_model(model)
"""


def test_saving_guide_registered_custom_objects_saved_on_the_ranks_then_loaded(shell, tmp_path, monkeypatch):
    """The saving guide's custom objects (`CustomLayer` registered as "MyLayers>CustomLayer", `custom_fn` as
    "my_package>custom_fn", after `get_custom_objects().clear()`): the model fit and saved on the ranks (rank 0
    writes `custom_model.keras`) loads in the notebook, by registration, by `custom_objects=` and in a
    `custom_object_scope`, and predicts as the trained model that came back; the notebook's registry still names the
    notebook's own class and function."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, SAVING)
    _cell(shell, SAVING_FIT)
    _cell(shell, SAVING_LOAD)
    _cell(shell, SAVING_MODEL)
    _cell(shell, SAVING_FIT_AGAIN)
    one = _cell(shell, SAVING_CUSTOM_OBJECTS)["test_loss"]
    _in_folder(monkeypatch, tmp_path / "two")
    ns = _cell(shell, SAVING)
    custom_layer, custom_fn = ns["CustomLayer"], ns["custom_fn"]
    ns = _cell(shell, SAVING_FIT, distribute=True)
    assert os.listdir(".") == ["custom_model.keras"]
    assert type(ns["model"].layers[1]) is custom_layer and ns["model"].layers[2].activation is custom_fn
    ns = _cell(shell, SAVING_LOAD)
    assert type(ns["reconstructed_model"].layers[1]) is custom_layer
    model = _cell(shell, SAVING_MODEL)["model"]
    before = model.layers[2].kernel.numpy().copy()
    ns = _cell(shell, SAVING_FIT_AGAIN, distribute=True)
    assert ns["model"] is model and not np.allclose(before, model.layers[2].kernel.numpy())
    assert model.optimizer.iterations.numpy() == 1  # 4 samples, 2 a rank: one step
    ns = _cell(shell, SAVING_CUSTOM_OBJECTS)
    import keras

    assert keras.saving.get_registered_object("my_package>custom_fn") is custom_fn
    assert keras.saving.get_registered_object("MyLayers>CustomLayer") is custom_layer
    assert type(ns["new_model"].layers[1]) is custom_layer
    close(ns["test_loss"], one, 2.0, "test loss of the saved model's twin")


# ------------------------------------------------- keras.io "Classification with Gated Residual and Variable Selection"

GRN_DATA = """
import os

import numpy as np
import pandas as pd
import keras
from keras import layers

keras.utils.set_random_seed(0)

# The census-income columns, fewer of them: numeric, categorical, the instance weight and the income level.
CSV_HEADER = [
    "age",
    "wage_per_hour",
    "weeks_worked_in_year",
    "education",
    "marital_stat",
    "instance_weight",
    "income_level",
]

rng = np.random.default_rng(0)


def census_frame(rows):
    education = rng.choice([" Bachelors degree", " High school graduate", " Children", " Masters degree"], rows)
    marital = rng.choice([" Never married", " Married-civilian spouse present", " Divorced"], rows)
    age = rng.integers(0, 90, rows)
    weeks = np.where(age < 16, 0, rng.integers(0, 53, rows))
    wage = np.where(weeks > 0, rng.integers(0, 2000, rows), 0)
    rich = (np.char.find(education.astype(str), "degree") >= 0) & (weeks > 26) & (age > 25)
    income = np.where(rich | (rng.random(rows) < 0.03), " 50000+.", " - 50000.")
    weight = rng.uniform(500, 3000, rows).round(2)
    return pd.DataFrame(
        dict(zip(CSV_HEADER, [age, wage, weeks, education, marital, weight, income]))
    )


data = census_frame(1600)
test_data = census_frame(400)

print(f"Data shape: {data.shape}")
print(f"Test data shape: {test_data.shape}")

data["income_level"] = data["income_level"].apply(lambda x: 0 if x == " - 50000." else 1)
test_data["income_level"] = test_data["income_level"].apply(lambda x: 0 if x == " - 50000." else 1)

random_selection = np.random.rand(len(data.index)) <= 0.85
train_data = data[random_selection]
valid_data = data[~random_selection]

train_data_file = "train_data.csv"
valid_data_file = "valid_data.csv"
test_data_file = "test_data.csv"

train_data.to_csv(train_data_file, index=False, header=False)
valid_data.to_csv(valid_data_file, index=False, header=False)
test_data.to_csv(test_data_file, index=False, header=False)
"""

GRN_MODEL = """
# Target feature name.
TARGET_FEATURE_NAME = "income_level"
# Weight column name.
WEIGHT_COLUMN_NAME = "instance_weight"
# Numeric feature names.
NUMERIC_FEATURE_NAMES = [
    "age",
    "wage_per_hour",
    "weeks_worked_in_year",
]
# Categorical features and their vocabulary lists.
CATEGORICAL_FEATURES_WITH_VOCABULARY = {
    feature_name: sorted([str(value) for value in list(data[feature_name].unique())])
    for feature_name in CSV_HEADER
    if feature_name not in list(NUMERIC_FEATURE_NAMES + [WEIGHT_COLUMN_NAME, TARGET_FEATURE_NAME])
}
# All features names.
FEATURE_NAMES = NUMERIC_FEATURE_NAMES + list(CATEGORICAL_FEATURES_WITH_VOCABULARY.keys())
# Feature default values.
COLUMN_DEFAULTS = [
    ([0.0] if feature_name in NUMERIC_FEATURE_NAMES + [TARGET_FEATURE_NAME, WEIGHT_COLUMN_NAME] else ["NA"])
    for feature_name in CSV_HEADER
]

# Tensorflow required for tf.data.Datasets
import tensorflow as tf


# We process our datasets elements here (categorical) and convert them to indices to avoid this step
# during model training since only tensorflow support strings.
def process(features, target):
    for feature_name in features:
        if feature_name in CATEGORICAL_FEATURES_WITH_VOCABULARY:
            # Cast categorical feature values to string.
            features[feature_name] = tf.cast(features[feature_name], "string")
            vocabulary = CATEGORICAL_FEATURES_WITH_VOCABULARY[feature_name]
            # Create a lookup to convert a string values to an integer indices.
            # Since we are not using a mask token nor expecting any out of vocabulary
            # (oov) token, we set mask_token to None and  num_oov_indices to 0.
            index = layers.StringLookup(
                vocabulary=vocabulary,
                mask_token=None,
                num_oov_indices=0,
                output_mode="int",
            )
            # Convert the string input values into integer indices.
            value_index = index(features[feature_name])
            features[feature_name] = value_index
        else:
            # Do nothing for numerical features
            pass

    # Get the instance weight.
    weight = features.pop(WEIGHT_COLUMN_NAME)
    # Change features from OrderedDict to Dict to match Inputs as they are Dict.
    return dict(features), target, weight


def get_dataset_from_csv(csv_file_path, shuffle=False, batch_size=128):
    dataset = tf.data.experimental.make_csv_dataset(
        csv_file_path,
        batch_size=batch_size,
        column_names=CSV_HEADER,
        column_defaults=COLUMN_DEFAULTS,
        label_name=TARGET_FEATURE_NAME,
        num_epochs=1,
        header=False,
        shuffle=shuffle,
    ).map(process)

    return dataset


def create_model_inputs():
    inputs = {}
    for feature_name in FEATURE_NAMES:
        if feature_name in CATEGORICAL_FEATURES_WITH_VOCABULARY:
            # Make them int64, they are Categorical (whole units)
            inputs[feature_name] = layers.Input(name=feature_name, shape=(), dtype="int64")
        else:
            # Make them float32, they are Real numbers
            inputs[feature_name] = layers.Input(name=feature_name, shape=(), dtype="float32")
    return inputs


class GatedLinearUnit(layers.Layer):
    def __init__(self, units):
        super().__init__()
        self.linear = layers.Dense(units)
        self.sigmoid = layers.Dense(units, activation="sigmoid")

    def call(self, inputs):
        return self.linear(inputs) * self.sigmoid(inputs)


class GatedResidualNetwork(layers.Layer):
    def __init__(self, units, dropout_rate):
        super().__init__()
        self.units = units
        self.elu_dense = layers.Dense(units, activation="elu")
        self.linear_dense = layers.Dense(units)
        self.dropout = layers.Dropout(dropout_rate)
        self.gated_linear_unit = GatedLinearUnit(units)
        self.layer_norm = layers.LayerNormalization()
        self.project = layers.Dense(units)

    def call(self, inputs):
        x = self.elu_dense(inputs)
        x = self.linear_dense(x)
        x = self.dropout(x)
        if inputs.shape[-1] != self.units:
            inputs = self.project(inputs)
        x = inputs + self.gated_linear_unit(x)
        x = self.layer_norm(x)
        return x


class VariableSelection(layers.Layer):
    def __init__(self, num_features, units, dropout_rate):
        super().__init__()
        self.units = units
        # Create an embedding layers with the specified dimensions
        self.embeddings = dict()
        for input_ in CATEGORICAL_FEATURES_WITH_VOCABULARY:
            vocabulary = CATEGORICAL_FEATURES_WITH_VOCABULARY[input_]
            embedding_encoder = layers.Embedding(input_dim=len(vocabulary), output_dim=self.units, name=input_)
            self.embeddings[input_] = embedding_encoder

        # Projection layers for numeric features
        self.proj_layer = dict()
        for input_ in NUMERIC_FEATURE_NAMES:
            proj_layer = layers.Dense(units=self.units)
            self.proj_layer[input_] = proj_layer

        self.grns = list()
        # Create a GRN for each feature independently
        for idx in range(num_features):
            grn = GatedResidualNetwork(units, dropout_rate)
            self.grns.append(grn)
        # Create a GRN for the concatenation of all the features
        self.grn_concat = GatedResidualNetwork(units, dropout_rate)
        self.softmax = layers.Dense(units=num_features, activation="softmax")

    def call(self, inputs):
        concat_inputs = []
        for input_ in inputs:
            if input_ in CATEGORICAL_FEATURES_WITH_VOCABULARY:
                max_index = self.embeddings[input_].input_dim - 1  # Clamp the indices
                # torch had some index errors during embedding hence the clip function
                embedded_feature = self.embeddings[input_](keras.ops.clip(inputs[input_], 0, max_index))
                concat_inputs.append(embedded_feature)
            else:
                # Project the numeric feature to encoding_size using linear transformation.
                proj_feature = keras.ops.expand_dims(inputs[input_], -1)
                proj_feature = self.proj_layer[input_](proj_feature)
                concat_inputs.append(proj_feature)

        v = layers.concatenate(concat_inputs)
        v = self.grn_concat(v)
        v = keras.ops.expand_dims(self.softmax(v), axis=-1)
        x = []
        for idx, input in enumerate(concat_inputs):
            x.append(self.grns[idx](input))
        x = keras.ops.stack(x, axis=1)

        # tensorflow backend (the example's jax and torch branches are left out)
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            result_tf = keras.ops.squeeze(tf.matmul(v, x, transpose_a=True), axis=1)
            return result_tf

    # to remove the build warnings
    def build(self):
        self.built = True


def create_model(encoding_size):
    inputs = create_model_inputs()
    num_features = len(inputs)
    features = VariableSelection(num_features, encoding_size, dropout_rate)(inputs)
    outputs = layers.Dense(units=1, activation="sigmoid")(features)
    # Functional model
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


learning_rate = 0.001
dropout_rate = 0.15
batch_size = 265
num_epochs = 4  # maybe adjusted to a desired value
encoding_size = 8

model = create_model(encoding_size)
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
    loss=keras.losses.BinaryCrossentropy(),
    metrics=[keras.metrics.BinaryAccuracy(name="accuracy")],
)

# Create an early stopping callback.
early_stopping = keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, restore_best_weights=True)
"""

GRN_DATASETS = """
train_dataset = get_dataset_from_csv(train_data_file, shuffle=True, batch_size=batch_size)
valid_dataset = get_dataset_from_csv(valid_data_file, batch_size=batch_size)
"""

GRN_FIT = """
print("Start training the model...")
model.fit(
    train_dataset,
    epochs=num_epochs,
    validation_data=valid_dataset,
    callbacks=[early_stopping],
)
print("Model training finished.")
"""

GRN_EVALUATE = """
print("Evaluating model performance...")
test_dataset = get_dataset_from_csv(test_data_file, batch_size=batch_size)
test_loss, accuracy = model.evaluate(test_dataset)
print(f"Test accuracy: {round(accuracy * 100, 2)}%")
"""


def test_grn_vsn_csv_dataset_with_string_lookup_map_and_early_stopping(shell, tmp_path, monkeypatch):
    """GRN/VSN: `make_csv_dataset` pipelines made in their own cell, mapped through the example's `process` (a
    StringLookup made inside the map, sample weights), feed the notebook's functional model of `VariableSelection` /
    `GatedResidualNetwork` / `GatedLinearUnit` layers (Embeddings inside); the model, its optimizer and the
    EarlyStopping callback are the notebook's afterwards, and the test CSV evaluates. `plot_model` is left out
    (no pydot here)."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, GRN_DATA)
    _cell(shell, GRN_MODEL)
    _cell(shell, GRN_DATASETS)
    _cell(shell, GRN_FIT)
    one = _cell(shell, GRN_EVALUATE)
    one = {"loss": one["model"].history.history["loss"][-1], "test": one["test_loss"]}
    _in_folder(monkeypatch, tmp_path / "two")
    _cell(shell, GRN_DATA)
    ns = _cell(shell, GRN_MODEL)
    model, optimizer, stopping = ns["model"], ns["model"].optimizer, ns["early_stopping"]
    selection = model.layers[-2]
    ns = _cell(shell, GRN_DATASETS)
    train_dataset = ns["train_dataset"]
    ns = _cell(shell, GRN_FIT, distribute=True)
    assert ns["model"] is model and model.optimizer is optimizer and ns["early_stopping"] is stopping
    assert model.layers[-2] is selection and type(selection).__name__ == "VariableSelection"
    assert ns["train_dataset"] is train_dataset
    assert len(model.history.history["val_loss"]) == 4 and stopping.best == min(model.history.history["val_loss"])
    ns = _cell(shell, GRN_EVALUATE)
    assert 0.5 < ns["accuracy"] <= 1
    close(model.history.history["loss"][-1], one["loss"], 1.5, "training loss")
    close(ns["test_loss"], one["test"], 1.5, "test loss evaluated afterwards")


# ------------------------------------------------------------- keras.io "Deep Deterministic Policy Gradient (DDPG)"

DDPG_SETUP = """
import numpy as np
import tensorflow as tf
import keras
from keras import layers

keras.utils.set_random_seed(0)


class PendulumEnv:
    \"\"\"gymnasium's Pendulum-v1, in numpy (no gym here): the same state, action bounds, reward and dynamics,
    40 steps an episode instead of 200.\"\"\"

    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(self, max_episode_steps=40):
        self.max_episode_steps = max_episode_steps

    def reset(self):
        self.theta, self.theta_dot = np.random.uniform([-np.pi, -1.0], [np.pi, 1.0])
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        u = np.clip(action, -self.max_torque, self.max_torque)[0]
        angle = ((self.theta + np.pi) % (2 * np.pi)) - np.pi
        cost = angle**2 + 0.1 * self.theta_dot**2 + 0.001 * u**2
        acceleration = 3 * self.g / (2 * self.l) * np.sin(self.theta) + 3.0 / (self.m * self.l**2) * u
        self.theta_dot = np.clip(
            self.theta_dot + acceleration * self.dt,
            -self.max_speed,
            self.max_speed,
        )
        self.theta = self.theta + self.theta_dot * self.dt
        self.steps += 1
        return self._obs(), -cost, False, self.steps >= self.max_episode_steps, {}

    def _obs(self):
        return np.array([np.cos(self.theta), np.sin(self.theta), self.theta_dot], dtype=np.float32)


env = PendulumEnv()

num_states = 3
print("Size of State Space ->  {}".format(num_states))
num_actions = 1
print("Size of Action Space ->  {}".format(num_actions))

upper_bound = 2.0
lower_bound = -2.0

print("Max Value of Action ->  {}".format(upper_bound))
print("Min Value of Action ->  {}".format(lower_bound))


class OUActionNoise:
    def __init__(self, mean, std_deviation, theta=0.15, dt=1e-2, x_initial=None):
        self.theta = theta
        self.mean = mean
        self.std_dev = std_deviation
        self.dt = dt
        self.x_initial = x_initial
        self.reset()

    def __call__(self):
        # Formula taken from https://www.wikipedia.org/wiki/Ornstein-Uhlenbeck_process
        x = (
            self.x_prev
            + self.theta * (self.mean - self.x_prev) * self.dt
            + self.std_dev * np.sqrt(self.dt) * np.random.normal(size=self.mean.shape)
        )
        # Store x into x_prev
        # Makes next noise dependent on current one
        self.x_prev = x
        return x

    def reset(self):
        if self.x_initial is not None:
            self.x_prev = self.x_initial
        else:
            self.x_prev = np.zeros_like(self.mean)


class Buffer:
    def __init__(self, buffer_capacity=100000, batch_size=64):
        # Number of "experiences" to store at max
        self.buffer_capacity = buffer_capacity
        # Num of tuples to train on.
        self.batch_size = batch_size

        # Its tells us num of times record() was called.
        self.buffer_counter = 0

        # Instead of list of tuples as the exp.replay concept go
        # We use different np.arrays for each tuple element
        self.state_buffer = np.zeros((self.buffer_capacity, num_states))
        self.action_buffer = np.zeros((self.buffer_capacity, num_actions))
        self.reward_buffer = np.zeros((self.buffer_capacity, 1))
        self.next_state_buffer = np.zeros((self.buffer_capacity, num_states))

    # Takes (s,a,r,s') observation tuple as input
    def record(self, obs_tuple):
        # Set index to zero if buffer_capacity is exceeded,
        # replacing old records
        index = self.buffer_counter % self.buffer_capacity

        self.state_buffer[index] = obs_tuple[0]
        self.action_buffer[index] = obs_tuple[1]
        self.reward_buffer[index] = obs_tuple[2]
        self.next_state_buffer[index] = obs_tuple[3]

        self.buffer_counter += 1

    # Eager execution is turned on by default in TensorFlow 2. Decorating with tf.function allows
    # TensorFlow to build a static graph out of the logic and computations in our function.
    # This provides a large speed up for blocks of code that contain many small TensorFlow operations such as this one.
    @tf.function
    def update(
        self,
        state_batch,
        action_batch,
        reward_batch,
        next_state_batch,
    ):
        # Training and updating Actor & Critic networks.
        # See Pseudo Code.
        with tf.GradientTape() as tape:
            target_actions = target_actor(next_state_batch, training=True)
            y = reward_batch + gamma * target_critic([next_state_batch, target_actions], training=True)
            critic_value = critic_model([state_batch, action_batch], training=True)
            critic_loss = keras.ops.mean(keras.ops.square(y - critic_value))

        critic_grad = tape.gradient(critic_loss, critic_model.trainable_variables)
        critic_optimizer.apply_gradients(zip(critic_grad, critic_model.trainable_variables))

        with tf.GradientTape() as tape:
            actions = actor_model(state_batch, training=True)
            critic_value = critic_model([state_batch, actions], training=True)
            # Used `-value` as we want to maximize the value given
            # by the critic for our actions
            actor_loss = -keras.ops.mean(critic_value)

        actor_grad = tape.gradient(actor_loss, actor_model.trainable_variables)
        actor_optimizer.apply_gradients(zip(actor_grad, actor_model.trainable_variables))

    # We compute the loss and update parameters
    def learn(self):
        # Get sampling range
        record_range = min(self.buffer_counter, self.buffer_capacity)
        # Randomly sample indices
        batch_indices = np.random.choice(record_range, self.batch_size)

        # Convert to tensors
        state_batch = keras.ops.convert_to_tensor(self.state_buffer[batch_indices])
        action_batch = keras.ops.convert_to_tensor(self.action_buffer[batch_indices])
        reward_batch = keras.ops.convert_to_tensor(self.reward_buffer[batch_indices])
        reward_batch = keras.ops.cast(reward_batch, dtype="float32")
        next_state_batch = keras.ops.convert_to_tensor(self.next_state_buffer[batch_indices])

        self.update(state_batch, action_batch, reward_batch, next_state_batch)


# This update target parameters slowly
# Based on rate `tau`, which is much less than one.
# (The TF2 version's `@tf.function update_target(target_weights, weights, tau)` over `model.variables` fails in one
# process on Keras 3: the tf.function gets the variables as tensors, "'SymbolicTensor' object has no attribute
# 'assign'". This is the Keras 3 version's.)
def update_target(target, original, tau):
    target_weights = target.get_weights()
    original_weights = original.get_weights()

    for i in range(len(target_weights)):
        target_weights[i] = original_weights[i] * tau + target_weights[i] * (1 - tau)

    target.set_weights(target_weights)


def get_actor():
    # Initialize weights between -3e-3 and 3-e3
    last_init = keras.initializers.RandomUniform(minval=-0.003, maxval=0.003)

    inputs = layers.Input(shape=(num_states,))
    out = layers.Dense(64, activation="relu")(inputs)
    out = layers.Dense(64, activation="relu")(out)
    outputs = layers.Dense(1, activation="tanh", kernel_initializer=last_init)(out)

    # Our upper bound is 2.0 for Pendulum.
    outputs = outputs * upper_bound
    model = keras.Model(inputs, outputs)
    return model


def get_critic():
    # State as input
    state_input = layers.Input(shape=(num_states,))
    state_out = layers.Dense(16, activation="relu")(state_input)
    state_out = layers.Dense(32, activation="relu")(state_out)

    # Action as input
    action_input = layers.Input(shape=(num_actions,))
    action_out = layers.Dense(32, activation="relu")(action_input)

    # Both are passed through separate layer before concatenating
    concat = layers.Concatenate()([state_out, action_out])

    out = layers.Dense(64, activation="relu")(concat)
    out = layers.Dense(64, activation="relu")(out)
    outputs = layers.Dense(1)(out)

    # Outputs single value for give state-action
    model = keras.Model([state_input, action_input], outputs)

    return model


def policy(state, noise_object):
    sampled_actions = keras.ops.squeeze(actor_model(state))
    noise = noise_object()
    # Adding noise to action
    sampled_actions = sampled_actions.numpy() + noise

    # We make sure action is within bounds
    legal_action = np.clip(sampled_actions, lower_bound, upper_bound)

    return [np.squeeze(legal_action)]
"""

DDPG_HYPERPARAMETERS = """
std_dev = 0.2
ou_noise = OUActionNoise(mean=np.zeros(1), std_deviation=float(std_dev) * np.ones(1))

actor_model = get_actor()
critic_model = get_critic()

target_actor = get_actor()
target_critic = get_critic()

# Making the weights equal initially
target_actor.set_weights(actor_model.get_weights())
target_critic.set_weights(critic_model.get_weights())

# Learning rate for actor-critic models
critic_lr = 0.002
actor_lr = 0.001

critic_optimizer = keras.optimizers.Adam(critic_lr)
actor_optimizer = keras.optimizers.Adam(actor_lr)

total_episodes = 4
# Discount factor for future rewards
gamma = 0.99
# Used to update target networks
tau = 0.005

buffer = Buffer(50000, 16)
"""

DDPG_TRAIN = """
# To store reward history of each episode
ep_reward_list = []
# To store average reward history of last few episodes
avg_reward_list = []

# Takes about 4 min to train
for ep in range(total_episodes):
    prev_state, _ = env.reset()
    episodic_reward = 0

    while True:
        tf_prev_state = keras.ops.expand_dims(keras.ops.convert_to_tensor(prev_state), 0)

        action = policy(tf_prev_state, ou_noise)
        # Receive state and reward from environment.
        state, reward, done, truncated, _ = env.step(action)

        buffer.record((prev_state, action, reward, state))
        episodic_reward += reward

        buffer.learn()
        update_target(target_actor, actor_model, tau)
        update_target(target_critic, critic_model, tau)

        # End this episode when `done` or `truncated` is True
        if done or truncated:
            break

        prev_state = state

    ep_reward_list.append(episodic_reward)

    # Mean of last 40 episodes
    avg_reward = np.mean(ep_reward_list[-40:])
    print("Episode * {} * Avg Reward is ==> {}".format(ep, avg_reward))
    avg_reward_list.append(avg_reward)
"""

DDPG_AFTER = """
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# Plotting graph
# Episodes versus Avg. Rewards
plt.plot(avg_reward_list)
plt.xlabel("Episode")
plt.ylabel("Avg. Episodic Reward")
plt.close()

# Save the weights
actor_model.save_weights("pendulum_actor.weights.h5")
critic_model.save_weights("pendulum_critic.weights.h5")

target_actor.save_weights("pendulum_target_actor.weights.h5")
target_critic.save_weights("pendulum_target_critic.weights.h5")

restored_actor = get_actor()
restored_actor.load_weights("pendulum_actor.weights.h5")
probe_states = np.stack([env.reset()[0] for _ in range(8)])
np.testing.assert_allclose(restored_actor(probe_states), actor_model(probe_states), rtol=1e-5)
target_gap = float(np.abs(target_actor.get_weights()[0] - actor_model.get_weights()[0]).mean())
"""


def test_ddpg_custom_loop_with_buffer_tf_function_and_target_updates(shell, tmp_path, monkeypatch):
    """DDPG, zero-code: the episode loop over a numpy pendulum (gym is absent) runs on both ranks with the
    notebook's four models, its two optimizers (applied in `Buffer.update`, a `tf.function` method of the notebook's
    class that names the models as globals) and `update_target` (`set_weights` on the targets). The models and
    optimizers come back as the notebook's objects, trained as one process trains them (the ranks start from the
    notebook's seeded state, so the episodes are the same); the weights are saved and loaded afterwards. The
    keras.io example's Keras 3 version (`env.reset()` returning `(state, info)`, five values from `env.step`,
    `update_target(target, original, tau)` over get_weights / set_weights, `.weights.h5` names): its TF2 version's
    `@tf.function update_target(target_weights, weights, tau)` over `model.variables` fails in one process on Keras 3
    ("'SymbolicTensor' object has no attribute 'assign'")."""
    _in_folder(monkeypatch, tmp_path / "one")
    _cell(shell, DDPG_SETUP)
    _cell(shell, DDPG_HYPERPARAMETERS)
    _cell(shell, DDPG_TRAIN)
    one = _cell(shell, DDPG_AFTER)
    one = {"reward": one["avg_reward_list"][-1], "gap": one["target_gap"], "steps": one["buffer"].buffer_counter}
    _in_folder(monkeypatch, tmp_path / "two")
    _cell(shell, DDPG_SETUP)
    ns = _cell(shell, DDPG_HYPERPARAMETERS)
    names = ["actor_model", "critic_model", "target_actor", "target_critic", "actor_optimizer", "critic_optimizer"]
    before = {name: ns[name] for name in names}
    target_before = ns["target_actor"].get_weights()[0].copy()
    ns = _cell(shell, DDPG_TRAIN, distribute=True)
    for name in names:
        assert ns[name] is before[name], name
    assert ns["actor_optimizer"].iterations.numpy() == ns["critic_optimizer"].iterations.numpy() == 4 * 40
    assert not np.allclose(target_before, ns["target_actor"].get_weights()[0])
    assert len(ns["avg_reward_list"]) == 4
    # Plain objects of the notebook's classes the loop changed hold what it left, as in one process.
    assert ns["buffer"].buffer_counter == one["steps"] == 4 * 40
    assert np.count_nonzero(ns["buffer"].state_buffer.any(axis=1)) == 4 * 40
    assert ns["env"].steps == 40 and ns["ou_noise"].x_prev.shape == (1,) and ns["ou_noise"].x_prev[0] != 0
    ns = _cell(shell, DDPG_AFTER)
    assert sorted(os.listdir(".")) == [
        "pendulum_actor.weights.h5",
        "pendulum_critic.weights.h5",
        "pendulum_target_actor.weights.h5",
        "pendulum_target_critic.weights.h5",
    ]
    close(-ns["avg_reward_list"][-1], -one["reward"], 1.05, "average episodic reward")
    close(ns["target_gap"], one["gap"], 1.1, "how far the target actor trails the actor")
