"""The names `jupyter_dl` exports are the real functions (help() and inspect.signature() show their parameters),
imported on first use, so that `import jupyter_dl` stays light."""

import ast
import importlib
import inspect
import pathlib
import subprocess
import sys

import pytest

import jupyter_dl

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

FUNCTIONS = {
    "distribute": "jupyter_dl.kernel.api",
    "load_job": "jupyter_dl.kernel.api",
    "compare": "jupyter_dl.kernel.api",
    "shutdown": "jupyter_dl.kernel.api",
    "lr_find": "jupyter_dl.kernel.lr_finder",
}
HEAVY = ("ipyparallel", "tensorflow", "keras")


def test_import_jupyter_dl_imports_no_cluster_or_deep_learning_library():
    code = (
        "import sys, jupyter_dl; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules)); "
        "print(sorted(m for m in sys.modules if m.startswith('jupyter_dl.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    heavy, ours = out.stdout.splitlines()
    assert heavy == "[]", out.stdout
    assert not [m for m in eval(ours) if m.startswith(("jupyter_dl.kernel", "jupyter_dl.runtime"))], ours  # lazy


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_each_exported_function_is_the_real_one(name):
    real = getattr(importlib.import_module(FUNCTIONS[name]), name)
    assert getattr(jupyter_dl, name) is real
    namespace: dict = {}
    exec(f"from jupyter_dl import {name}", namespace)
    assert namespace[name] is real
    assert inspect.signature(getattr(jupyter_dl, name)) == inspect.signature(real)
    assert "*args" not in str(inspect.signature(getattr(jupyter_dl, name)))


def test_help_shows_distribute_s_parameters_and_documentation():
    import pydoc

    from jupyter_dl.kernel import api

    text = pydoc.render_doc(jupyter_dl.distribute, renderer=pydoc.plaintext)
    assert f"distribute{inspect.signature(api.distribute)}" in text
    assert "fn_or_code" in text and "lr_scale" in text and "distribute(*args, **kwargs)" not in text
    assert api.distribute.__doc__.splitlines()[0] in text


def test_everything_in_all_is_there_and_listed_by_dir():
    assert set(jupyter_dl.__all__) <= set(dir(jupyter_dl))
    for name in set(jupyter_dl.__all__) - {"LiveMetrics"}:  # LiveMetrics imports Keras: checked below, unimported
        assert getattr(jupyter_dl, name) is not None
    source = pathlib.Path(jupyter_dl.__file__).with_name("runtime") / "metrics_callback.py"
    classes = {node.name for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.ClassDef)}
    assert "LiveMetrics" in classes


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'distribut'"):
        jupyter_dl.distribut  # noqa: B018
    assert not hasattr(jupyter_dl, "runner")
