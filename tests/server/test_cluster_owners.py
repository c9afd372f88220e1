"""Which notebook owns a cluster: the server knows the pid it started each kernel as, but a kernel started through a
wrapper (a shell script, `uv run`, a conda activation) runs Python, which names its clusters, as a child of it."""

import subprocess
import sys
import time

import psutil
import pytest

from jupyter_dl.server.handlers import with_child_processes

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


def test_a_kernel_started_through_a_wrapper_owns_the_clusters_its_python_names():
    wrapper = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(30)'; true"])
    try:
        deadline = time.monotonic() + 10
        while not (children := psutil.Process(wrapper.pid).children()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "the wrapper started no child"
        owners = with_child_processes({wrapper.pid: "work/train.ipynb"})
        assert owners[children[0].pid] == "work/train.ipynb"
        assert owners[wrapper.pid] == "work/train.ipynb"
        assert with_child_processes({2**22 + 12345: "gone.ipynb"}) == {2**22 + 12345: "gone.ipynb"}  # no such pid
    finally:
        for child in psutil.Process(wrapper.pid).children(recursive=True):
            child.kill()
        wrapper.kill()
        wrapper.wait()
