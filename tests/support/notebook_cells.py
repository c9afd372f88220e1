"""Notebook cells run through a real IPython shell with the extension loaded, as the tutorial tests write them:
plain cells for definitions and data, `%%distribute -n 2` on the training cell."""

import math
import os

from IPython.utils.capture import capture_output


def cell(shell, code, distribute=False, backend=None):
    """Runs one notebook cell; fails on an error, a name that did not come back or ranks that trained apart.
    Returns the notebook's namespace. The tutorials run on Horovod unless a test names a backend;
    JDL_TEST_BACKEND=tf runs them all on TensorFlow's collectives (what a pip install without Horovod gets)."""
    backend = backend or os.environ.get("JDL_TEST_BACKEND", "horovod")
    header = f"%%distribute -n 2 --backend {backend}\n" if distribute else ""
    with capture_output() as shown:
        result = shell.run_cell(header + code, store_history=False)
    text = shown.stdout + shown.stderr
    assert result.success, f"{result.error_before_exec or result.error_in_exec!r}\n{text[-3000:]}"
    assert "did not come back" not in text, text
    assert "the ranks trained apart" not in text, text
    return shell.user_ns


def close(distributed, one, factor, what):
    """Two ranks' value within `factor` of one process's (both finite)."""
    assert math.isfinite(distributed) and math.isfinite(one), (what, distributed, one)
    assert one / factor <= distributed <= one * factor, f"{what}: two ranks {distributed}, one process {one}"


def forget_cell_names(shell):
    """Drop what cells bound in the shell's namespace (IPython's own names stay): the next test starts clean."""
    for name in [
        n for n in shell.user_ns if not n.startswith("_") and n not in ("In", "Out", "exit", "quit", "get_ipython")
    ]:
        shell.user_ns.pop(name, None)
