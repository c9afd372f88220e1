"""The examples gallery, each notebook executed top to bottom by nbclient in a real kernel with its own local
cluster (as tests/project/test_quickstart_notebook.py does for the quickstart). Committed without outputs."""

import os
import pathlib
import re
import time

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _texts(cell):
    for output in cell.get("outputs", []):
        yield output.get("text") or output.get("data", {}).get("text/plain", "")


def _expected_to_fail(cell):
    return "raises-exception" in cell.get("metadata", {}).get("tags", [])


def _run(name, **kernel):
    """Execute the notebook top to bottom; `kernel` goes to the kernel's start (e.g. env). Only cells tagged
    raises-exception may end in an error, and each of them must."""
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit examples without outputs"
    start = time.monotonic()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute(
        **kernel
    )
    print(f"{name}: {time.monotonic() - start:.1f} s")
    errors = [
        o for c in nb.cells if not _expected_to_fail(c) for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors, errors
    for cell in filter(_expected_to_fail, nb.cells):
        # A traceback, or IPython's one-line UsageError on stderr (what jupyter-dl's refusals are).
        assert any(
            o.get("output_type") == "error" or (o.get("name") == "stderr" and "Error: " in o.get("text", ""))
            for o in cell.outputs
        ), f"expected an error: {cell.source}"
    return nb, "\n".join(t for c in nb.cells for t in _texts(c))


def _cell(nb, start):
    """The text a code cell printed, found by how its source starts."""
    return "".join(_texts(next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(start))))


def test_images_cnn_with_template_and_lr_find():
    from sklearn.datasets import load_digits

    from jupyter_dl.kernel.template import template_code

    nb, text = _run("images-cnn.ipynb")
    # The committed cell is exactly what %dl_template writes for these arrays (so the example cannot drift).
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    written = template_code(digits.images[order][:1400], digits.target[order][:1400], "images", "labels", epochs=8)
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


def _own_job_store(tmp_path):
    """The kernel's environment with a Jupyter data directory of its own: the job store %dl_jobs reads holds only
    the notebook's jobs."""
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "data"))
    env.pop("JUPYTER_DL_POOL_URL", None)  # the embedded pool, not a service
    return env


def test_surviving_failures_with_a_rank_killed_mid_fit(tmp_path):
    nb, text = _run("surviving-failures.ipynb", env=_own_job_store(tmp_path))
    job = _cell(nb, "%%distribute -n 2 --restarts 1")
    # The rank's engine really died (no exception: os._exit), and the job went on from the epoch-4 checkpoint.
    assert re.search(
        r"rank 1 failed \(.*EngineError.*\); restart 1 of 1, from the last checkpoint in "
        r"/\S*surviving-failures-",
        job,
    ), job
    assert "resuming from" in job and "fit-0.npz (epoch 4 done)" in job, job
    assert "succeeded" in job, job
    # The History is continuous: 8 epochs, and the loss after the restart goes on from the saved weights (a fresh
    # start would begin again near the first epoch's loss).
    printed = _cell(nb, 'print("epochs:"')
    assert "epochs: [1, 2, 3, 4, 5, 6, 7, 8]" in printed, printed
    loss = [float(v) for v in re.search(r"loss: +((?:\d+\.\d+ ?)+)", printed).group(1).split()]
    assert len(loss) == 8 and loss[4] < loss[0] / 2 and loss[7] < loss[3], loss
    assert float(re.search(r"test accuracy (\d\.\d+)", printed).group(1)) > 0.85, printed
    assert _cell(nb, "sorted(os.listdir").strip() == "['fit-0.complete.npz', 'killed-once']"
    rows = [r.split()[2:4] for r in _cell(nb, "%dl_jobs").splitlines()[1:]]
    assert rows == [["succeeded", "2"]], rows  # one job, restarted within


def test_shared_gpu_hub(tmp_path):
    nb, text = _run("shared-gpu-hub.ipynb", env=_own_job_store(tmp_path))
    # The hub's configuration shown is the deployment file in the repository, as it is.
    shown = _cell(nb, "from pathlib import Path")
    assert shown.rstrip("\n") == (EXAMPLES / "shared-gpu-hub" / "jupyterhub_config.py").read_text().rstrip("\n")
    pool = r"GPU pool, embedded \(/\S*shared-gpu-hub-\w+/pool.json\): "
    assert re.search(pool + "2 of 2 GPUs free, 0 jobs queued", _cell(nb, "%dl_cluster start")), text
    held = _cell(nb, "import subprocess")
    assert "the other notebook's job: granted" in held and re.search(pool + "0 of 2 GPUs free", held), held
    waited = _cell(nb, "%%distribute -n 2 --name waits-its-turn")
    assert (
        "queued for 2 GPUs: position 1 (waiting for 2 GPUs to be free at once (0 free now))" in waited
        and "succeeded" in waited
    ), waited
    after = _cell(nb, "other_notebook.wait()")
    assert re.search(pool + "2 of 2 GPUs free, 0 jobs queued", after), after  # both jobs gave their GPUs back
    assert float(re.search(r"final loss (\d+\.\d+)", after).group(1)) < 10.0
    refused = _cell(nb, "%%distribute -n 3 --name too-big")
    assert "UsageError: asked for 3 GPUs; the pool has 2 in all: ask for at most 2" in refused, refused
    assert "never runs" not in refused
    # This kernel's two jobs, newest first, and nothing else: the refused one and the one that waited.
    rows = [r.split()[1:4] for r in _cell(nb, "%dl_jobs").splitlines()[1:]]
    assert rows == [["too-big", "failed", "3"], ["waits-its-turn", "succeeded", "2"]], rows


@pytest.mark.parametrize(
    "name",
    [
        "images-cnn.ipynb",
        "existing-horovod-code.ipynb",
        "sizing-a-job.ipynb",
        "surviving-failures.ipynb",
        "shared-gpu-hub.ipynb",
    ],
)
def test_readme_links_each_example(name):
    assert f"examples/{name}" in (ROOT / "README.md").read_text()
