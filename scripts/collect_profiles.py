"""Collect step-time profiles of a zoo of Keras models on this machine's device, for the estimator.

Every model is built and compiled in this one process, its features taken, and its train steps timed at a few batch
sizes. The result is the data the estimator is fitted on (jupyter_dl/data/profiles/<device>.json). Run it on every
kind of machine you can (on a GPU machine it records that GPU's name as the device):

    .venv/bin/python scripts/collect_profiles.py [--batch-sizes 16,32,64,128,256] [--rounds 7] [--window 0.15]
        [--models mlp-64x2,...] [--out jupyter_dl/data/profiles]
    .venv/bin/python scripts/collect_profiles.py --refresh-features [--out jupyter_dl/data/profiles]

`--refresh-features` times nothing: it takes the features of every zoo model in the stored profiles again with
today's model_features (after a feature was added) and keeps their measured rows, so no re-timing on a busy machine.

Timing is meant to survive a busy machine (tests running beside it): see `collect`. TensorFlow's thread defaults are
kept, as an engine runs with them; one inter-op thread made repeated collections differ more, not less.
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
    """(name, builder) pairs: MLPs, CNNs, recurrent, text and attention models of different shapes and sizes."""

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
            layers += [
                keras.layers.Flatten(),
                keras.layers.Dense(dense, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
            return keras.Sequential(layers), shape, 10

        return build

    def rnn(kind, units, steps=40, features=32):
        def build():
            import keras

            cell = getattr(keras.layers, kind)
            model = keras.Sequential(
                [keras.Input((steps, features)), cell(units), keras.layers.Dense(10, activation="softmax")]
            )
            return model, (steps, features), 10

        return build

    def text(vocab=8000, length=100, dims=64):
        def build():
            import keras

            model = keras.Sequential(
                [
                    keras.Input((length,), dtype="int32"),
                    keras.layers.Embedding(vocab, dims),
                    keras.layers.GlobalAveragePooling1D(),
                    keras.layers.Dense(64, activation="relu"),
                    keras.layers.Dense(2, activation="softmax"),
                ]
            )
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
        ("mlp-64x2", mlp(64, 2)),
        ("mlp-128x3", mlp(128, 3, inputs=256)),
        ("mlp-256x2", mlp(256, 2)),
        ("mlp-768x2", mlp(768, 2, inputs=256)),
        ("mlp-1024x2", mlp(1024, 2)),
        ("mlp-512x4", mlp(512, 4)),
        ("mlp-2048x3", mlp(2048, 3)),
        ("mlp-512x2", mlp(512, 2)),
        ("mlp-1536x2", mlp(1536, 2)),
        ("mlp-256x6", mlp(256, 6, inputs=256)),
        ("cnn-28-16-32", cnn((28, 28, 1), (16, 32))),
        ("cnn-28-32-64", cnn((28, 28, 1), (32, 64))),
        ("cnn-32-32-64", cnn((32, 32, 3), (32, 64))),
        ("cnn-32-32-64-128", cnn((32, 32, 3), (32, 64, 128))),
        ("cnn-64-16-32-64", cnn((64, 64, 3), (16, 32, 64))),
        ("cnn-28-8-16", cnn((28, 28, 1), (8, 16))),
        ("cnn-32-16-32-64-128", cnn((32, 32, 3), (16, 32, 64, 128))),
        ("cnn-64-32-64", cnn((64, 64, 3), (32, 64))),
        ("lstm-64", rnn("LSTM", 64)),
        ("lstm-128", rnn("LSTM", 128, steps=30)),
        ("gru-64", rnn("GRU", 64, steps=60)),
        ("gru-128", rnn("GRU", 128)),
        ("lstm-32", rnn("LSTM", 32, steps=80, features=16)),
        ("lstm-256", rnn("LSTM", 256, steps=20)),
        ("gru-32", rnn("GRU", 32, steps=50)),
        ("gru-96", rnn("GRU", 96, steps=30)),
        ("simplernn-128", rnn("SimpleRNN", 128, steps=50)),
        ("text-embedding", text()),
        ("text-embedding-wide", text(vocab=20000, length=200, dims=128)),
        ("text-embedding-mid", text(vocab=12000, length=150, dims=96)),
        ("text-embedding-long", text(vocab=4000, length=400, dims=32)),
        ("attention-64", attention()),
        ("attention-96", attention(length=96, width=96, heads=4)),
        ("attention-128", attention(length=128, width=128, heads=8)),
        ("attention-32x128", attention(length=32, width=128, heads=4)),
        ("attention-128x64", attention(length=128, width=64, heads=8)),
    ]


def prepare(build, batch_sizes):
    """Build and compile one zoo model, take its features, and cut a batch of every size from one random set."""
    import keras
    import numpy as np

    from jupyter_dl.wire.model_features import model_features

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
    return model, model_features(model).as_dict(), {b: (x[:b], y[:b]) for b in batch_sizes}


def refresh_features(out):
    """Rewrite every stored profile's features from the zoo's builders; the timed rows stay as they were."""
    import keras

    from jupyter_dl.wire.model_features import model_features

    builders = dict(zoo())
    for path in sorted(pathlib.Path(out).glob("*.json")):
        profile = json.loads(path.read_text())
        unknown = [m["name"] for m in profile["models"] if m["name"] not in builders]
        if unknown:
            raise SystemExit(f"{path}: models {unknown} are not in the zoo; collect that profile again instead")
        for entry in profile["models"]:
            keras.utils.set_random_seed(0)
            entry["features"] = model_features(builders[entry["name"]]()[0]).as_dict()
        path.write_text(json.dumps(profile, indent=1))
        print(f"refreshed the features of {len(profile['models'])} models in {path}")


def window(model, batch, steps):
    """Mean seconds of one step over `steps` back-to-back train steps."""
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(*batch)
    return (time.perf_counter() - start) / steps


def collect(zoo_models, batch_sizes, rounds, window_s):
    """Time every (model, batch size) in `rounds` windows of about `window_s`, the windows of all pairs shuffled
    together, and keep each pair's fastest window. Other work on the machine only ever slows a window down, so the
    fastest is the closest to the step's own cost; interleaving spreads a burst of load over many pairs' windows
    instead of spoiling all of one pair's. Rows keep the median window too (median_s): how much load leaked in.
    Every model is warmed up before any is timed, so none pays the process's one-time costs (thread pools)."""
    import random

    models, pairs = [], []
    for name, build in zoo_models:
        start = time.perf_counter()
        model, features, batches = prepare(build, batch_sizes)
        # Keras traces its train step for the first batch shape it sees and, from the second shape on, once for any
        # batch size. The first trace is specialised to its shape (recurrent models stepped a quarter to a third
        # faster on it), while `fit`, whose batches' size is unknown, runs the general one: give the first trace to
        # a size that is not timed.
        model.train_on_batch(*(part[:2] for part in batches[min(batch_sizes)]))
        for batch_size, batch in batches.items():
            window(model, batch, 3)  # the first size traces the general step; every size fills allocator caches
            guess = window(model, batch, 2)
            steps = max(2, min(50, round(window_s / guess)))
            pairs.append((len(models), batch_size, model, batch, steps))
        models.append({"name": name, "features": features, "windows": {b: [] for b in batch_sizes}})
        print(f"built {name:<20} ({time.perf_counter() - start:.1f}s)", flush=True)
    shuffle = random.Random(0).shuffle
    for round_ in range(rounds):
        start = time.perf_counter()
        shuffle(pairs)
        for index, batch_size, model, batch, steps in pairs:
            models[index]["windows"][batch_size].append(window(model, batch, steps))
        print(f"round {round_ + 1}/{rounds} ({time.perf_counter() - start:.1f}s)", flush=True)
    for entry in models:
        windows = entry.pop("windows")
        entry["rows"] = [
            {"batch_size": b, "step_s": min(w), "median_s": float(sorted(w)[len(w) // 2])} for b, w in windows.items()
        ]
    return models


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-sizes", default="16,32,64,128,256")
    parser.add_argument("--rounds", type=int, default=7, help="timed windows per (model, batch size)")
    parser.add_argument("--window", type=float, default=0.15, help="seconds of steps per timed window")
    parser.add_argument("--models", default="", help="comma-separated names: profile only these zoo models")
    parser.add_argument("--out", default=str(ROOT / "jupyter_dl" / "data" / "profiles"))
    parser.add_argument(
        "--refresh-features", action="store_true", help="re-take the stored models' features; time nothing"
    )
    args = parser.parse_args()
    if args.refresh_features:
        return refresh_features(args.out)
    import tensorflow as tf

    from jupyter_dl.runtime.probe import device_kind

    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    chosen = [(n, b) for n, b in zoo() if not args.models or n in args.models.split(",")]
    start = time.perf_counter()
    models = collect(chosen, batch_sizes, args.rounds, args.window)
    device = device_kind()
    for entry in models:
        steps = ", ".join(f"b={r['batch_size']}: {r['step_s'] * 1000:.2f} ms" for r in entry["rows"])
        print(f"{entry['name']:<20} {steps}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{device.replace(':', '-').replace(' ', '_')}.json"
    path.write_text(
        json.dumps(
            {
                "device": device,
                "collected": time.strftime("%Y-%m-%d"),
                "machine": {
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "tensorflow": tf.__version__,
                    "rounds": args.rounds,
                    "window_s": args.window,
                    "collect_s": round(time.perf_counter() - start),
                },
                "models": models,
            },
            indent=1,
        )
    )
    print(f"wrote {path} ({time.perf_counter() - start:.0f}s)")


if __name__ == "__main__":
    main()
