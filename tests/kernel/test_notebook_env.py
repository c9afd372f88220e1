"""Which of the notebook's environment variables go to the ranks (kernel/notebook_env.py)."""

import pytest

from jupyter_dl.kernel import notebook_env

pytestmark = pytest.mark.fast


def test_a_variable_a_cell_set_or_changed_goes_and_placement_and_host_settings_stay(monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "digits")  # set by a cell
    monkeypatch.setenv("HOME", "/somewhere/else")  # changed, but this host's
    for name in ("CUDA_VISIBLE_DEVICES", "HOROVOD_FUSION_THRESHOLD", "TF_CONFIG", "SLURM_JOB_ID", "LD_LIBRARY_PATH"):
        monkeypatch.setenv(name, "set by the notebook")
    sent = notebook_env.changed()
    assert sent["WANDB_PROJECT"] == "digits"
    assert not {"HOME", "CUDA_VISIBLE_DEVICES", "HOROVOD_FUSION_THRESHOLD", "TF_CONFIG", "SLURM_JOB_ID"} & set(sent)
    assert "LD_LIBRARY_PATH" not in sent


def test_a_variable_the_process_started_with_is_not_sent_again(monkeypatch):
    name, value = next(iter(notebook_env._AT_START.items()))
    monkeypatch.setenv(name, value)
    assert name not in notebook_env.changed()


def test_credentials_stay_in_the_kernel_unless_passed_with_secret(monkeypatch):
    # Sent as plain variables they would print unredacted in the ranks' output and logs; --secret sends and redacts.
    for name in ("JDL_TEST_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "OPENAI_KEY"):
        monkeypatch.setenv(name, "s3cr3t")
    monkeypatch.setenv("KERAS_HOME", "/data/keras")
    sent = notebook_env.changed()
    assert sent.get("KERAS_HOME") == "/data/keras"
    assert not {"JDL_TEST_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "OPENAI_KEY"} & set(sent)
