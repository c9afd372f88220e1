"""From the wheel to a first job, as a user gets there without this repository: the jupyter-dl wheel is built and
installed into a fresh virtual environment (with its dependencies from the package index; no repository on any path,
every command run from outside it). There `jupyter-dl doctor` reports Horovod missing as a warning and exits 0
(zero-code cells run on TensorFlow's collectives), and a 2-rank zero-code `%%distribute` cell trains on them through
nbclient, with nothing but the venv on PATH (no compiler). Then `jupyter-dl install-horovod` installs Horovod (from
the wheel cache that scripts/setup.sh fills, else by building it), `doctor` is all green and picks Horovod, and a
2-rank cell calling Horovod runs in that environment's own kernel and engines.

Dependencies are pinned to the versions of the environment the rest of the suite runs in (a constraints file, so the
resolver does not wander and pip's download cache is hit on later runs): TensorFlow's version is also the Horovod
wheel cache's key.
"""

import importlib.metadata
import importlib.util
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

ROOT = Path(__file__).resolve().parents[2]
HOROVOD_VERSION = "0.28.1"


def _doctor_tests():
    """tests/cli/test_doctor.py, for its table parser: by path, so this file runs alone too (pytest puts tests/cli on
    sys.path only once it has collected a test there)."""
    if "test_doctor" in sys.modules:
        return sys.modules["test_doctor"]
    spec = importlib.util.spec_from_file_location("test_doctor", ROOT / "tests" / "cli" / "test_doctor.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_rows = _doctor_tests()._rows


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


# The data both notebooks train on.
DATA_CELL = (
    "import numpy as np\n"
    'x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")\n'
    'y = x @ np.arange(1, 9, dtype="float32") / 8'
)

CELLS = [
    # The kernel itself: which Python, which jupyter_dl.
    "import json, sys, jupyter_dl\n"
    'print(json.dumps({"python": sys.executable, "jupyter_dl": jupyter_dl.__file__, "path": sys.path}))',
    "%load_ext jupyter_dl",
    DATA_CELL,
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

# Before Horovod: a plain zero-code cell (no Horovod anywhere), on TensorFlow's collectives.
TF_CELLS = [
    "import json, os, shutil, sys\n"
    'print(json.dumps({"python": sys.executable, "PATH": os.environ["PATH"], "gcc": shutil.which("gcc")}))',
    "%load_ext jupyter_dl",
    DATA_CELL,
    textwrap.dedent("""\
        %%distribute -n 2
        import importlib.util, os, shutil, sys
        import keras
        from jupyter_dl import collectives

        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.01), "mse")
        history = model.fit(x, y, epochs=5, batch_size=32, verbose=0)
        ranks = collectives.size()
        engine = {"python": sys.executable, "horovod": importlib.util.find_spec("horovod") is not None,
                  "horovod_loaded": "horovod" in sys.modules, "gcc": shutil.which("gcc"),
                  "PATH": os.environ["PATH"]}"""),
    'print(json.dumps({"ranks": ranks, "engine": engine, "loss": history.history["loss"]}))',
    "%dl_cluster stop",
]
TF_NOTE = (
    "[jupyter-dl] Horovod is not installed: running on TensorFlow's own collectives (--backend tf); "
    "run `jupyter-dl install-horovod`"
)

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


def _run_notebook(steps, step, cells, work, name, python):
    """The cells through nbclient (the DRIVER, run by the venv's Python from the user's folder): the executed
    notebook's cells, with no error output in any of them."""
    notebook, executed = work / f"{name}.ipynb", work / f"{name}.out.ipynb"
    nbformat.write(
        new_notebook(
            cells=[new_code_cell(c) for c in cells],
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        ),
        notebook,
    )
    (work / "driver.py").write_text(DRIVER)
    run = steps.run(step, [python, "driver.py", notebook, executed, work], timeout=900)
    print(run.stdout.strip().splitlines()[-1])
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    return nb.cells


def _stream(cell, name="stdout"):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == name)


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

        # 3. doctor: Horovod missing is a warning with the command that adds it; jobs run on TensorFlow's
        # collectives, so the exit is 0 and the last line says `auto` picks them.
        doctor = steps.run("doctor (no Horovod)", [venv / "bin" / "jupyter-dl", "doctor"], timeout=600, check=False)
        print(doctor.stdout)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        rows = _rows(doctor.stdout)
        assert rows["Horovod"] == (
            "warn",
            "not installed: zero-code cells run on TensorFlow's collectives",
            "jupyter-dl install-horovod (adds Horovod: for --manual Horovod cells and --backend horovod)",
        ), doctor.stdout
        assert rows["TensorFlow collectives"][0] == "ok", doctor.stdout
        assert not [name for name, (status, _, _) in rows.items() if status == "FAIL"], doctor.stdout
        assert "ready: %%distribute can run jobs" in doctor.stdout and "block jobs" not in doctor.stdout
        assert (
            doctor.stdout.strip()
            .splitlines()[-1]
            .startswith("--backend auto uses TensorFlow's collectives (tf): Horovod is not installed")
        ), doctor.stdout
        assert rows["TensorFlow"] == ("ok", tf_version, ""), doctor.stdout
        # The wheel's data files put both extensions in place (no npm, no `jupyter ... enable`).
        assert rows["Lab extension (jobs panel)"][0] == "ok", doctor.stdout
        assert rows["Server extension (jobs API)"] == ("ok", "jupyter_dl enabled", ""), doctor.stdout

        # 4. A 2-rank zero-code cell without Horovod and without a compiler: PATH is the venv's bin folder only.
        bare = str(venv / "bin")
        for compiler in ("gcc", "cc", "c++", "g++", "clang"):
            assert shutil.which(compiler, path=bare) is None, compiler
        steps.env = dict(steps.env, PATH=bare)
        cells = _run_notebook(steps, "notebook (no Horovod, no compiler)", TF_CELLS, work, "no-horovod", python)
        steps.env = _clean_env(venv, tmp_path / "jupyter")
        kernel = json.loads(_stream(cells[0]).strip().splitlines()[-1])
        assert kernel == {"python": str(python), "PATH": bare, "gcc": None}, kernel
        assert TF_NOTE in _stream(cells[3], "stderr"), cells[3].outputs
        result = json.loads(_stream(cells[4]).strip().splitlines()[-1])
        assert result["ranks"] == 2, result
        assert result["engine"] == {
            "python": str(python),
            "horovod": False,
            "horovod_loaded": False,
            "gcc": None,
            "PATH": bare,
        }, result
        loss = result["loss"]
        print(f"loss without Horovod: {[round(v, 4) for v in loss]}")
        assert len(loss) == 5 and loss[-1] < loss[0] / 2, loss  # it trained
        assert "cluster stopped" in _stream(cells[5]), cells[5].outputs

        # 5. install-horovod: from the wheel cache when setup.sh (or an earlier run) filled it, else a build.
        key = f"horovod-{HOROVOD_VERSION}-tf{tf_version}-cp{sys.version_info.major}{sys.version_info.minor}"
        cached = sorted((_cache_dir() / "wheels" / key).glob(f"horovod-{HOROVOD_VERSION}-*.whl"))
        install = steps.run("install-horovod", [venv / "bin" / "jupyter-dl", "install-horovod"], timeout=2400)
        if cached:
            assert f"using cached wheel {cached[-1]}" in install.stderr, install.stderr
        show = steps.run("pip show horovod", [python, "-m", "pip", "show", "-f", "horovod"], timeout=120)
        location = next(l.split(": ", 1)[1] for l in show.stdout.splitlines() if l.startswith("Location: "))
        assert Path(location).is_relative_to(venv), show.stdout

        # 6. doctor again: all green, and `auto` picks Horovod.
        doctor = steps.run("doctor (after)", [venv / "bin" / "jupyter-dl", "doctor"], timeout=600, check=False)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        rows = _rows(doctor.stdout)
        assert rows["Horovod with TensorFlow"] == ("ok", HOROVOD_VERSION, ""), doctor.stdout
        assert rows["Horovod gloo"][0] == "ok", doctor.stdout
        assert not [name for name, (status, _, _) in rows.items() if status == "FAIL"], doctor.stdout
        assert "ready: %%distribute can run jobs" in doctor.stdout
        assert doctor.stdout.strip().splitlines()[-1].startswith(f"--backend auto uses Horovod {HOROVOD_VERSION} ")

        # 7. A 2-rank cell calling Horovod through nbclient, with that environment's kernel and engines.
        cells = _run_notebook(steps, "notebook (2 ranks)", CELLS, work, "first-job", python)
        assert TF_NOTE not in _stream(cells[3], "stderr"), cells[3].outputs

        def printed(index):
            return _stream(cells[index])

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
