"""`%dl_template X Y` through IPython's real magic machinery: for each data kind the cell it writes below runs as a
real 2-rank job (`%%distribute -n 2` in place of `--recommend`, to keep it short; one run keeps `--recommend`) and the
model it trains beats a trivial baseline on held-out data made here."""

import numpy as np
import pytest

from jupyter_dl.kernel.template import describe


def _written_cell(shell, line):
    shell.rl_next_input = None
    result = shell.run_cell(f"%dl_template {line}", store_history=False)
    assert result.success, result.error_in_exec or result.error_before_exec
    code = shell.rl_next_input  # what set_next_input put in the next cell
    assert code and code.startswith("%%distribute --recommend\n# %dl_template: "), code
    return code


def _train(shell, code, first_line="%%distribute -n 2 --no-plot"):
    code = code.replace("%%distribute --recommend", first_line, 1)
    result = shell.run_cell(code, store_history=False)
    assert result.success, result.error_in_exec or result.error_before_exec
    return shell.user_ns["model"], shell.user_ns["history"]


def _digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    order = np.random.default_rng(0).permutation(len(data.target))
    return data.images[order], data.target[order]


def _accuracy(model, x, y):
    p = model.predict(x, verbose=0)
    guess = (p[:, 0] > 0.5).astype(int) if p.shape[1] == 1 else p.argmax(axis=1)
    return float(np.mean(guess == y))


def _majority(y):
    return np.bincount(y).max() / len(y)


def test_tabular_classification(shell):
    images, y = _digits()
    x = images.reshape(len(y), -1)  # 64 pixel features, 0..16
    shell.user_ns.update(x_train=x[:1400], y_train=y[:1400])
    code = _written_cell(shell, "x_train y_train")
    assert "-> tabular" in code and "10 classes" in code and "sparse_categorical_crossentropy" in code
    model, history = _train(shell, code)
    accuracy = _accuracy(model, x[1400:], y[1400:])
    assert accuracy > 0.85 and accuracy > _majority(y[1400:]) + 0.5, accuracy


def test_tabular_regression(shell):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1200, 8)).astype("float32")
    y = (x @ rng.normal(size=8) + 0.5 * np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=1200)).astype("float32")
    shell.user_ns.update(features=x[:1000], target=y[:1000])
    code = _written_cell(shell, "features target")
    assert "-> tabular" in code and "regression" in code and "loss='mse'" in code
    model, _ = _train(shell, code)
    mse = float(np.mean((model.predict(x[1000:], verbose=0)[:, 0] - y[1000:]) ** 2))
    baseline = float(np.mean((y[1000:] - y[:1000].mean()) ** 2))  # predicting the mean
    assert mse < 0.2 * baseline, (mse, baseline)


def test_images_cnn(shell):
    images, y = _digits()
    shell.user_ns.update(images=images[:1400], labels=y[:1400])
    code = _written_cell(shell, "images labels")
    assert "-> image" in code and "Conv2D" in code and "Rescaling(1 / 16)" in code
    model, _ = _train(shell, code)
    accuracy = _accuracy(model, images[1400:], y[1400:])
    assert accuracy > 0.85, accuracy


def _waves(n, rng):
    """Three classes by the frequency of a noisy sine (random phase), plus a pure-noise channel."""
    y = rng.integers(0, 3, n)
    t = np.linspace(0, 1, 40)
    freq = np.array([1.0, 2.5, 5.0])[y][:, None]
    signal = np.sin(2 * np.pi * freq * t + rng.uniform(0, 2 * np.pi, (n, 1))) + 0.3 * rng.normal(size=(n, 40))
    return np.stack([signal, rng.normal(size=(n, 40))], axis=-1).astype("float32"), y


def test_sequence_classification(shell):
    rng = np.random.default_rng(2)
    x, y = _waves(1200, rng)
    shell.user_ns.update(series=x[:1000], kinds=y[:1000])
    code = _written_cell(shell, "series kinds")
    assert "-> sequence" in code and "Conv1D" in code and "3 classes" in code
    model, _ = _train(shell, code)
    accuracy = _accuracy(model, x[1000:], y[1000:])
    assert accuracy > 0.8 and accuracy > _majority(y[1000:]) + 0.3, accuracy


def test_token_ids_binary(shell):
    """Label: does token 7 occur in the sentence."""
    rng = np.random.default_rng(3)
    x = rng.integers(1, 50, (1200, 20))
    x[x == 7] = 8
    y = rng.integers(0, 2, 1200)
    x[np.arange(1200)[y == 1], rng.integers(0, 20, int(y.sum()))] = 7
    shell.user_ns.update(tokens=x[:1000], has_seven=y[:1000])
    code = _written_cell(shell, "tokens has_seven")
    assert "-> tokens" in code and "Embedding(50, 64)" in code and "binary_crossentropy" in code
    model, _ = _train(shell, code)
    accuracy = _accuracy(model, x[1000:], y[1000:])
    assert accuracy > 0.9 and accuracy > _majority(y[1000:]) + 0.3, accuracy


def test_written_cell_runs_unchanged_with_recommend(shell):
    images, y = _digits()
    x = images.reshape(len(y), -1)
    shell.user_ns.update(x_train=x[:1400], y_train=y[:1400])
    code = _written_cell(shell, "x_train y_train --epochs 5")
    model, history = _train(shell, code, first_line="%%distribute --recommend --no-plot")
    assert len(history.history["loss"]) == 5
    assert _accuracy(model, x[1400:], y[1400:]) > 0.8


def test_kind_rules():
    rng = np.random.default_rng(0)
    assert describe(rng.random((50, 4)), rng.random(50)).kind == "tabular"
    assert describe(rng.random((50, 28, 28)), rng.integers(0, 3, 50)).kind == "image"
    assert describe(rng.random((50, 32, 32, 3)) * 255, rng.integers(0, 3, 50)).scale == 255
    chw = describe(rng.random((50, 3, 32, 32)), rng.integers(0, 3, 50))
    assert chw.kind == "image" and chw.channels_first
    assert describe(rng.random((50, 100, 3)), rng.integers(0, 3, 50)).kind == "sequence"
    assert describe(rng.integers(0, 9, (50, 12)), rng.integers(0, 3, 50)).kind == "tokens"
    onehot = describe(rng.random((50, 4)), np.eye(3)[rng.integers(0, 3, 50)])
    assert (onehot.task, onehot.classes) == ("onehot", 3)
    assert describe(rng.random((50, 4)), rng.random((50, 2))).outputs == 2
    assert describe(rng.random((50, 4)), rng.integers(0, 3, 50), task="regression").task == "regression"
    assert describe(rng.random((50, 8)), rng.integers(0, 9, 50), kind="sequence").kind == "sequence"


@pytest.mark.parametrize(
    "setup, line, message",
    [
        ({}, "nope y", "no variable named 'nope'"),
        ({"a": np.zeros((10, 3)), "b": np.zeros(9)}, "a b", "X has 10 samples but Y has 9"),
        ({"a": np.zeros((10, 2, 2, 2, 2)), "b": np.zeros(10)}, "a b", "X has shape (10, 2, 2, 2, 2)"),
        ({"a": ["x"] * 10, "b": np.zeros(10)}, "a b", "X must be a NumPy array"),
        ({"a": np.zeros((10, 3)), "b": np.zeros(10)}, "a b --kind video", "invalid choice: 'video'"),
    ],
)
def test_bad_input_is_one_line(shell, capsys, setup, line, message):
    shell.user_ns.update({"y": np.zeros(3), **setup})
    shell.rl_next_input = None
    shell.run_cell(f"%dl_template {line}", store_history=False)
    err = capsys.readouterr()
    text = err.out + err.err
    assert message in text and "Traceback" not in text, text
    assert shell.rl_next_input is None
