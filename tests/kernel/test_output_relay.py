"""Output relay against the way ipyparallel accumulates streams (carriage-return lines collapse in place)."""

import io
import re
from types import SimpleNamespace

import pytest

from jupyter_dl.kernel.output import OutputRelay

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

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
    result.stderr = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "UserWarning: a real warning\n"
    )
    relay.pump(final=True)
    assert err.getvalue() == "UserWarning: a real warning\n"


NATIVE = (
    "E0000 00:00:1732380000.123 4242 cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)"
)


def _native_stderr_through_a_pipe(user_writes):
    """What a rank's sys.stderr holds after NativeStderr (the real one, over a real fd-2 pipe) forwarded a native
    line while the user's own code wrote to sys.stderr."""
    import os
    import sys

    from jupyter_dl.runtime.native_stderr import NativeStderr

    captured = io.StringIO()
    sys.stderr.flush()
    with NativeStderr(captured):
        captured.write(user_writes[0])
        os.write(2, (NATIVE + "\n").encode())
        import time

        deadline = time.monotonic() + 5
        while NATIVE not in captured.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        captured.write(user_writes[1])
    return captured.getvalue()


def test_native_lines_reach_the_logs_but_not_the_cell():
    from jupyter_dl.jobs.store import JobStore

    text = _native_stderr_through_a_pipe(["UserWarning: mine\n", "second line of mine\n"])
    assert NATIVE in text
    result = SimpleNamespace(stdout="", stderr=text)
    err = io.StringIO()
    OutputRelay({0: result}, "rank0", stdout=io.StringIO(), stderr=err).pump(final=True)
    assert err.getvalue() == "UserWarning: mine\nsecond line of mine\n"  # the user's writes, in order, nothing else

    import tempfile

    store = JobStore(root=tempfile.mkdtemp())
    store.write_logs("j1", {0: text}, "stderr")
    assert store.logs("j1", 0, "stderr") == "UserWarning: mine\n" + NATIVE + "\nsecond line of mine\n"


def test_native_lines_show_with_output_all_and_a_cut_user_line_survives():
    from jupyter_dl.wire.native_tags import NATIVE_TAG

    # A native line can land in the middle of a user's unfinished line: the user's line comes out whole.
    result = SimpleNamespace(stdout="", stderr="")
    err = io.StringIO()
    relay = OutputRelay({0: result}, "rank0", stdout=io.StringIO(), stderr=err)
    result.stderr = "progress 1"
    relay.pump()
    result.stderr += NATIVE_TAG + NATIVE + "\n"
    relay.pump()
    result.stderr += " and 2\n"
    relay.pump(final=True)
    assert _screen(err.getvalue()) == "progress 1 and 2\n"

    results = {
        0: SimpleNamespace(stdout="", stderr=NATIVE_TAG + NATIVE + "\n"),
        1: SimpleNamespace(stdout="", stderr="mine\n"),
    }
    err = io.StringIO()
    OutputRelay(results, "all", stdout=io.StringIO(), stderr=err).pump(final=True)
    assert sorted(err.getvalue().splitlines()) == [f"[rank 0] {NATIVE}", "[rank 1] mine"]
