"""Execute a notebook top to bottom with nbclient (a real kernel) and save the executed copy under build/."""

import os
import pathlib
import sys

import nbformat
from nbclient import NotebookClient


def main(path):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    source = pathlib.Path(path)
    nb = nbformat.read(source, as_version=4)
    resources = {"metadata": {"path": str(source.parent)}}
    NotebookClient(nb, timeout=600, kernel_name="python3", resources=resources).execute()
    out = pathlib.Path("build") / f"{source.stem}.executed.ipynb"
    out.parent.mkdir(exist_ok=True)
    nbformat.write(nb, out)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            if "test accuracy" in text or "cluster" in text:
                print(text.strip())
    print(f"executed {source} -> {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/quickstart.ipynb")
