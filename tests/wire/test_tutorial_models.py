"""Models as the Keras guides write them, compiled in the notebook and trained under `%%distribute -n 2`.

The guides' first models have no Input: `keras.Sequential([layers.Dense(...), ...])`, a subclass `MyModel(units)`
and the subclassing guide's VAE (Encoder and Decoder layers, `add_loss` in `call`), which build on their first
batch. Compiled in a plain cell and trained in a distributed one, they must train (their variables are made on the
ranks before the first broadcast) and come back as one process leaves them: the notebook's own `model` and `opt`
objects hold the training. Real 2-rank jobs on the local cluster; the other tutorial cases of the sweep (the
keras.io VAE, distiller, GANs, transformer layers) are in test_composites.py.
"""

import math

import pytest
from IPython.utils.capture import capture_output

RANKS = 2
SAMPLES, BATCH = 1400, 32
STEPS = math.ceil(SAMPLES // RANKS / BATCH)  # one epoch: each rank takes half the samples

MODELS = """
import keras
from keras import layers, ops


class MyModel(keras.Model):
    def __init__(self, units):
        super().__init__()
        self.dense1 = layers.Dense(units, activation="relu")
        self.dense2 = layers.Dense(10)

    def call(self, inputs):
        return self.dense2(self.dense1(inputs))


class Sampling(layers.Layer):
    def call(self, inputs):
        z_mean, z_log_var = inputs
        epsilon = keras.random.normal(shape=ops.shape(z_mean))
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class Encoder(layers.Layer):
    def __init__(self, latent_dim=8, intermediate_dim=32, name="encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_mean = layers.Dense(latent_dim)
        self.dense_log_var = layers.Dense(latent_dim)
        self.sampling = Sampling()

    def call(self, inputs):
        x = self.dense_proj(inputs)
        z_mean, z_log_var = self.dense_mean(x), self.dense_log_var(x)
        return z_mean, z_log_var, self.sampling((z_mean, z_log_var))


class Decoder(layers.Layer):
    def __init__(self, original_dim, intermediate_dim=32, name="decoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_output = layers.Dense(original_dim, activation="sigmoid")

    def call(self, inputs):
        return self.dense_output(self.dense_proj(inputs))


class VariationalAutoEncoder(keras.Model):
    def __init__(self, original_dim, intermediate_dim=32, latent_dim=8, name="autoencoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
        self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

    def call(self, inputs):
        z_mean, z_log_var, z = self.encoder(inputs)
        self.add_loss(-0.5 * ops.mean(z_log_var - ops.square(z_mean) - ops.exp(z_log_var) + 1))
        return self.decoder(z)


keras.utils.set_random_seed(0)
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
sequential = keras.Sequential([layers.Dense(32, activation="relu"), layers.Dense(10)])
sequential_opt = keras.optimizers.RMSprop(1e-2)
sequential.compile(optimizer=sequential_opt, loss=loss, metrics=["accuracy"])
subclassed = MyModel(32)
subclassed_opt = keras.optimizers.Adam(1e-2)
subclassed.compile(optimizer=subclassed_opt, loss=loss, metrics=["accuracy"])
vae = VariationalAutoEncoder(64)
vae_opt = keras.optimizers.Adam(1e-3)
vae.compile(vae_opt, loss=keras.losses.MeanSquaredError())
before = {"sequential": sequential, "subclassed": subclassed, "vae": vae}
"""

FIT = """%%distribute -n 2 --backend {backend}
sequential_history = sequential.fit(x_train, y_train, batch_size=32, epochs=1, verbose=0)
subclassed_history = subclassed.fit(x_train, y_train, batch_size=32, epochs=1, verbose=0)
vae.fit(x_train, x_train, epochs=1, batch_size=32, verbose=0)
"""


def _run(shell, code):
    with capture_output() as shown:
        result = shell.run_cell(code, store_history=False)
    text = shown.stdout + shown.stderr
    assert result.success, f"{result.error_before_exec or result.error_in_exec!r}\n{text[-3000:]}"
    assert "did not come back" not in text and "the ranks trained apart" not in text, text
    # TensorFlow's warning on forming a collective group (the first TensorFlow job after a Horovod one) is not the
    # user's news: one process would show nothing here.
    assert "Enabling collective ops" not in text, text
    return shell.user_ns


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_models_without_an_input_train_and_stay_the_notebook_s_objects(shell, digits, backend):
    shell.user_ns.update(digits)
    _run(shell, MODELS)
    ns = _run(shell, FIT.format(backend=backend))
    for name in ("sequential", "subclassed"):
        model, opt = ns[name], ns[f"{name}_opt"]
        assert model is ns["before"][name], f"{name}: the notebook's model was replaced by a copy"
        assert model.optimizer is opt, f"{name}: the notebook's optimizer no longer trains the model"
        assert int(opt.iterations.numpy()) == STEPS, (name, int(opt.iterations.numpy()))
        assert ns[f"{name}_history"].history["accuracy"][-1] > 0.2, (name, ns[f"{name}_history"].history)
        loss, accuracy = model.evaluate(ns["x_test"], ns["y_test"], verbose=0)
        assert accuracy > 0.2 and math.isfinite(loss), (name, loss, accuracy)
    vae, vae_opt = ns["vae"], ns["vae_opt"]
    assert vae is ns["before"]["vae"] and vae.optimizer is vae_opt
    assert int(vae_opt.iterations.numpy()) == STEPS
    z_mean, _, _ = vae.encoder(ns["x_test"])  # its parts work on their own, as after one process's fit
    assert tuple(z_mean.shape) == (len(ns["x_test"]), 8)
    assert math.isfinite(vae.evaluate(ns["x_test"], ns["x_test"], verbose=0))
