"""What the sizing commands print on real engines: `%lr_find` and `%%distribute --recommend` on an ordinary fit cell
say nothing about a custom loop (their own training steps are not one), a real custom loop still gets that note, and
`%dl_recommend` on a small model shows units that fit and no Keras warning jupyter-dl caused."""

import re
import warnings

from digits_cells import DIGITS_MODEL

CUSTOM_LOOP_NOTE = "updates outside fit (a custom loop)"

FIT_CELL = DIGITS_MODEL + "history = model.fit(x_train, y_train, batch_size=32, epochs=1, verbose=0)\n"

CUSTOM_LOOP_CELL = """
import keras
import tensorflow as tf
keras.utils.set_random_seed(1)
net = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
opt = keras.optimizers.SGD(0.01)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
for start in range(0, 96, 32):
    with tf.GradientTape() as tape:
        loss = loss_fn(y_train[start:start + 32], net(x_train[start:start + 32], training=True))
    opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
"""


def _compiled_model():
    import keras

    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10, activation="softmax")]
    )
    model.compile(keras.optimizers.Adam(0.001), "sparse_categorical_crossentropy")
    return model


def _output(capsys):
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_lr_find_on_the_cluster_prints_no_custom_loop_note(shell, digits, capsys):
    shell.user_ns.update(digits)
    shell.user_ns["model"] = _compiled_model()
    result = shell.run_cell("suggested = %lr_find model --data x_train,y_train --steps 20 -n 2", store_history=False)
    assert result.success, result.error_in_exec
    text = _output(capsys)
    assert "ran on 2 ranks" in text  # the sweep was distributed, under the Keras interception
    assert CUSTOM_LOOP_NOTE not in text, text


def test_recommend_on_an_ordinary_fit_cell_prints_no_custom_loop_note(shell, digits, capsys):
    shell.user_ns.update(digits)
    result = shell.run_cell("%%distribute --recommend --name noteless\n" + FIT_CELL, store_history=False)
    assert result.success, result.error_in_exec
    text = _output(capsys)
    assert "recommendation:" in text  # the probe ran the cell up to fit and timed the model's steps
    assert CUSTOM_LOOP_NOTE not in text, text


def test_a_real_custom_loop_still_gets_the_note_once(shell, digits, capsys):
    shell.user_ns.update(digits)
    result = shell.run_cell("%%distribute -n 2\n" + CUSTOM_LOOP_CELL, store_history=False)
    assert result.success, result.error_in_exec
    assert _output(capsys).count(f"SGD {CUSTOM_LOOP_NOTE}") == 1


def test_dl_recommend_on_a_small_model_shows_fitting_units_and_no_keras_warning(shell, digits, capsys):
    shell.user_ns.update(digits)
    shell.user_ns["model"] = _compiled_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = shell.run_cell("plan = %dl_recommend model --data x_train,y_train", store_history=False)
    assert result.success, result.error_in_exec
    text = _output(capsys) + "\n".join(str(w.message) for w in caught)
    assert "Skipping variable loading" not in text, text
    table = shell.user_ns["plan"].as_text()
    assert not re.search(r"\b0(\.0)?s\b|\b0 MiB\b", table), table
    assert re.search(r"\d(ms|µs)\b", table) and re.search(r"\d (KiB|MiB)\b", table), table
