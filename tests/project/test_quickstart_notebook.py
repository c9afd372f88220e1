"""The quickstart notebook, executed top to bottom by nbclient in a real kernel with its own local cluster."""

import pathlib

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _texts(cell):
    for output in cell.get("outputs", []):
        yield output.get("text") or output.get("data", {}).get("text/plain", "")


def test_quickstart_runs_top_to_bottom():
    nb = nbformat.read(ROOT / "examples" / "quickstart.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "examples")}}
    ).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    distributed_cell = next(c for c in nb.cells if c.source.startswith("%%distribute"))
    streamed = "".join(_texts(distributed_cell))
    assert "Epoch 10/10" in streamed and "started a local cluster: 2 engines" in streamed
    assert streamed.count("Epoch 1/10") == 1  # only rank 0 prints progress
    # The live view left static final figures (no widget manager here): the loss, then each rank's resources; and
    # the run summary.
    figures = [
        o["data"]["application/vnd.plotly.v1+json"]
        for o in distributed_cell.outputs
        if "application/vnd.plotly.v1+json" in o.get("data", {})
    ]
    assert len(figures) == 2
    names = {trace.get("name") for trace in figures[0]["data"]}
    assert {"loss (batch, smoothed)", "loss", "val_loss", "accuracy", "val_accuracy"} <= names
    resource_names = {trace.get("name") for trace in figures[1]["data"]}
    assert {"rank 0 CPU %", "rank 1 CPU %", "rank 0 memory MB", "rank 1 memory MB"} <= resource_names
    loss_trace = next(t for t in figures[0]["data"] if t.get("name") == "loss")
    assert len(loss_trace["y"]) == 10
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in distributed_cell.outputs)
    assert "samples/s" in streamed and "succeeded" in streamed
    summary = next(t for c in nb.cells for t in _texts(c) if "test accuracy" in t)
    single, distributed = [float(part.split()[-1]) for part in summary.strip().split(",")]
    assert distributed > 0.8 and abs(distributed - single) < 0.05
