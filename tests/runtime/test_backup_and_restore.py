"""Keras' BackupAndRestore example in a `%%distribute -n 2` cell (real 2-rank jobs, both backends): a fit interrupted
at epoch 4 by a callback, caught in the cell, then the same fit again resumes from the backup. Only rank 0 keeps
the backup, so only rank 0 resumed at epoch 4 while rank 1 started again at 0: the ranks ran different epochs and
waited on each other until the job's timeout. Every rank now starts where rank 0 resumes."""

import pytest
from notebook_cells import cell, close

SETUP = """
import keras

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])


class InterruptingCallback(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 4:
            raise RuntimeError('Interrupting!')


backup_callback = keras.callbacks.BackupAndRestore(backup_dir=backup_dir)
"""

FIT = """
try:
    model.fit(x_train, y_train, epochs=10, batch_size=64, callbacks=[backup_callback, InterruptingCallback()],
              verbose=0)
except Exception:
    print('Training got interrupted')
history = model.fit(x_train, y_train, epochs=10, batch_size=64, callbacks=[backup_callback], verbose=0)
"""


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_an_interrupted_fit_resumes_from_rank_0_s_backup_on_every_rank(shell, digits, tmp_path, backend):
    shell.user_ns.update(digits, backup_dir=str(tmp_path / "one"))
    cell(shell, SETUP)
    one = cell(shell, FIT)["history"]
    assert one.epoch == [4, 5, 6, 7, 8, 9]

    shell.user_ns["backup_dir"] = str(tmp_path / "two")
    cell(shell, SETUP)
    two = cell(shell, f"%%distribute -n 2 --timeout 120 --backend {backend}\n" + FIT)["history"]
    assert two.epoch == one.epoch, two.epoch
    close(two.history["loss"][-1], one.history["loss"][-1], 1.3, "final loss")
    assert not (tmp_path / "two").exists()  # removed at the end of the fit that finished, as in one process
