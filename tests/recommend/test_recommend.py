"""Resource recommendations: model features, the probe on real engines, %dl_recommend and %%distribute --recommend."""

import pytest

CELL = """
import keras
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=2)
"""


def test_features_count_flops_params_and_layers_of_a_known_model():
    import keras

    from jupyter_dl.wire.model_features import model_features

    model = keras.Sequential(
        [keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(), keras.layers.Dense(10)]
    )
    f = model_features(model)
    conv = 2 * (3 * 3 * 1) * (6 * 6 * 4)  # MACs per output position x positions x channels, times two
    dense = 2 * (6 * 6 * 4) * 10
    assert f.flops_by_group["conv"] == conv and f.flops_by_group["dense"] == dense
    assert f.params == (3 * 3 * 1 * 4 + 4) + (144 * 10 + 10) and f.layers == 3 and f.input_size == 64
    assert f.kinds == {"Conv2D": 1, "Flatten": 1, "Dense": 1}
    # weights by group: the estimator prices a dense weight (read by matmuls, then updated) apart from others
    assert f.params_by_group == {
        "dense": 144 * 10 + 10,
        "conv": 3 * 3 * 1 * 4 + 4,
        "rnn": 0,
        "attention": 0,
        "other": 0,
    }


def test_dl_recommend_probes_the_model_on_an_engine(shell, digits):
    import keras

    shell.user_ns.update(digits)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10, activation="softmax")]
    )
    model.compile(keras.optimizers.Adam(0.001), "sparse_categorical_crossentropy")
    shell.user_ns["model"] = model
    result = shell.run_cell(
        "plan = %dl_recommend model --data x_train,y_train --epochs 5 --deadline 10m", store_history=False
    )
    assert result.success, result.error_in_exec
    rec = shell.user_ns["plan"]
    assert rec.chosen.kind == "cpu" and rec.chosen.basis == "measured" and rec.chosen.meets_deadline
    assert 1 <= rec.chosen.ranks <= 2 and rec.chosen.batch_size in (32, 64, 128)
    assert rec.chosen.learning_rate == pytest.approx(0.001 * rec.chosen.global_batch / 32)
    assert "recommendation:" in rec.as_text() and "<table>" in rec.as_html()
    assert all(alt.why_not for alt in rec.alternatives)


def test_distribute_recommend_probes_the_cell_then_runs_the_plan(shell, digits, capsys):
    from jupyter_dl.kernel import api

    shell.user_ns.update(digits)
    result = shell.run_cell("%%distribute --recommend --deadline 30m --name sized\n" + CELL, store_history=False)
    assert result.success, result.error_in_exec
    out = capsys.readouterr().out
    assert "recommendation: lowest energy within the deadline of 30m00s" in out
    jobs = api.session().jobs.all()
    probe, job = jobs[-2], jobs[-1]
    assert probe.name == "sized-probe" and probe.state == "succeeded" and probe.n == 1
    assert job.name == "sized" and job.state == "succeeded"
    assert len(shell.user_ns["history"].history["loss"]) == 2  # the cell ran for real, with the plan


def test_recommend_refuses_bad_input(shell):
    assert not shell.run_cell("%%distribute --deadline 30m\nx = 1", store_history=False).success
    nofit = shell.run_cell("%%distribute -n auto\nx = 1", store_history=False)
    assert not nofit.success and "without calling model.fit" in str(nofit.error_in_exec)
