"""TensorFlow's native log in the notebook's own kernel.

TensorFlow writes its C++ log (start-up notes, `failed call to cuInit` on a host without a GPU driver) straight to
file descriptor 2, which a Jupyter kernel shows in the running cell as red text. `%load_ext jupyter_dl` sets the
kernel's log level before TensorFlow loads (when the user has not), and holds TensorFlow's first import to that
level too: the lines it writes while its libraries load come before its logging is set up and ignore the level
(`I0000 ... cudart_stub.cc:31] Could not find cuda drivers`). While jupyter-dl itself uses TensorFlow in the kernel
(checking the backend, rebuilding what a job sent back), descriptor 2 is muted: those lines the user did not cause.
"""

import contextlib
import os
import re
import sys
import tempfile

from traitlets import Enum
from traitlets.config import Configurable

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
# absl's form, which TensorFlow's C++ log uses: severity, date, time, thread, file:line] message
NATIVE_LOG_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+ +\d+ [^\]]*\] ")
ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


class KernelTensorFlowLog(Configurable):
    """How much of TensorFlow's native log the notebook's own kernel shows (c.KernelTensorFlowLog.*)."""

    log_level = Enum(
        ["", "0", "1", "2", "3"],
        "2",
        help="TF_CPP_MIN_LOG_LEVEL that `%load_ext jupyter_dl` sets for the notebook's kernel when the environment "
        "has none and TensorFlow is not imported yet; TensorFlow's first import is held to the level in effect "
        "(its own or this). '2' hides TensorFlow's INFO and WARNING lines (its start-up notes on `import "
        "keras`), '3' its ERROR lines too, '' turns this off (TensorFlow's default: every line). The engines' "
        "level is c.EngineCluster.engine_environment.",
    ).tag(config=True)


def quiet_kernel(parent=None) -> bool:
    """At extension load: set the kernel's TensorFlow log level unless the user chose one, and filter TensorFlow's
    first import by the level in effect. Nothing once TensorFlow is loaded (it read the variable then). True when
    TensorFlow's import will be filtered."""
    level = KernelTensorFlowLog(parent=parent).log_level
    if not level or "tensorflow" in sys.modules:
        return False
    os.environ.setdefault(LEVEL_VARIABLE, level)
    try:
        minimum = int(os.environ[LEVEL_VARIABLE])
    except ValueError:  # the user's own value, not a level: TensorFlow decides what it means
        return False
    if not any(isinstance(f, _FilterTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _FilterTensorFlowImport(minimum))
    return True


def kept_lines(text: str, minimum: int) -> str:
    """`text` (what descriptor 2 received while TensorFlow loaded) without its log records below `minimum` and,
    above 0, without absl's notice that early records all go to stderr. Text before any record stays."""
    kept = []
    keeping = True  # lines after a record are its own (a message of several lines) up to the next record
    for line in text.splitlines(keepends=True):
        found = NATIVE_LOG_LINE.match(line)
        if found:
            keeping = SEVERITY[found.group(1)] >= minimum
        elif line.startswith(ABSL_NOTICE):
            keeping = minimum == 0
        if keeping:
            kept.append(line)
    return "".join(kept)


class _FilterTensorFlowImport:
    """A meta-path finder that runs TensorFlow's first import with descriptor 2 going to a file, then writes back
    what passes kept_lines. A file, not a pipe: nothing needs reading while the import runs. It stays in place
    until the import runs: a look-up alone (importlib.util.find_spec, as `jupyter-dl doctor`'s hint does) is not
    the import."""

    def __init__(self, minimum):
        self.minimum = minimum
        self._looking = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow" or self._looking:
            return None
        import importlib.util

        self._looking = True  # the look-up below comes through here again
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module
        minimum = self.minimum

        def exec_module(module):
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            with _descriptor_2_filtered(minimum):
                original_exec(module)

        loader.exec_module = exec_module
        return spec


@contextlib.contextmanager
def _descriptor_2_filtered(minimum):
    """Descriptor 2 into a file inside; then what passes kept_lines goes on to it (also when the import failed)."""
    if _python_stderr_is_fd2():  # a terminal: left as it is (Python's own warnings would be held back too)
        yield
        return
    with tempfile.TemporaryFile() as captured:
        try:
            with _descriptor_2_to(captured.fileno()):
                yield
        finally:
            captured.seek(0)
            kept = kept_lines(captured.read().decode(errors="replace"), minimum)
            if kept:
                os.write(2, kept.encode())


@contextlib.contextmanager
def native_stderr_muted():
    """File descriptor 2 goes nowhere inside: for jupyter-dl's own TensorFlow use in the kernel, whose native lines
    the user did not cause. Only where Python's stderr is not that descriptor (a kernel streams it to the cell), so
    warnings and rank output relayed meanwhile still show; in a script both are the terminal, left as it is."""
    if _python_stderr_is_fd2():
        yield
        return
    with open(os.devnull, "wb") as devnull, _descriptor_2_to(devnull.fileno()):
        yield


@contextlib.contextmanager
def _descriptor_2_to(fd):
    if sys.__stderr__ is not None:
        sys.__stderr__.flush()  # what Python wrote to the descriptor before goes out first
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 (a daemon without one): nothing to redirect
        yield
        return
    os.dup2(fd, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _python_stderr_is_fd2() -> bool:
    try:
        return sys.stderr.fileno() == 2
    except Exception:  # a kernel's stream to the cell, a test's capture: no descriptor of its own
        return False
