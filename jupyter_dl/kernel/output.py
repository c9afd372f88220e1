"""Kernel side: relay ranks' stdout/stderr into the cell while the job runs.

ipyparallel's client thread accumulates each engine's streams in its AsyncResult as they arrive, and collapses a
line rewritten with a carriage return (progress bars) to its newest version. Only the last, unfinished line can
change that way, so finished lines are forwarded once, and a rewritten last line is re-sent after a `\\r`.
With several ranks shown, whole lines get a `[rank N] ` prefix (a partial line waits for its end, so two ranks
never interleave inside a line).

Rank 0's rich displays (`display(...)`, matplotlib figures: the inline backend on the engines) are shown in the
cell too, once each, after the text that arrived with them; other ranks' would repeat them.

What native code (TensorFlow's C++ logging, gloo) wrote to a rank's fd 2 arrives tagged (wire/native_tags):
it goes to the rank logs only, and to the cell too with `--output all`. The user's own prints, warnings and Keras
progress stream as before.
"""

import os
import sys

from jupyter_dl.wire.native_tags import drop_native, untag

# Native libraries write this straight to fd 2 on first import; it says nothing to a notebook user.
_NOISE = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",)


class OutputRelay:
    def __init__(self, results_by_rank: dict, show: str = "rank0", stdout=None, stderr=None, redact=None):
        self._results = results_by_rank
        self._ranks = [0] if show == "rank0" else sorted(results_by_rank)
        self._prefix = show != "rank0"
        self._sinks = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._seen = {(r, s): "" for r in self._ranks for s in self._sinks}  # text as of the last pump
        self._lines_done = {key: 0 for key in self._seen}  # prefix mode: chars of whole lines sent
        self._redact = redact  # secrets never reach the cell
        self._native = untag if show == "all" else drop_native  # native lines: shown with --output all only
        self._displays_sent = 0  # rank 0's display outputs shown so far

    def pump(self, final=False):
        """Forward what arrived since the last call. final=True also flushes unfinished lines."""
        for rank in self._ranks:
            for stream, sink in self._sinks.items():
                key = (rank, stream)
                text = self._native(getattr(self._results[rank], stream) or "")
                chunk = self._tagged(rank, key, text, final) if self._prefix else self._delta(key, text)
                self._seen[key] = text
                if stream == "stderr":
                    for noise in _NOISE:
                        chunk = chunk.replace(noise, "")
                if chunk and self._redact:
                    chunk = self._redact(chunk)
                if chunk:
                    sink.write(chunk)
                    sink.flush()
        self._show_displays()

    def _show_displays(self):
        from IPython.core.interactiveshell import InteractiveShell

        outputs = list(getattr(self._results.get(0), "outputs", None) or [])
        new, self._displays_sent = outputs[self._displays_sent :], len(outputs)
        if not new or not InteractiveShell.initialized():  # a plain script has nowhere to show an image
            return
        from IPython.display import publish_display_data

        for content in new:
            data = {
                mime: self._redact(value) if self._redact and isinstance(value, str) else value
                for mime, value in (content.get("data") or {}).items()
            }
            publish_display_data(data, content.get("metadata") or {})

    def _delta(self, key, text):
        before = self._seen[key]
        if text.startswith(before):
            return text[len(before) :]
        # The unfinished last line was rewritten: return to its start and send its new version.
        common = len(os.path.commonprefix([before, text]))
        line_start = before.rfind("\n", 0, common) + 1
        return "\r" + text[line_start:]

    def _tagged(self, rank, key, text, final):
        end = len(text) if final else text.rfind("\n") + 1
        start = self._lines_done[key]
        if end <= start:
            return ""
        self._lines_done[key] = end
        tag = f"[rank {rank}] "
        # A carriage return rewrites the line on screen: keep the tag on the rewritten part too.
        return "".join(tag + line.replace("\r", "\r" + tag) + "\n" for line in text[start:end].splitlines())
