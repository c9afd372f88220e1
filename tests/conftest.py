"""Shared fixtures. Everything here is real: a local ipyparallel cluster with 2 engines, Horovod over gloo."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The job store goes under the Jupyter data dir: keep the tests' jobs out of the user's.
os.environ["JUPYTER_DATA_DIR"] = tempfile.mkdtemp(prefix="jdl-test-data-")
# ipyparallel's profiles and connection files too: a run killed half-way leaves ipcontroller-<id>-*.json behind,
# and cluster ids hold the pid, which repeats after a reboot; a later run would read the dead cluster's ports.
os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="jdl-test-ipython-")

import numpy as np
import pytest

# Both go with the run (each run left its two folders in the temp folder: 486 pairs here).
for _folder in (os.environ["JUPYTER_DATA_DIR"], os.environ["IPYTHONDIR"]):
    atexit.register(shutil.rmtree, _folder, ignore_errors=True)


@pytest.fixture(scope="session")
def dl_session():
    """The process-wide jupyter-dl session with a real 2-engine local cluster, stopped at the end."""
    from jupyter_dl.kernel import api

    session = api.session()
    if session.cluster.client is None:
        session.cluster.start(n=2)
    yield session
    session.cluster.stop()


@pytest.fixture(scope="session")
def digits():
    """sklearn's digits: a real dataset that needs no download. Fixed split."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target.astype("int64")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    return {"x_train": x[:1400], "y_train": y[:1400], "x_test": x[1400:], "y_test": y[1400:]}


@pytest.fixture
def shell(dl_session):
    """A real IPython shell with the extension loaded (magics run through IPython's own machinery)."""
    from IPython.core.interactiveshell import InteractiveShell
    from notebook_cells import forget_cell_names

    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext jupyter_dl", store_history=False)
    yield ip
    forget_cell_names(ip)


# The quick tier (`make test-fast`, `pytest -m fast`): each module says which of its tests need no engines, server,
# browser or network namespaces (`pytestmark = pytest.mark.fast`, or the mark on single tests). Under a minute.
CLUSTER_FIXTURES = {"dl_session", "shell", "digits"}


def pytest_collection_modifyitems(config, items):
    slow = [
        item.nodeid for item in items if item.get_closest_marker("fast") and CLUSTER_FIXTURES & set(item.fixturenames)
    ]
    if slow:
        raise pytest.UsageError(f"marked fast but starts engines (uses {sorted(CLUSTER_FIXTURES)}): {slow}")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Expose each phase's report on the test item, so fixtures can keep evidence of a failure."""
    outcome = yield
    setattr(item, f"rep_{call.when}", outcome.get_result())


# ------------------------------------------------------------------------------------------ no silent skips
# A skip is allowed only for what no install can give this machine (a GPU). Such a skip says so by starting its
# reason with NO_GPU; any other skip (a missing Debian package, a missing wheel, no namespaces) means the setup
# (scripts/setup.sh) left something out, and fails the run at its end, listed.
NO_GPU = "cannot exist here (no GPU):"
_skipped: list = []


def pytest_runtest_logreport(report):
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append((report.nodeid, reason.removeprefix("Skipped: ")))


def unexpected_skips(skipped) -> list:
    """The skips whose reason an install could fix (anything not marked NO_GPU)."""
    return [(nodeid, reason) for nodeid, reason in skipped if not reason.startswith(NO_GPU)]


def pytest_terminal_summary(terminalreporter):
    if not _skipped:
        return
    terminalreporter.section("skipped tests")
    for nodeid, reason in _skipped:
        terminalreporter.write_line(f"{nodeid}: {reason}")
    bad = unexpected_skips(_skipped)
    if bad:
        terminalreporter.write_line(
            f"{len(bad)} skipped for a reason the setup should have fixed (only '{NO_GPU} ...' may skip); "
            "install what they name in scripts/setup.sh",
            red=True,
        )


def pytest_sessionfinish(session, exitstatus):
    if unexpected_skips(_skipped) and exitstatus == 0:
        session.exitstatus = 1
