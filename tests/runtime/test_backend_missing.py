"""Horovod missing, or built without TensorFlow: a job that asked for Horovod (`--backend horovod`, or a `--manual`
cell, which calls Horovod's API itself) gets one line saying which setup command fixes it, and nothing is started;
an unchanged cell (`--backend auto`, the default) runs on TensorFlow's own collectives and says so once.

Each case runs in a fresh interpreter where an import hook makes the named module fail to import, as it does on a
machine without Horovod or with a Horovod built against another TensorFlow (the test process keeps its Horovod).
"""

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = sys.argv[1]

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == BLOCKED or name.startswith(BLOCKED + "."):
                raise ImportError(f"{name}: undefined symbol: _ZN10tensorflow8OpKernel (injected by the test)")

    sys.meta_path.insert(0, Block())
    import jupyter_dl
    from jupyter_dl.kernel import api
    from jupyter_dl.errors import BackendMissing
    try:
        jupyter_dl.distribute("x = 1", n=2, namespace={}, **eval(sys.argv[2]))
    except BackendMissing as exc:
        print("ERROR:", exc)
    print("CLUSTER STARTED:", api.session().cluster.client is not None)
""")

AUTO = textwrap.dedent("""
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "horovod" or name.startswith("horovod."):
                raise ImportError(f"No module named {name!r} (injected by the test)")
    sys.meta_path.insert(0, Block())
    import numpy as np
    import jupyter_dl
    from jupyter_dl.kernel import api
    namespace = {"x": np.random.default_rng(0).normal(size=(256, 4)).astype("float32")}
    namespace["y"] = namespace["x"].sum(1)
    try:
        jupyter_dl.distribute(
            "import keras\\n"
            "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\\n"
            "model.compile('sgd', 'mse')\\n"
            "history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)\\n",
            n=2, namespace=namespace,
        )
        job = api.session().jobs.all()[-1]
        print("RESULT:", job.state, job.options["backend"], namespace["history"].history["loss"])
    finally:
        api.shutdown()
""")


@pytest.mark.parametrize(
    "blocked, asked, needle",
    [
        ("horovod", {"backend": "horovod"}, "Horovod is not installed"),
        ("horovod.tensorflow", {"backend": "horovod"}, "Horovod cannot load its TensorFlow ops"),
        ("horovod", {"manual": True}, "--manual cells call Horovod's own API: Horovod is not installed"),
    ],
)
def test_a_job_that_needs_horovod_names_the_setup_command_and_starts_nothing(blocked, asked, needle):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, blocked, repr(asked)], capture_output=True, text=True, timeout=300
    )
    lines = done.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERROR:")]
    assert len(errors) == 1, done.stdout + done.stderr
    assert needle in errors[0] and "jupyter-dl install-horovod" in errors[0], errors[0]
    assert "CLUSTER STARTED: False" in lines


def test_without_horovod_an_unchanged_cell_runs_on_tensorflows_collectives_and_says_so_once():
    done = subprocess.run([sys.executable, "-c", AUTO], capture_output=True, text=True, timeout=600)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT:")]
    assert len(results) == 1, done.stdout[-3000:] + done.stderr[-3000:]
    state, backend, losses = results[0].split(" ", 3)[1:]
    assert (state, backend) == ("succeeded", "tf")
    losses = [float(v) for v in losses.strip("[]").split(",")]
    assert losses[-1] < losses[0]
    notes = [line for line in done.stderr.splitlines() if "running on TensorFlow's own collectives" in line]
    assert len(notes) == 1 and "jupyter-dl install-horovod" in notes[0], done.stderr[-3000:]


FIRST_CHECK = textwrap.dedent("""
    import sys
    from jupyter_dl import backends
    print("RESOLVED:", backends.resolve(sys.argv[1], manual=False)[0], "tensorflow" in sys.modules)
""")


def test_a_horovod_build_that_passed_its_check_is_not_checked_again_by_importing_tensorflow(tmp_path):
    """The check imports TensorFlow into the kernel: seconds each new kernel's first cell waited for. A passed check
    is remembered for that build, so the next kernel resolves Horovod without importing TensorFlow; TensorFlow's
    collectives never import it in the kernel."""
    env = {**os.environ, "JUPYTER_DL_CACHE": str(tmp_path)}

    def resolve(backend):
        done = subprocess.run(
            [sys.executable, "-c", FIRST_CHECK, backend], capture_output=True, text=True, timeout=300, env=env
        )
        (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESOLVED:")] or [done.stderr]
        return line

    assert resolve("horovod") == "RESOLVED: horovod True"  # the first check imports it
    assert (tmp_path / "checks" / "horovod-passed.json").exists()
    assert resolve("horovod") == "RESOLVED: horovod False"
    assert resolve("tf") == "RESOLVED: tf False"
