"""The Slurm pool sizes an allocation's nodes from sinfo: sinfo failing must not read as "Slurm has no GPUs"."""

import shutil

import pytest

from jupyter_dl.pool.gang import PoolError
from jupyter_dl.pool.slurm import SlurmPool

pytestmark = pytest.mark.fast  # the quick tier: sinfo only, no Slurm running


@pytest.mark.skipif(not shutil.which("sinfo"), reason="sinfo missing: run `make setup` (Debian's slurm-client)")
def test_sinfo_failing_is_said_as_such_not_as_no_gpus(monkeypatch, tmp_path):
    (tmp_path / "slurm.conf").write_text("")  # refused at once (a missing one is retried for a minute)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    with pytest.raises(PoolError, match=r"^sinfo failed \(.+\): check that Slurm's controller answers"):
        SlurmPool().batch_template(2, "train", gpus=True)
