"""What a cell says when a rank fails (issue 30), through a real IPython shell on real engines, on both backends: the
failing rank's error, with the rank that only stopped because of it said in one line, and a traceback numbered as
the notebook numbers the cell's lines. (The stop button and the jobs panel's cancel: test_messages_kernel.py.)"""

import pytest

from jupyter_dl.errors import RankError

RANK_1_FAILS = """%%distribute -n 2 --backend {backend} --name boom-{backend}
import keras
from jupyter_dl import collectives
if collectives.rank() == 1:
    raise ValueError("boom")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
"""


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_a_rank_stopped_because_another_failed_says_so(shell, backend):
    """Rank 1 fails in the cell; rank 0 ends the cell and waits in jupyter-dl's own end-of-job check (the ranks'
    weight fingerprints), which fails because rank 1 left. Only rank 1's error is the cell's."""
    result = shell.run_cell(RANK_1_FAILS.format(backend=backend), store_history=False)
    error = result.error_in_exec
    assert isinstance(error, RankError), error
    assert (error.rank, error.ename, error.evalue) == (1, "ValueError", "boom")
    assert error.others == {0: "stopped because rank 1 failed"}
    rendered = "\n".join(error._render_traceback_())
    for leaked in ("fingerprint", "Horovod has been shut down", "UnknownError", "Unavailable", "function_node"):
        assert leaked not in rendered, rendered
    # The traceback numbers the cell's lines as the notebook does: the raise is line 5, the %%distribute line 1.
    assert f'File "<distribute-cell boom-{backend}>", line 5' in rendered, rendered
    assert 'raise ValueError("boom")' in rendered
