"""Kernel side: relay ranks' stdout/stderr into the cell while the job runs.

ipyparallel's client thread accumulates each engine's streams in its AsyncResult as they arrive; we forward only
the new part on each poll. With several ranks shown, whole lines get a `[rank N] ` prefix (a partial line waits for
its end, so two ranks never interleave inside a line).
"""
import sys


class OutputRelay:
    def __init__(self, results_by_rank: dict, show: str = "rank0", stdout=None, stderr=None):
        self._results = results_by_rank
        self._ranks = [0] if show == "rank0" else sorted(results_by_rank)
        self._prefix = show != "rank0"
        self._out = stdout or sys.stdout
        self._err = stderr or sys.stderr
        self._sent = {(r, s): 0 for r in self._ranks for s in ("stdout", "stderr")}
        self._partial = {(r, s): "" for r in self._ranks for s in ("stdout", "stderr")}

    def pump(self, final=False):
        """Forward what arrived since the last call. final=True also flushes unfinished lines."""
        for rank in self._ranks:
            result = self._results[rank]
            for stream, sink in (("stdout", self._out), ("stderr", self._err)):
                text = getattr(result, stream) or ""
                key = (rank, stream)
                new = text[self._sent[key]:]
                self._sent[key] = len(text)
                if not self._prefix:
                    if new:
                        sink.write(new)
                        sink.flush()
                    continue
                buffered = self._partial[key] + new
                if final:
                    lines, rest = buffered.splitlines(), ""
                else:
                    *lines, rest = buffered.split("\n")
                self._partial[key] = rest
                if lines:
                    tag = f"[rank {rank}] "
                    # A carriage return (progress bars) rewrites the line: keep the tag on the rewritten part too.
                    sink.write("".join(tag + line.replace("\r", "\r" + tag) + "\n" for line in lines))
                    sink.flush()

    def text(self, rank, stream="stdout"):
        return getattr(self._results[rank], stream) or ""
