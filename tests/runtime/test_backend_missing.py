"""Horovod missing, or built without TensorFlow: one line saying which setup command fixes it, nothing started.

Each case runs in a fresh interpreter where an import hook makes the named module fail to import, as it does on a
machine without Horovod or with a Horovod built against another TensorFlow (the test process keeps its Horovod).
"""

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
        jupyter_dl.distribute("x = 1", n=2, namespace={})
    except BackendMissing as exc:
        print("ERROR:", exc)
    print("CLUSTER STARTED:", api.session().cluster.client is not None)
""")


@pytest.mark.parametrize(
    "blocked, needle",
    [
        ("horovod", "Horovod is not installed"),
        ("horovod.tensorflow", "Horovod cannot load its TensorFlow ops"),
    ],
)
def test_missing_backend_names_the_setup_command_and_starts_nothing(blocked, needle):
    done = subprocess.run([sys.executable, "-c", PROBE, blocked], capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERROR:")]
    assert len(errors) == 1, done.stdout + done.stderr
    assert needle in errors[0] and "jupyter-dl install-horovod" in errors[0], errors[0]
    assert "CLUSTER STARTED: False" in lines
