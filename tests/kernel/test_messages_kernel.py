"""What a notebook shows around a job, in a real Jupyter kernel (issue 30): no line of TensorFlow's native log after
`%load_ext jupyter_dl` (neither from the user's `import keras` nor from jupyter-dl's own TensorFlow use when the
model comes back), and `%dl_cluster stop` says only that the cluster stopped, even when another process removes the
engines' log files as ipyparallel's server extension does."""

import os
import re
import threading
import time

import pytest
from jupyter_client.manager import start_new_kernel

from jupyter_dl.jobs.store import JobStore
from jupyter_dl.server.service import JobService

# TensorFlow's C++ log lines (absl's form: severity and date, e.g. "I0000 00:00:1732... cpu_feature_guard.cc:...]")
NATIVE_LINE = re.compile(r"^[IWEF]\d{4} |cuda_|cuInit|absl::InitializeLog", re.MULTILINE)

DATA = """
import numpy as np
import keras
x = np.random.default_rng(0).random((256, 8)).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
"""

TRAIN = """%%distribute -n 2 --name quiet
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
"""

# Between ipyparallel's check that an engine's log file exists and its removal, the file goes: what ipyparallel's
# server extension (or the engine's own exit callback) does when it cleans up the same cluster at the same moment.
RACE = """
import os
_isfile = os.path.isfile
def _isfile_then_removed_elsewhere(path):
    found = _isfile(path)
    name = os.path.basename(str(path))
    if found and name.startswith(("ipengine-", "ipcontroller-")) and name.endswith(".log"):
        os.remove(path)
    return found
os.path.isfile = _isfile_then_removed_elsewhere
"""


def _texts(messages, rich=True):
    """Every text a cell showed: streams, errors' tracebacks and (rich) rich output's text form."""
    for msg in messages:
        content, kind = msg["content"], msg["msg_type"]
        if kind == "stream":
            yield content["text"]
        elif kind in ("display_data", "execute_result", "update_display_data") and rich:
            yield content.get("data", {}).get("text/plain", "")
        elif kind == "error":
            yield "\n".join(content["traceback"])


@pytest.fixture(scope="module")
def kernel_manager():
    """A real ipykernel as JupyterLab starts one, with no TensorFlow log level in its environment (a user's). Its
    job store is this process's (the same Jupyter data directory), as the server's is."""
    # ipykernel shows what is written to descriptor 2 in the cell, except under pytest (PYTEST_CURRENT_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PYTEST_CURRENT_TEST")}
    manager, client = start_new_kernel(kernel_name="python3", env=env)
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(kernel_manager):
    return kernel_manager[1]


def run(client, code, timeout=300, rich=True):
    """(status, what the cell showed); rich=False: its text only, not the live view's widgets and figures."""
    messages = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=messages.append)
    return reply["content"]["status"], "\n".join(_texts(messages, rich))


def test_no_tensorflow_log_line_in_the_notebook(kernel):  # first: before TensorFlow loads in the kernel
    shown = {}
    for name, code in [("load", "%load_ext jupyter_dl"), ("data", DATA), ("train", TRAIN)]:
        status, shown[name] = run(kernel, code)
        assert status == "ok", (name, shown[name])
    status, shown["use"] = run(kernel, "print(model.predict(x[:4], verbose=0).shape, len(history.history['loss']))")
    assert status == "ok" and "(4, 2) 2" in shown["use"], shown["use"]
    native = {name: [line for line in text.splitlines() if NATIVE_LINE.search(line)] for name, text in shown.items()}
    assert not any(native.values()), native


def _when_running(name, then, timeout=120):
    """Call then(job) once the kernel's job `name` runs its cell on the ranks."""

    def wait():
        store = JobStore()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = next((j for j in store.list() if j.name == name and j.state == "running"), None)
            if job is not None:
                time.sleep(1.0)  # the ranks are in the cell's loop
                then(job)
                return
            time.sleep(0.1)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


ENDLESS = """%%distribute -n 2 --manual --name {name}
import time
x = "from the job"
while True:
    time.sleep(0.05)
"""


def _stopped_cell(client, name, stop):
    assert run(client, "%load_ext jupyter_dl\nx = 'before'")[0] == "ok"
    stopper = _when_running(name, stop)
    status, shown = run(client, ENDLESS.format(name=name), rich=False)
    stopper.join(10)
    lines = [line for line in shown.splitlines() if line.strip()]
    assert status == "error"  # still an error: "Run all" stops here
    assert run(client, "print(x)")[1].strip() == "before"
    return lines


def test_the_stop_button_says_one_line(kernel_manager):
    manager, client = kernel_manager
    lines = _stopped_cell(client, "long-run", lambda job: manager.interrupt_kernel())
    assert len(lines) == 1, lines  # no traceback through magics.py, api.py, runner.py, outcomes.py
    assert "[jupyter-dl] job 'long-run' (" in lines[0] and ") was interrupted after " in lines[0], lines
    assert lines[0].endswith("; all 2 ranks stopped; the notebook's names were not updated"), lines


def test_a_cancel_from_the_jobs_panel_says_one_line(kernel_manager):
    manager, client = kernel_manager
    lines = _stopped_cell(
        client, "panel-cancel", lambda job: JobService(JobStore()).cancel(job.id, source="the jobs panel")
    )
    assert len(lines) == 1, lines
    assert "[jupyter-dl] job 'panel-cancel' (" in lines[0] and "was cancelled from the jobs panel after" in lines[0]
    assert lines[0].endswith("; all 2 ranks stopped; the notebook's names were not updated"), lines


TIMED = """%%distribute -n 2 --no-plot
%%time
%matplotlib inline
%env JDL_SET_BY_A_LINE_MAGIC=yes
import os
seen_on_rank = os.environ.get("JDL_SET_BY_A_LINE_MAGIC")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
history = model.fit(x, y, batch_size=32, epochs=1, verbose=0)
"""


def test_time_and_the_notebook_s_line_magics_in_a_distributed_cell(kernel):
    """`%%time` under `%%distribute` times the job as IPython times a cell; `%matplotlib inline` and `%env` set up
    the notebook (the environment then reaches the ranks); a shell line is still refused in one line."""
    assert run(kernel, "%load_ext jupyter_dl")[0] == "ok" and run(kernel, DATA)[0] == "ok"
    status, shown = run(kernel, TIMED, rich=False)
    assert status == "ok", shown
    assert re.search(r"CPU times: user .+, sys: .+, total: .+\nWall time: \d", shown), shown
    status, shown = run(kernel, "import matplotlib; print(seen_on_rank, matplotlib.get_backend())")
    assert status == "ok" and shown.split()[0] == "yes" and "inline" in shown.split()[1], shown
    status, shown = run(kernel, "%%distribute -n 2\n!ls\nx.sum()", rich=False)
    assert status == "error" and "line 2 is IPython syntax (!ls)" in shown, shown


def test_cluster_stop_says_only_that(kernel):
    status, shown = run(kernel, "%dl_cluster status")
    if "no cluster" in shown:  # run alone: the job above would have started it
        status, shown = run(kernel, "%dl_cluster start -n 2")
    assert status == "ok" and "engines on" in shown, shown
    assert run(kernel, RACE)[0] == "ok"
    status, stopped = run(kernel, "%dl_cluster stop")
    assert status == "ok" and stopped.strip() == "cluster stopped", stopped
