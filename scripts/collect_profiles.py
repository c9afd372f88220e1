"""Collect step-time profiles of a zoo of Keras models on one engine of the local cluster, for the estimator.

Each model is built on the engine, its features taken, and `runtime.probe.profile` times train steps at a few batch
sizes. The result is the data the estimator is fitted on (jupyter_dl/data/profiles/<device>.json). Run it on every
kind of machine you can (on a GPU machine it records that GPU's name as the device):

    .venv/bin/python scripts/collect_profiles.py [--batch-sizes 16,32,64,128,256] [--out jupyter_dl/data/profiles]
"""
import argparse
import json
import os
import pathlib
import platform
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def zoo():
    """(name, builder) pairs: MLPs, CNNs, recurrent and attention models of different shapes and sizes."""
    def mlp(width, depth, inputs=784):
        def build():
            import keras

            layers = [keras.Input((inputs,))]
            layers += [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
            return keras.Sequential(layers + [keras.layers.Dense(10, activation="softmax")]), (inputs,), 10
        return build

    def cnn(shape, filters, dense=128):
        def build():
            import keras

            layers = [keras.Input(shape)]
            for f in filters:
                layers += [keras.layers.Conv2D(f, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D()]
            layers += [keras.layers.Flatten(), keras.layers.Dense(dense, activation="relu"),
                       keras.layers.Dense(10, activation="softmax")]
            return keras.Sequential(layers), shape, 10
        return build

    def rnn(kind, units, steps=40, features=32):
        def build():
            import keras

            cell = getattr(keras.layers, kind)
            model = keras.Sequential([keras.Input((steps, features)), cell(units),
                                      keras.layers.Dense(10, activation="softmax")])
            return model, (steps, features), 10
        return build

    def text(vocab=8000, length=100, dims=64):
        def build():
            import keras

            model = keras.Sequential([keras.Input((length,), dtype="int32"), keras.layers.Embedding(vocab, dims),
                                      keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(64, activation="relu"),
                                      keras.layers.Dense(2, activation="softmax")])
            return model, (length,), 2
        return build

    def attention(length=64, width=64, heads=4):
        def build():
            import keras

            inputs = keras.Input((length, width))
            attended = keras.layers.MultiHeadAttention(heads, width // heads)(inputs, inputs)
            x = keras.layers.LayerNormalization()(inputs + attended)
            x = keras.layers.Dense(width * 2, activation="relu")(x)
            x = keras.layers.GlobalAveragePooling1D()(x)
            outputs = keras.layers.Dense(10, activation="softmax")(x)
            return keras.Model(inputs, outputs), (length, width), 10
        return build

    return [
        ("mlp-64x2", mlp(64, 2)), ("mlp-128x3", mlp(128, 3, inputs=256)), ("mlp-256x2", mlp(256, 2)),
        ("mlp-768x2", mlp(768, 2, inputs=256)), ("mlp-1024x2", mlp(1024, 2)), ("mlp-512x4", mlp(512, 4)),
        ("mlp-2048x3", mlp(2048, 3)),
        ("cnn-28-16-32", cnn((28, 28, 1), (16, 32))), ("cnn-28-32-64", cnn((28, 28, 1), (32, 64))),
        ("cnn-32-32-64", cnn((32, 32, 3), (32, 64))), ("cnn-32-32-64-128", cnn((32, 32, 3), (32, 64, 128))),
        ("cnn-64-16-32-64", cnn((64, 64, 3), (16, 32, 64))),
        ("lstm-64", rnn("LSTM", 64)), ("lstm-128", rnn("LSTM", 128, steps=30)), ("gru-64", rnn("GRU", 64, steps=60)),
        ("gru-128", rnn("GRU", 128)),
        ("text-embedding", text()), ("text-embedding-wide", text(vocab=20000, length=200, dims=128)),
        ("attention-64", attention()), ("attention-96", attention(length=96, width=96, heads=4)),
        ("attention-128", attention(length=128, width=128, heads=8)),
    ]


def profile_one(build, batch_sizes):
    """Runs on the engine: build, compile, take features, time steps."""
    import keras
    import numpy as np

    from jupyter_dl.recommend.features import model_features
    from jupyter_dl.runtime.probe import profile

    keras.utils.set_random_seed(0)
    model, shape, classes = build()
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    largest = max(batch_sizes)
    if model.inputs[0].dtype == "int32":
        x = rng.integers(0, 1000, size=(largest, *shape)).astype("int32")
    else:
        x = rng.normal(size=(largest, *shape)).astype("float32")
    y = rng.integers(0, classes, size=largest).astype("int64")
    measured = profile(model, x, y, batch_sizes)
    return {"features": model_features(model).as_dict(), **measured}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-sizes", default="16,32,64,128,256")
    parser.add_argument("--out", default=str(ROOT / "jupyter_dl" / "data" / "profiles"))
    args = parser.parse_args()
    import jupyter_dl
    from jupyter_dl import api

    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    api.session().cluster.start(n=1)
    models = []
    # The first model on a fresh engine pays one-time costs (thread pools, allocator): run one and drop it.
    jupyter_dl.distribute(profile_one, n=1, args=(zoo()[1][1], batch_sizes), manual=True, plot=False)
    for name, build in zoo():
        start = time.perf_counter()
        result = jupyter_dl.distribute(profile_one, n=1, args=(build, batch_sizes), manual=True, plot=False)
        models.append({"name": name, **result})
        steps = ", ".join(f"b={r['batch_size']}: {r['step_s'] * 1000:.1f} ms" for r in result["rows"])
        print(f"{name:<20} {result['device']:<12} {steps}  ({time.perf_counter() - start:.1f}s)", flush=True)
    device = models[0]["device"]
    api.shutdown()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{device.replace(':', '-').replace(' ', '_')}.json"
    path.write_text(json.dumps({"device": device, "collected": time.strftime("%Y-%m-%d"),
                                "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                            "python": platform.python_version()},
                                "models": models}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
