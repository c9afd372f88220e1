"""`keras.utils.get_file` and `keras.datasets.*.load_data()` inside a `%%distribute -n 2` cell (real 2-rank jobs on
both backends): rank 0 downloads, the other rank finds the file in the shared cache, nothing is written twice or read
half-written; a download that fails fails every rank in one line. The origin is a `file://` URL (urlretrieve's
own way to read one; this machine has no internet), large enough that two ranks writing it at once would overlap."""

import hashlib

import numpy as np
import pytest
from IPython.utils.capture import capture_output

CELL = """%%distribute -n 2 --output all --backend {backend}
import keras
path = keras.utils.get_file("data.npz", origin=origin, file_hash=digest, cache_dir=cache)
with np.load(path) as data:
    total = float(data["x"].sum())
# The name keras.datasets' loaders call it by is the guarded one too.
import keras.src.datasets.mnist as mnist_module
same_guard = mnist_module.get_file is keras.utils.get_file
"""


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_one_rank_downloads_and_the_other_reads_the_cached_file(shell, tmp_path, backend):
    x = np.random.default_rng(0).random((4_000_000,))  # 32 MB
    source = tmp_path / "source.npz"
    np.savez(source, x=x)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    cache.mkdir()  # Keras falls back to /tmp/.keras for a cache folder it cannot write to
    shell.user_ns.update(np=np, origin=source.as_uri(), digest=digest, cache=str(cache))
    with capture_output() as shown:
        result = shell.run_cell(CELL.format(backend=backend), store_history=False)
    assert result.success, result.error_in_exec
    text = shown.stdout + shown.stderr
    assert text.count("Downloading data from") == 1, text  # rank 0's; rank 1 found it cached
    assert "[rank 0] Downloading data from" in text, text
    assert shell.user_ns["total"] == pytest.approx(float(x.sum()))
    assert shell.user_ns["same_guard"] is True
    assert sorted(p.name for p in (cache / "datasets").iterdir()) == ["data.npz"]


def test_a_download_that_fails_fails_every_rank_in_one_line(shell, tmp_path):
    shell.user_ns.update(np=np, origin=(tmp_path / "missing.npz").as_uri(), digest=None, cache=str(tmp_path))
    with capture_output():
        result = shell.run_cell(CELL.format(backend="horovod"), store_history=False)
    assert not result.success
    error = result.error_in_exec
    assert error.rank == 0 and "URL fetch failure" in str(error), error
    assert "rank 0 could not download the file: Exception: URL fetch failure" in str(error.others.get(1)), error.others
