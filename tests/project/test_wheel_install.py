"""From the wheel to a first job, as a user gets there without this repository: the jupyter-dl wheel is built and
installed into a fresh virtual environment (with its dependencies from the package index; no repository on any path,
every command run from outside it). There `jupyter-dl doctor` reports Horovod missing and exits non-zero, `jupyter-dl
install-horovod` installs it (from the wheel cache that scripts/setup.sh fills, else by building it), `doctor` is then
all green, and a 2-rank `%%distribute` cell runs through nbclient in that environment's own kernel and engines.

Dependencies are pinned to the versions of the environment the rest of the suite runs in (a constraints file, so the
resolver does not wander and pip's download cache is hit on later runs): TensorFlow's version is also the Horovod
wheel cache's key.
"""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from test_doctor import _rows

ROOT = Path(__file__).resolve().parents[2]
HOROVOD_VERSION = "0.28.1"


def _cache_dir():
    return Path(os.environ.get("JUPYTER_DL_CACHE") or Path.home() / ".cache" / "jupyter-dl")


class _Steps:
    """Runs each step's command from outside the repository and keeps how long it took."""

    def __init__(self, cwd, env):
        self.cwd, self.env, self.times = cwd, env, {}

    def run(self, step, command, timeout, check=True):
        start = time.monotonic()
        out = subprocess.run(
            [str(c) for c in command], capture_output=True, text=True, timeout=timeout, cwd=self.cwd, env=self.env
        )
        self.times[step] = self.times.get(step, 0.0) + time.monotonic() - start
        print(f"{step}: {self.times[step]:.1f} s (exit {out.returncode})")
        if check:
            assert out.returncode == 0, f"{step} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return out


def _clean_env(venv, data_dir):
    """The environment a user's shell has after activating the new venv: nothing pointing into this repository."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONSTARTUP",
            "VIRTUAL_ENV",
            "JUPYTER_PATH",
            "JUPYTER_CONFIG_PATH",
            "JUPYTER_CONFIG_DIR",
            "JUPYTER_DL_POOL_URL",
            "IPYTHONDIR",
        )
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONNOUSERSITE"] = "1"
    env["JUPYTER_DATA_DIR"] = str(data_dir)  # its own job store and kernel specs
    env["JUPYTER_CONFIG_DIR"] = str(data_dir / "config")
    env["IPYTHONDIR"] = str(data_dir / "ipython")
    return env


def _constraints(path):
    """name==version of every distribution installed here except jupyter-dl itself and Horovod."""
    pins = {}
    for dist in importlib.metadata.distributions():  # in sys.path order: the first of a name is the one imported
        name = (dist.metadata["Name"] or "").lower().replace("-", "_").replace(".", "_")
        if name and name not in ("jupyter_dl", "horovod"):
            pins.setdefault(name, f"{dist.metadata['Name']}=={dist.version}")
    path.write_text("\n".join(sorted(pins.values())) + "\n")
    return path


CELLS = [
    # The kernel itself: which Python, which jupyter_dl.
    "import json, sys, jupyter_dl\n"
    'print(json.dumps({"python": sys.executable, "jupyter_dl": jupyter_dl.__file__, "path": sys.path}))',
    "%load_ext jupyter_dl",
    "import numpy as np\n"
    'x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")\n'
    'y = x @ np.arange(1, 9, dtype="float32") / 8',
    textwrap.dedent("""\
        %%distribute -n 2
        import sys
        import keras
        import horovod
        import horovod.tensorflow as hvd
        import jupyter_dl

        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.01), "mse")
        history = model.fit(x, y, epochs=5, batch_size=32, verbose=0)
        ranks = hvd.size()
        engine = {"python": sys.executable, "jupyter_dl": jupyter_dl.__file__, "horovod": horovod.__file__,
                  "path": sys.path}"""),
    'print(json.dumps({"ranks": ranks, "engine": engine, "loss": history.history["loss"]}))',
    "%dl_cluster stop",
]

DRIVER = """
import sys, time
import nbformat
from nbclient import NotebookClient

nb = nbformat.read(sys.argv[1], as_version=4)
start = time.monotonic()
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": sys.argv[3]}}).execute()
print(f"executed in {time.monotonic() - start:.1f} s")
nbformat.write(nb, sys.argv[2])
"""


def _outside_repo(path):
    return not Path(path).resolve().is_relative_to(ROOT)


@pytest.mark.timeout(3000)  # a machine without the cached Horovod wheel builds it (minutes)
def test_wheel_in_a_fresh_venv_doctor_install_horovod_and_a_2_rank_cell(tmp_path):
    started = time.monotonic()
    work = tmp_path / "user"  # the user's folder: every command runs here
    work.mkdir()
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    steps = _Steps(work, None)
    try:
        # 1. The wheel, as test_packaging builds it: the prebuilt labextension inside, no npm.
        wheels = tmp_path / "dist"
        steps.env = dict(os.environ)
        steps.run(
            "build wheel",
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels, ROOT],
            timeout=600,
        )
        (wheel,) = wheels.glob("jupyter_dl-*.whl")

        # 2. A fresh venv (its own pip), and the wheel with its dependencies from the index.
        steps.run("create venv", [sys.executable, "-m", "venv", venv], timeout=300)
        steps.env = _clean_env(venv, tmp_path / "jupyter")
        pins = _constraints(tmp_path / "constraints.txt")
        steps.run(
            "pip install wheel",
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, "-c", pins],
            timeout=1200,
        )

        # Nothing comes from the repository: the package, and the Python path, are the venv's.
        where = steps.run(
            "where",
            [
                python,
                "-c",
                "import json, sys, jupyter_dl, tensorflow; print(json.dumps("
                "[jupyter_dl.__file__, tensorflow.__version__, sys.path]))",
            ],
            timeout=300,
        )
        package, tf_version, path = json.loads(where.stdout.strip().splitlines()[-1])
        assert Path(package).is_relative_to(venv), package
        assert tf_version == importlib.metadata.version("tensorflow")
        assert all(_outside_repo(p) for p in path if p), path
        assert "horovod" not in steps.run("pip list", [python, "-m", "pip", "list"], timeout=120).stdout.lower()

        # 3. doctor: Horovod missing, a non-zero exit, and the fix.
        doctor = steps.run("doctor (no Horovod)", [venv / "bin" / "jupyter-dl", "doctor"], timeout=600, check=False)
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        rows = _rows(doctor.stdout)
        assert rows["Horovod"] == ("FAIL", "not installed", "jupyter-dl install-horovod"), doctor.stdout
        assert "Horovod" in doctor.stdout.split("block jobs:")[1]
        assert rows["TensorFlow"] == ("ok", tf_version, ""), doctor.stdout
        # The wheel's data files put both extensions in place (no npm, no `jupyter ... enable`).
        assert rows["Lab extension (jobs panel)"][0] == "ok", doctor.stdout
        assert rows["Server extension (jobs API)"] == ("ok", "jupyter_dl enabled", ""), doctor.stdout

        # 4. install-horovod: from the wheel cache when setup.sh (or an earlier run) filled it, else a build.
        key = f"horovod-{HOROVOD_VERSION}-tf{tf_version}-cp{sys.version_info.major}{sys.version_info.minor}"
        cached = sorted((_cache_dir() / "wheels" / key).glob(f"horovod-{HOROVOD_VERSION}-*.whl"))
        install = steps.run("install-horovod", [venv / "bin" / "jupyter-dl", "install-horovod"], timeout=2400)
        if cached:
            assert f"using cached wheel {cached[-1]}" in install.stderr, install.stderr
        show = steps.run("pip show horovod", [python, "-m", "pip", "show", "-f", "horovod"], timeout=120)
        location = next(l.split(": ", 1)[1] for l in show.stdout.splitlines() if l.startswith("Location: "))
        assert Path(location).is_relative_to(venv), show.stdout

        # 5. doctor again: all green.
        doctor = steps.run("doctor (after)", [venv / "bin" / "jupyter-dl", "doctor"], timeout=600, check=False)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        rows = _rows(doctor.stdout)
        assert rows["Horovod with TensorFlow"] == ("ok", HOROVOD_VERSION, ""), doctor.stdout
        assert rows["Horovod gloo"][0] == "ok", doctor.stdout
        assert not [name for name, (status, _, _) in rows.items() if status == "FAIL"], doctor.stdout
        assert "ready: %%distribute can run jobs" in doctor.stdout

        # 6. A 2-rank cell through nbclient, with that environment's kernel and engines.
        notebook, executed = work / "first-job.ipynb", work / "first-job.out.ipynb"
        nbformat.write(
            new_notebook(
                cells=[new_code_cell(c) for c in CELLS],
                metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            ),
            notebook,
        )
        (work / "driver.py").write_text(DRIVER)
        run = steps.run("notebook (2 ranks)", [python, "driver.py", notebook, executed, work], timeout=900)
        print(run.stdout.strip().splitlines()[-1])
        nb = nbformat.read(executed, as_version=4)
        errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
        assert not errors, errors

        def printed(index):
            return "".join(
                o.get("text", "") for o in nb.cells[index].outputs if o.output_type == "stream" and o.name == "stdout"
            )

        kernel = json.loads(printed(0).strip().splitlines()[-1])
        assert kernel["python"] == str(python), kernel
        assert Path(kernel["jupyter_dl"]).is_relative_to(venv), kernel
        assert all(_outside_repo(p) for p in kernel["path"] if p), kernel["path"]
        result = json.loads(printed(4).strip().splitlines()[-1])
        engine = result["engine"]
        assert result["ranks"] == 2
        assert engine["python"] == str(python), engine
        assert Path(engine["jupyter_dl"]).is_relative_to(venv) and Path(engine["horovod"]).is_relative_to(venv)
        assert all(_outside_repo(p) for p in engine["path"] if p), engine["path"]
        loss = result["loss"]
        assert len(loss) == 5 and loss[-1] < loss[0] / 2, loss  # it trained
    finally:
        total = time.monotonic() - started
        print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.times.items()) + f"; total {total:.1f} s")
        shutil.rmtree(venv, ignore_errors=True)  # ~2 GB with TensorFlow; pytest would keep the last three
