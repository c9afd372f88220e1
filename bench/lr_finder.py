"""LR range test against a grid search, on three small tasks (target: suggestion within 2x of the grid's best).

For each task the same seeded model is trained for a few epochs at every learning rate of a half-decade grid; the
grid's best is the rate with the lowest validation loss. The range test runs on a fresh copy of the same model. The
ratio is max(suggested/best, best/suggested). Runs in one process (no cluster): the finder's rule is what is measured.

    .venv/bin/python bench/lr_finder.py [--epochs 6]
"""

import argparse
import os
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import _common  # noqa: E402

GRID = [10**e for e in np.arange(-4.0, 0.01, 0.5)]


def digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target.astype("int64")
    order = np.random.default_rng(0).permutation(len(x))
    return x[order], y[order]


def regression():
    from sklearn.datasets import make_regression

    x, y = make_regression(n_samples=2000, n_features=20, n_informative=10, noise=10.0, random_state=0)
    x = ((x - x.mean(0)) / x.std(0)).astype("float32")
    return x, ((y - y.mean()) / y.std()).astype("float32")


def tasks():
    import keras

    def mlp_adam():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy")
        return model

    def cnn_sgd():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Reshape((8, 8, 1)),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.Flatten(),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(keras.optimizers.SGD(1e-2, momentum=0.9), "sparse_categorical_crossentropy")
        return model

    def regression_adam():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(1e-3), "mse")
        return model

    return [
        ("digits MLP, Adam", mlp_adam, digits),
        ("digits CNN, SGD+momentum", cnn_sgd, digits),
        ("regression MLP, Adam", regression_adam, regression),
    ]


def grid_search(build, x, y, epochs, batch_size):
    losses = {}
    split = int(len(x) * 0.8)
    for lr in GRID:
        model = build()
        model.optimizer.learning_rate.assign(lr)
        model.fit(x[:split], y[:split], epochs=epochs, batch_size=batch_size, verbose=0)
        loss = model.evaluate(x[split:], y[split:], verbose=0)
        losses[lr] = float(loss[0] if isinstance(loss, list) else loss)
    finite = {lr: v for lr, v in losses.items() if np.isfinite(v)}
    return min(finite, key=finite.get), losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    from jupyter_dl.kernel.lr_finder import lr_find

    load_before = _common.load_before()
    t_start = time.perf_counter()
    rows = []
    for name, build, data in tasks():
        x, y = data()
        split = int(len(x) * 0.8)
        best, losses = grid_search(build, x, y, args.epochs, args.batch_size)
        t0 = time.perf_counter()
        found = lr_find(build(), x[:split], y[:split], batch_size=args.batch_size, n=1, show=False)
        finder_s = time.perf_counter() - t0
        ratio = max(found.suggestion / best, best / found.suggestion)
        rows.append(
            {
                "task": name,
                "grid_best_lr": best,
                "suggested_lr": found.suggestion,
                "ratio": ratio,
                "finder_s": finder_s,
                "finder_steps": len(found.lrs),
                "grid_val_loss": losses,
            }
        )
        print(
            f"{name:<28} grid best {best:9.3g}  suggested {found.suggestion:9.3g}  ratio {ratio:4.2f}x  "
            f"({len(found.lrs)} steps, {finder_s:.1f}s)",
            flush=True,
        )
    worst = max(r["ratio"] for r in rows)
    print(
        f"target: within 2x of the grid's best on every task -> worst {worst:.2f}x: {'MET' if worst <= 2 else 'MISSED'}"
    )
    load_after = _common.print_load(load_before)
    _common.write_results(
        HERE / "results" / "lr_finder.json",
        {"grid": GRID, "epochs": args.epochs, "tasks": rows},
        t_start,
        load_before,
        load_after,
        ("tensorflow", "keras"),
    )


if __name__ == "__main__":
    main()
