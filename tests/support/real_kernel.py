"""A real ipykernel, started as JupyterLab starts one, for tests of what happens in a notebook's kernel: its cells'
text and status, and which processes it started."""

import contextlib
import os

import psutil
from jupyter_client.manager import start_new_kernel


@contextlib.contextmanager
def fresh_kernel(*config):
    """(client, pid) of a new kernel; `config`: command-line traitlets settings such as
    "--EngineCluster.start_on_load=False". Shut down (and whatever it started checked gone by the caller) after."""
    # ipykernel shows what is written to descriptor 2 in the cell, except under pytest (PYTEST_CURRENT_TEST)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    manager, client = start_new_kernel(kernel_name="python3", env=env, extra_arguments=list(config))
    try:
        pid = int(run(client, "import os; print(os.getpid())")[1])
        yield client, pid, manager
    finally:
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)


def run(client, code, timeout=300):
    """(status, text the cell showed: its streams and its error's traceback)."""
    shown = []

    def keep(msg):
        content = msg["content"]
        if msg["msg_type"] == "stream":
            shown.append(content["text"])
        elif msg["msg_type"] == "error":
            shown.append("\n".join(content["traceback"]))

    reply = client.execute_interactive(code, timeout=timeout, output_hook=keep)
    return reply["content"]["status"], "".join(shown).strip()


def cluster_processes(kernel_pid):
    """The processes of the clusters a kernel started that run now: controllers, engines, their helpers and
    jupyter-dl's reaper (all started by the kernel, so its descendants)."""
    try:
        below = psutil.Process(kernel_pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for proc in below:
        with contextlib.suppress(psutil.Error):
            if any(
                part.startswith(("ipyparallel", "jupyter_dl.cluster", "jupyter_dl.runtime")) for part in proc.cmdline()
            ):
                found.append(proc)
    return found


def launched_engines(processes) -> int:
    """How many engines ipyparallel launched among `processes`: plain ones, or the stand-ins of forked ones."""
    return sum(
        any(part in ("ipyparallel.engine", "jupyter_dl.runtime.forked_engine") for part in p.cmdline())
        for p in processes
    )
