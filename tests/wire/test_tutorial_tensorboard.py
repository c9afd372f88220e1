"""TensorFlow's "Get started with TensorBoard" cells, with only the fit under `%%distribute -n 2` (real 2-rank jobs).

The callback is made in a plain cell with a timestamped log_dir; rank 0 alone writes its event files, where the
notebook's TensorBoard will look, on either backend. Run Horovod first, then TensorFlow's collectives on the same
engines: the callback's `tf.device("cpu:0")` seen in the first job once named a device the second job's context no
longer had (InvalidArgumentError: /job:localhost/replica:0/task:0/device:CPU:0 unknown device).
"""

import glob

SETUP = """
import datetime
import keras
log_dir = "logs/fit/" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
tensorboard_callback = keras.callbacks.TensorBoard(log_dir=log_dir, histogram_freq=1)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
"""

FIT = """%%distribute -n 2 --no-plot --backend {backend}
model.fit(x=x_train, y=y_train, epochs=2, validation_data=(x_test, y_test), callbacks=[tensorboard_callback],
          verbose=0)
"""


def _scalars(path):
    import tensorflow as tf

    names = set()
    for event in tf.compat.v1.train.summary_iterator(path):
        names.update(value.tag for value in event.summary.value)
    return names


def test_tensorboard_logs_of_rank_0_land_in_the_notebook_s_log_dir_on_both_backends(
    shell, digits, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    shell.user_ns.update(digits)
    assert shell.run_cell(SETUP, store_history=False).success
    log_dir = tmp_path / shell.user_ns["log_dir"]
    for runs, backend in enumerate(["horovod", "tf"], 1):
        result = shell.run_cell(FIT.format(backend=backend), store_history=False)
        assert result.success, result.error_in_exec
        for part in ("train", "validation"):
            files = sorted(glob.glob(str(log_dir / part / "events.out.tfevents.*")))
            assert len(files) == runs, (backend, part, files)  # one writer a run: rank 0's
        assert {"epoch_loss", "epoch_accuracy"} <= _scalars(files[-1]), backend
