"""Output relay against the way ipyparallel accumulates streams (carriage-return lines collapse in place)."""
import io
import re
from types import SimpleNamespace

from jupyter_dl.output import OutputRelay

_cr = re.compile(r".*\r(?=[^\n])")  # ipyparallel's own collapse rule for streamed text


def _feed(result, text):
    result.stdout = _cr.sub("", (result.stdout or "") + text)


def _screen(raw):
    """What a notebook shows: each \\r returns to the start of the current line."""
    lines = [""]
    for part in re.split(r"(\r|\n)", raw):
        if part == "\n":
            lines.append("")
        elif part == "\r":
            lines[-1] = ""
        else:
            lines[-1] += part
    return "\n".join(lines)


def test_progress_bar_rewrites_reach_the_cell_as_the_final_line():
    result = SimpleNamespace(stdout="", stderr="")
    out = io.StringIO()
    relay = OutputRelay({0: result}, "rank0", stdout=out, stderr=io.StringIO())
    for chunk in ["Epoch 1/2\n", "1/3 loss 9", "\r2/3 loss 5", "\r3/3 loss 1", "\nEpoch 2/2\n", "done\n"]:
        _feed(result, chunk)
        relay.pump()
    relay.pump(final=True)
    assert _screen(out.getvalue()) == "Epoch 1/2\n3/3 loss 1\nEpoch 2/2\ndone\n"


def test_all_ranks_are_tagged_line_by_line():
    results = {0: SimpleNamespace(stdout="", stderr=""), 1: SimpleNamespace(stdout="", stderr="")}
    out = io.StringIO()
    relay = OutputRelay(results, "all", stdout=out, stderr=io.StringIO())
    _feed(results[0], "hello fr")
    _feed(results[1], "hello from 1\n")
    relay.pump()
    _feed(results[0], "om 0\ntail")
    relay.pump()
    relay.pump(final=True)
    lines = out.getvalue().splitlines()
    assert sorted(lines) == ["[rank 0] hello from 0", "[rank 0] tail", "[rank 1] hello from 1"]


def test_native_library_noise_is_dropped_from_stderr():
    result = SimpleNamespace(stdout="", stderr="")
    err = io.StringIO()
    relay = OutputRelay({0: result}, "rank0", stdout=io.StringIO(), stderr=err)
    result.stderr = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                     "UserWarning: a real warning\n")
    relay.pump(final=True)
    assert err.getvalue() == "UserWarning: a real warning\n"
