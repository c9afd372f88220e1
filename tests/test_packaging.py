"""The JupyterLab extension is installed and enabled, as `jupyter labextension list` reports it."""
import subprocess
import sys
from pathlib import Path


def test_labextension_is_enabled_and_ok():
    jupyter = Path(sys.executable).with_name("jupyter")
    out = subprocess.run([str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=120)
    line = next((l for l in (out.stdout + out.stderr).splitlines() if "jupyter-dl" in l), "")
    assert "enabled" in line and "OK" in line, out.stdout + out.stderr


def test_import_is_light():
    """`import jupyter_dl` must not drag in TensorFlow or ipyparallel (the extension loads lazily)."""
    code = "import sys, jupyter_dl; print('tensorflow' in sys.modules, 'ipyparallel' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
