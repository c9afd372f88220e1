"""`jupyter-dl doctor`, run for real: its table against this environment, failures made for real (the pool URL
pointing at a closed port; an environment without TensorFlow, so without either backend), an environment without
Horovod (a warning: zero-code cells run on TensorFlow's collectives), and the cheap hint `%load_ext` prints."""

import importlib.metadata
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _doctor(*args, env=None, python=sys.executable):
    start = time.monotonic()
    out = subprocess.run(
        [python, "-m", "jupyter_dl", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env or dict(os.environ),
    )
    return out.returncode, out.stdout, out.stderr, time.monotonic() - start


def _rows(text):
    """{check name: (status, found, fix)} from the table."""
    rows, last = {}, None
    for line in text.splitlines()[1:]:
        if not line.strip():
            break
        if line.lstrip().startswith("fix: "):
            rows[last] = (*rows[last][:2], line.split("fix: ", 1)[1])
            continue
        name, rest = line[:29].strip(), line[29:]
        status, _, found = rest.strip().partition("  ")
        rows[name] = (status.strip(), found.strip(), "")
        last = name
    return rows


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


class _Venv:
    def __init__(self, root, python, env):
        self.root, self.python, self.env = root, python, env


def _shadow_venv(root, without):
    """A real, separate virtual environment that sees everything this one has except the distributions whose names
    start with `without` (links to each other installed package), so "X missing" is real and cheap (no 1.5 GB TF
    copy)."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    shadow = root / "shadow"
    shadow.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.lower().startswith((*without, "_editable_impl", "__editable__")) and entry.suffix != ".pth":
            (shadow / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The package under test comes from the source tree, like the editable install.
    Path(target, "shadow.pth").write_text(f"{ROOT}\n{shadow}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_DL_POOL_URL", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    return _Venv(root, python, env)


@pytest.fixture(scope="module")
def venv_without_horovod(tmp_path_factory):
    """Everything this environment has but Horovod: "Horovod missing" and installing it are real and cheap."""
    return _shadow_venv(tmp_path_factory.mktemp("venv-no-horovod"), ("horovod",))


@pytest.fixture(scope="module")
def venv_without_tensorflow(tmp_path_factory):
    """Neither backend can run (no TensorFlow, so no collectives, and no Horovod), and no ipyparallel either."""
    return _shadow_venv(tmp_path_factory.mktemp("venv-no-tf"), ("horovod", "tensorflow", "ipyparallel"))


@pytest.fixture(scope="module")
def horovod_facts():
    code = "import horovod.tensorflow as h; print(bool(h.gloo_built()), bool(h.nccl_built()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.split()[-2:]


def test_table_matches_this_environment_and_exits_zero(horovod_facts):
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_DL_POOL_URL"}
    code, out, err, seconds = _doctor(env=env)
    print(f"doctor took {seconds:.1f} s")
    assert code == 0, out + err
    rows = _rows(out)
    assert rows["Python"][0] == "ok" and sys.version.split()[0] in rows["Python"][1]
    assert rows["TensorFlow"] == ("ok", importlib.metadata.version("tensorflow"), "")
    assert rows["Keras"][1] == importlib.metadata.version("keras")
    assert rows["Horovod with TensorFlow"] == ("ok", importlib.metadata.version("horovod"), "")
    assert rows["Horovod gloo"][0] == ("ok" if horovod_facts[0] == "True" else "FAIL")
    assert ("not built" in rows["Horovod NCCL"][1]) == (horovod_facts[1] == "False")
    assert rows["ipyparallel"] == ("ok", importlib.metadata.version("ipyparallel"), "")
    assert rows["Lab extension (jobs panel)"][0] == "ok" and "enabled" in rows["Lab extension (jobs panel)"][1]
    assert rows["Server extension (jobs API)"] == ("ok", "jupyter_dl enabled", "")
    assert "not configured" in rows["Pool service"][1]
    assert rows["TensorFlow collectives"] == (
        "ok",
        "tensorflow.python.ops.collective_ops (--backend tf; nothing to build)",
        "",
    )
    assert "ready: %%distribute can run jobs" in out
    # Last, the backend `--backend auto` picks: Horovod, since it works here.
    ops = "gloo and NCCL" if horovod_facts[1] == "True" else "gloo"
    version = importlib.metadata.version("horovod")
    assert out.strip().splitlines()[-1] == f"--backend auto uses Horovod {version} (horovod, over {ops})", out


def test_unreachable_pool_service_fails_with_its_fix():
    port = _closed_port()
    code, out, err, _ = _doctor(env=dict(os.environ, JUPYTER_DL_POOL_URL=f"http://127.0.0.1:{port}/services/pool/"))
    assert code == 1, out + err
    status, found, fix = _rows(out)["Pool service"]
    assert status == "FAIL" and f"127.0.0.1:{port}" in found and "unreachable" in found
    assert "jupyter-dl-pool" in fix and "$JUPYTER_DL_POOL_URL" in fix
    assert "1 problem(s) block jobs: Pool service" in out
    assert out.strip().splitlines()[-1].startswith("--backend auto uses Horovod "), out


def test_bad_argument_is_one_line():
    code, out, err, _ = _doctor("surplus")
    assert code == 2 and "unexpected argument 'surplus'" in err and "Traceback" not in err


def test_environment_without_horovod_warns_and_runs_on_tensorflow_collectives(venv_without_horovod):
    """Horovod is optional: its absence is a warning with the command that adds it, not a problem blocking jobs."""
    code, out, err, seconds = _doctor(python=str(venv_without_horovod.python), env=venv_without_horovod.env)
    print(f"doctor without Horovod took {seconds:.1f} s:\n{out}")
    assert code == 0, out + err
    rows = _rows(out)
    assert rows["Horovod"] == (
        "warn",
        "not installed: zero-code cells run on TensorFlow's collectives",
        "jupyter-dl install-horovod (adds Horovod: for --manual Horovod cells and --backend horovod)",
    ), out
    assert rows["TensorFlow"][0] == "ok" and rows["TensorFlow collectives"][0] == "ok", out
    assert "Horovod with TensorFlow" not in rows and "Horovod gloo" not in rows, out
    assert "block jobs" not in out and "ready: %%distribute can run jobs (" in out, out
    assert out.strip().splitlines()[-1] == (
        "--backend auto uses TensorFlow's collectives (tf): Horovod is not installed; "
        "`jupyter-dl install-horovod` adds it"
    ), out


def test_environment_without_tensorflow_has_no_backend_and_fails(venv_without_tensorflow):
    """Without TensorFlow neither backend runs: TensorFlow's line is the problem (Horovod needs it too)."""
    code, out, err, _ = _doctor(python=str(venv_without_tensorflow.python), env=venv_without_tensorflow.env)
    assert code == 1, out + err
    rows = _rows(out)
    assert rows["TensorFlow"] == ("FAIL", "not installed", _pip(venv_without_tensorflow, "tensorflow>=2.16")), out
    assert rows["TensorFlow collectives"] == ("FAIL", "unavailable: TensorFlow does not import (its line above)", "")
    assert rows["Horovod"][:2] == ("warn", "not installed"), out
    assert rows["ipyparallel"] == ("FAIL", "not installed", _pip(venv_without_tensorflow, "ipyparallel>=9.2")), out
    blocking = out.split("block jobs: ")[1].split(". ")[0].split(", ")
    assert blocking == ["TensorFlow", "TensorFlow collectives", "ipyparallel"], out
    assert out.strip().splitlines()[-1] == (
        "--backend auto has no backend to use: TensorFlow does not import (both backends need it)"
    ), out


def _pip(venv, spec):
    return f"{venv.python} -m pip install '{spec}'"


_LOAD_EXT = (
    "from IPython.core.interactiveshell import InteractiveShell; import sys, time; t = time.monotonic(); "
    "InteractiveShell.instance().run_line_magic('load_ext', 'jupyter_dl'); "
    "print('tensorflow' in sys.modules, f'{time.monotonic() - t:.2f}')"
)


def _load_ext(python, env=None):
    out = subprocess.run([str(python), "-c", _LOAD_EXT], capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "False"  # the check at load imports no TensorFlow
    return out.stderr


def test_load_ext_points_to_doctor_when_tensorflow_is_missing(venv_without_tensorflow):
    err = _load_ext(venv_without_tensorflow.python, venv_without_tensorflow.env)
    assert "tensorflow, ipyparallel not found" in err and "jupyter-dl doctor" in err, err


def test_load_ext_is_quiet_without_horovod_and_where_everything_is_installed(venv_without_horovod):
    # Without Horovod jobs run on TensorFlow's collectives (the first job says so), so nothing to point to here.
    assert "jupyter-dl doctor" not in _load_ext(venv_without_horovod.python, venv_without_horovod.env)
    assert "jupyter-dl doctor" not in _load_ext(sys.executable)
