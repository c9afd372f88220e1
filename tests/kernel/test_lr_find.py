"""The learning-rate range test on digits: in the kernel, through %lr_find, and distributed on the real cluster."""

import numpy as np
import pytest


def _model(lr=0.001):
    import keras

    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10, activation="softmax")]
    )
    model.compile(keras.optimizers.Adam(lr), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.train_on_batch(np.zeros((2, 64), "float32"), np.zeros(2, "int64"))  # optimizer state exists
    return model


def _state(model):
    return [v.numpy().copy() for v in model.variables] + [v.numpy().copy() for v in model.optimizer.variables]


def test_lr_find_in_the_kernel_restores_the_model_and_suggests_a_sane_rate(digits):
    import jupyter_dl

    model = _model()
    before = _state(model)
    result = jupyter_dl.lr_find(model, digits["x_train"], digits["y_train"], steps=80, n=1, show=False)
    assert 1e-4 < result.suggestion < 1.0, result.suggestion
    # The sweep stopped at divergence, before the last planned step, and the smoothed loss fell first.
    assert len(result.lrs) < 80 and min(result.smoothed) < result.smoothed[0] * 0.9
    for a, b in zip(before, _state(model)):
        np.testing.assert_array_equal(a, b)
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.001)
    assert any(shape["type"] == "line" for shape in result.figure.to_dict()["layout"]["shapes"])  # suggestion


def test_lr_find_magic_binds_and_reports(shell, digits, capsys):
    shell.user_ns.update(digits)
    shell.user_ns["model"] = _model()
    result = shell.run_cell("suggested = %lr_find model --data x_train,y_train --steps 60 -n 1", store_history=False)
    assert result.success, result.error_in_exec
    assert 1e-4 < shell.user_ns["suggested"] < 1.0
    assert "suggested learning rate" in capsys.readouterr().out
    bad = shell.run_cell("%lr_find model --data x_train", store_history=False)
    assert not bad.success and "X,Y" in str(bad.error_in_exec)


def test_lr_find_runs_distributed_on_the_cluster(dl_session, digits, capsys):
    import jupyter_dl

    model = _model()
    before = _state(model)
    result = jupyter_dl.lr_find(model, digits["x_train"], digits["y_train"], steps=60, n=2, show=False)
    assert result.ranks == 2
    assert 1e-4 < result.suggestion < 1.0, result.suggestion
    assert "ran on 2 ranks" in capsys.readouterr().out
    for a, b in zip(before, _state(model)):  # the notebook's model was never touched
        np.testing.assert_array_equal(a, b)
    assert dl_session.jobs.all()[-1].name == "lr_find" and dl_session.jobs.all()[-1].state == "succeeded"
