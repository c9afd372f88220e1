"""Packaging: the wheel carries the prebuilt labextension and the server config (no npm at user install), and the
installed extension shows as enabled and OK in both `jupyter labextension list` and `jupyter server extension list`."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JUPYTER = str(Path(sys.executable).with_name("jupyter"))


def _listing(*args):
    out = subprocess.run([JUPYTER, *args], capture_output=True, text=True, timeout=120, cwd="/")
    return out.stdout + out.stderr


def test_labextension_is_enabled_and_ok():
    text = _listing("labextension", "list")
    line = next((l for l in text.splitlines() if "jupyter-dl" in l), "")
    assert "enabled" in line and "OK" in line, text


def test_server_extension_is_enabled_and_ok():
    lines = _listing("server", "extension", "list").splitlines()
    at = next(i for i, l in enumerate(lines) if l.strip().startswith("jupyter_dl"))
    assert "enabled" in lines[at]
    assert any("jupyter_dl" in l and "OK" in l for l in lines[at + 1 : at + 4]), lines[at : at + 4]


def test_wheel_carries_prebuilt_labextension_and_server_config(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=600,
    )
    wheel = next(tmp_path.glob("jupyter_dl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    data = "jupyter_dl-0.1.0.data/data/"
    assert data + "share/jupyter/labextensions/jupyter-dl/package.json" in names
    assert data + "share/jupyter/labextensions/jupyter-dl/install.json" in names
    assert data + "share/jupyter/labextensions/jupyter-dl/schemas/jupyter-dl/plugin.json" in names
    assert any(n.startswith(data + "share/jupyter/labextensions/jupyter-dl/static/remoteEntry.") for n in names)
    assert data + "etc/jupyter/jupyter_server_config.d/jupyter_dl.json" in names
    assert "jupyter_dl/server/handlers.py" in names and "jupyter_dl/runtime/rank.py" in names


def test_import_is_light():
    """`import jupyter_dl` must not drag in TensorFlow or ipyparallel (the extension loads lazily)."""
    code = "import sys, jupyter_dl; print('tensorflow' in sys.modules, 'ipyparallel' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
