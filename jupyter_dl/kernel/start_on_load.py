"""Kernel side: `%load_ext jupyter_dl` typed in a cell starts the local cluster in the background
(c.EngineCluster.start_on_load), so the first %%distribute cell does not wait for engines and TensorFlow.

Only a load from a cell counts: a person who types it is about to distribute something. A kernel that loads the
extension from its config (c.InteractiveShellApp.extensions, exec_lines or a startup file) does so for every
notebook, most of which never distribute anything; those start nothing until a job or %dl_cluster start asks.
"""

import sys


def loaded_from_cell(shell) -> bool:
    """Whether the extension is being loaded by a cell the user runs in a Jupyter kernel, not by its start-up.

    IPython gives the display hook the cell's ExecutionResult only while a cell's code runs (run_cell), and never
    while it loads configured extensions (InteractiveShellApp.init_extensions). exec_lines and startup files do
    run as cells, but before the kernel serves any request, so in a kernel the request being served must be the
    user's execute_request too."""
    if getattr(getattr(shell, "displayhook", None), "exec_result", None) is None:
        return False
    kernel = getattr(shell, "kernel", None)
    if kernel is None:  # not a Jupyter kernel: scripts, tests and benchmarks drive IPython and start what they need
        return False
    get_parent = getattr(kernel, "get_parent", None)
    parent = get_parent("shell") if get_parent is not None else {}
    return (parent or {}).get("header", {}).get("msg_type") == "execute_request"


def start_on_load(shell, session):
    """Start the session's cluster in the background when the policy above says so. Never raises: a problem is
    one line now (nothing started), and a failure of the start itself is told by the next command that needs
    the cluster."""
    cluster = session.cluster
    if not cluster.start_on_load or not loaded_from_cell(shell):
        return
    # Not the kernel's own TensorFlow import (runner.warm_up): the user's next cell is likely `import keras`, and two
    # threads importing TensorFlow at once see half-initialised modules (AttributeError: ... DatasetV2).
    try:
        cluster.start_in_background()
    except Exception as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        print(f"[jupyter-dl] the local cluster was not started early ({why})", file=sys.stderr, flush=True)
