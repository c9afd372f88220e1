"""--restarts / --checkpoint-dir on real engines: nothing before the last checkpoint is lost.

The fault-injection suite covers a restart after an engine death and after an exception; these cover what a
checkpoint must also do: survive a job that failed for good (the next run of the cell resumes it), restore a fit that
had finished when a later line of the cell failed, and refuse a checkpoint that does not fit the model.
"""

import os

import numpy as np
import pytest

import jupyter_dl
from jupyter_dl.errors import RankError

TRAIN = """
import os
import keras
import numpy as np
from jupyter_dl import collectives
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(WIDTH, activation="relu"), keras.layers.Dense(1)])
model.compile(keras.optimizers.Adam(0.01), "mse")

class Crash(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == CRASH_AT and collectives.rank() == 1:
            raise RuntimeError(f"crashed after epoch {epoch}")

history = model.fit(x, y, epochs=5, batch_size=16, verbose=0, callbacks=[Crash()])
"""


@pytest.fixture
def data():
    x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
    return {"x": x, "y": x.sum(1)}


def _cell(crash_at=-1, width=16, after=""):
    return TRAIN.replace("CRASH_AT", str(crash_at)).replace("WIDTH", str(width)) + after


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_a_failed_run_is_resumed_by_the_next_run_of_the_cell(dl_session, tmp_path, data, capsys, backend):
    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(RankError, match="crashed after epoch 2"):
        jupyter_dl.distribute(_cell(crash_at=2), n=2, namespace=dict(data), checkpoint_dir=ckpt, backend=backend)
    assert os.listdir(ckpt) == ["fit-0.npz"]  # unfinished: three epochs saved, no temporary file left behind
    namespace = dict(data)
    result = jupyter_dl.distribute(_cell(), n=2, namespace=namespace, checkpoint_dir=ckpt, backend=backend)
    assert "resuming from" in capsys.readouterr().out
    history = namespace["history"]
    assert history.epoch == [0, 1, 2, 3, 4]  # continuous: 3 epochs from the checkpoint, 2 trained now
    loss = history.history["loss"]
    assert loss[3] < loss[0] / 2, loss  # training went on from the saved weights, not from scratch
    assert result.state.epoch_logs and len(result.state.epoch_logs) == 2  # this run trained epochs 4 and 5 only
    assert sorted(os.listdir(ckpt)) == ["fit-0.complete.npz"]


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_restart_after_the_fit_finished_restores_it_instead_of_training_again(
    dl_session, tmp_path, data, capsys, backend
):
    ckpt = str(tmp_path / "ckpt")
    after = (
        "\nmarker = os.path.join(CKPT, 'failed-once')\n"
        "if collectives.rank() == 0 and not os.path.exists(marker):\n"
        "    open(marker, 'w').close()\n"
        "    raise RuntimeError('evaluation failed')\n"
        "collectives.allreduce(np.ones(1))\n"
    ).replace("CKPT", repr(ckpt))
    namespace = dict(data)
    result = jupyter_dl.distribute(
        _cell() + after, n=2, namespace=namespace, restarts=1, checkpoint_dir=ckpt, backend=backend
    )
    assert len(result.job.restarts) == 1 and "evaluation failed" in result.job.restarts[0]["reason"]
    assert "resuming from" in capsys.readouterr().out
    assert namespace["history"].epoch == [0, 1, 2, 3, 4]
    assert result.state.restarts[0]["epoch"] == 5  # nothing left to train: the plot resumes at the end


def test_a_checkpoint_of_another_model_is_refused_with_what_to_do(dl_session, tmp_path, data):
    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(RankError):
        jupyter_dl.distribute(_cell(crash_at=1), n=2, namespace=dict(data), checkpoint_dir=ckpt)
    with pytest.raises(RankError, match="does not fit this model.*delete it or pass another --checkpoint-dir"):
        jupyter_dl.distribute(_cell(width=32), n=2, namespace=dict(data), checkpoint_dir=ckpt)
