"""A successful job keeps what it produced: a real 2-rank job's models, history, source, options and environment are
in its directory of the job store, and jupyter_dl.load_job(ID) gives them back as working objects."""

import numpy as np

import jupyter_dl

CELL = """
import keras
keras.utils.set_random_seed(3)

class Scaled(keras.layers.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}

model = keras.Sequential([keras.Input((64,)), Scaled(0.5), keras.layers.Dense(10, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, epochs=2, batch_size=32, verbose=0)
"""


def _last_job():
    from jupyter_dl.kernel import api

    return api.session().jobs.all()[-1]


def test_a_job_keeps_its_model_history_source_and_environment(shell, digits):
    shell.user_ns.update(digits)
    result = shell.run_cell("%%distribute -n 2 --name kept\n" + CELL, store_history=False)
    assert result.success, result.error_in_exec
    job = _last_job()
    assert job.name == "kept" and job.state == "succeeded"

    saved = jupyter_dl.load_job(job.id)
    # The kept model is the one that came back to the notebook: same predictions on the same input.
    np.testing.assert_allclose(
        saved.model.predict(digits["x_test"], verbose=0),
        shell.user_ns["model"].predict(digits["x_test"], verbose=0),
        rtol=1e-6,
    )
    assert type(saved.model.layers[0]).__name__ == "Scaled"  # the cell's own class, rebuilt
    assert saved.histories["history"]["history"] == shell.user_ns["history"].history
    assert saved.source.strip() == CELL.strip()
    assert saved.options["n"] == 2
    environment = saved.environment
    assert environment["tensorflow"] and environment["keras"] and environment["horovod"]
    assert environment["hosts"] == job.hosts and len(environment["hosts"]) == 2
    assert any("CPU" in device for device in environment["devices"])
    print(f"results kept in {job.timings['results_s'] * 1e3:.0f} ms")


def test_models_over_the_size_limit_are_named_not_kept(shell, digits, capsys):
    from jupyter_dl.kernel import api

    results = api.session().runner.results
    before = results.max_model_mb
    results.max_model_mb = 0.001  # 650 parameters x 4 bytes is over 1 kB
    try:
        shell.user_ns.update(digits)
        result = shell.run_cell("%%distribute -n 2\n" + CELL, store_history=False)
        assert result.success, result.error_in_exec
    finally:
        results.max_model_mb = before
    assert "model 'model' (0 MB) not kept: over c.JobResults.max_model_mb" in capsys.readouterr().err
    saved = jupyter_dl.load_job(_last_job().id)
    assert saved.models == {} and "history" in saved.histories


def test_a_job_without_results_says_why():
    import pytest

    from jupyter_dl.jobs.lookup import UnknownJob

    with pytest.raises(UnknownJob, match="^no job 'no-such-job': see %dl_jobs$"):
        jupyter_dl.load_job("no-such-job")
