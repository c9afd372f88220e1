"""Failures on real engines that must never hang the notebook."""

import time

import pytest

import jupyter_dl
from jupyter_dl.errors import RankError

DIES_IN_ALLREDUCE = """
import os, time
import numpy as np
import horovod.tensorflow as hvd
if hvd.rank() == 1:
    time.sleep(0.5)
    os._exit(3)            # the engine process vanishes while rank 0 waits in the allreduce below
hvd.allreduce(np.ones(3), name="never_completed")
"""


def _size():
    import horovod.tensorflow as hvd

    return hvd.size()


def test_engine_killed_mid_allreduce_is_reported_and_repaired(dl_session):
    assert jupyter_dl.distribute(_size, n=2) == 2  # warm engines
    started = time.monotonic()
    with pytest.raises(RankError) as err:
        jupyter_dl.distribute(DIES_IN_ALLREDUCE, n=2, namespace={}, manual=True)
    took = time.monotonic() - started
    assert err.value.rank == 1 and err.value.ename == "EngineError"
    assert 0 in err.value.others  # rank 0 was released from its allreduce, not left waiting
    assert took < 10, f"time to error {took:.1f}s"
    print(f"time to error after an engine died: {took:.2f}s")
    # The dead engine was replaced: the next job gets its 2 ranks.
    assert jupyter_dl.distribute(_size, n=2) == 2
