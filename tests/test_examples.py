"""The examples gallery, each notebook executed top to bottom by nbclient in a real kernel with its own local
cluster (as tests/test_quickstart_notebook.py does for the quickstart). Committed without outputs."""
import pathlib
import re
import time

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _texts(cell):
    for output in cell.get("outputs", []):
        yield output.get("text") or output.get("data", {}).get("text/plain", "")


def _run(name):
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit examples without outputs"
    start = time.monotonic()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    print(f"{name}: {time.monotonic() - start:.1f} s")
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    return nb, "\n".join(t for c in nb.cells for t in _texts(c))


def test_images_cnn_with_template_and_lr_find():
    from sklearn.datasets import load_digits

    from jupyter_dl.template import template_code

    nb, text = _run("images-cnn.ipynb")
    # The committed cell is exactly what %dl_template writes for these arrays (so the example cannot drift).
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    written = template_code(digits.images[order][:1400], digits.target[order][:1400], "images", "labels",
                            epochs=8)
    assert any(c.source == written.rstrip("\n") for c in nb.cells), "the written cell differs from %dl_template's"
    accuracy = float(re.search(r"test accuracy (\d\.\d+)", text).group(1))
    assert accuracy > 0.85, text
    suggestion = next(c for c in nb.cells if c.source.startswith("suggested = %lr_find"))
    value = float("".join(_texts(suggestion)).strip().splitlines()[-1])
    assert 1e-5 < value < 1.0


def test_existing_horovod_code_with_manual():
    nb, text = _run("existing-horovod-code.ipynb")
    accuracies = [float(a) for a in re.findall(r"test accuracy (\d\.\d+)", text)]
    assert len(accuracies) == 2 and min(accuracies) > 0.8, text
    assert "rank 0 of 2: final loss" in text and "epoch 4: loss" in text


def test_sizing_a_job():
    nb, text = _run("sizing-a-job.ipynb")
    assert text.count("recommendation:") >= 2, text  # the table alone, then before the run
    balanced = next(c for c in nb.cells if c.source.startswith("%%distribute -n 2 --balance on"))
    out = "".join(_texts(balanced))
    assert "Epoch 3/3" in out and "succeeded" in out and "kept the even split" not in out  # validation_data
    if "per-rank batch sizes" in out:  # the ranks measured apart (this machine is shared): sizes sum to 64
        sizes = re.search(r"per-rank batch sizes \[(\d+), (\d+)\]", out).groups()
        assert sum(map(int, sizes)) == 64
    assert float(re.search(r"test accuracy (\d\.\d+)", text).group(1)) > 0.8


@pytest.mark.parametrize("name", ["images-cnn.ipynb", "existing-horovod-code.ipynb", "sizing-a-job.ipynb"])
def test_readme_links_each_example(name):
    assert f"examples/{name}" in (ROOT / "README.md").read_text()
