"""The IPython lines of a `%%distribute` cell that belong to the notebook, not to the ranks.

People put `%%time` under `%%distribute` (a cell magic must come first, so the two meet that way round) and
keep `%matplotlib inline` or `%load_ext tensorboard` at the top of a training cell. The ranks run the cell as
Python, so these are taken out and done here, where one process would do them: the job is timed as IPython's
`%%time` times a cell, and the notebook-setting line magics run in the notebook before the job starts. Any other
IPython syntax is still refused in one line (cell.py): a shell command would run once per rank."""

import os
import time
from dataclasses import dataclass, field

# Line magics that set up the notebook itself (plotting, config, extensions, environment): run in the kernel.
KERNEL_LINE_MAGICS = frozenset({"matplotlib", "config", "load_ext", "reload_ext", "env"})


@dataclass
class KernelLines:
    code: str  # the cell for the ranks: the taken lines left blank, so line numbers stay the user's
    timed: bool = False  # `%%time` was the cell's first line
    line_magics: list = field(default_factory=list)  # [(name, arguments)] in the cell's order


def take_kernel_lines(cell: str) -> KernelLines:
    lines = cell.split("\n")
    taken = KernelLines(code=cell)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].strip() == "%%time":
        taken.timed, lines[first] = True, ""
    for i, line in enumerate(lines):
        if line.startswith("%") and not line.startswith("%%"):
            name, _, arguments = line[1:].partition(" ")
            if name in KERNEL_LINE_MAGICS:
                taken.line_magics.append((name, arguments.strip()))
                lines[i] = ""
    taken.code = "\n".join(lines)
    return taken


class CellTimer:
    """What IPython's `%%time` prints for a cell: the kernel's CPU times (the ranks' are in the job's summary) and
    the wall time."""

    def __init__(self):
        self._times, self._wall = os.times(), time.perf_counter()

    def report(self) -> str:
        now = os.times()
        user, system = now.user - self._times.user, now.system - self._times.system
        wall = time.perf_counter() - self._wall
        return (
            f"CPU times: user {_format(user)}, sys: {_format(system)}, total: {_format(user + system)}\n"
            f"Wall time: {_format(wall)}"
        )


def _format(seconds: float) -> str:
    if seconds >= 60:
        minutes, rest = divmod(seconds, 60)
        return f"{int(minutes)}min {rest:.0f}s"
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6)):
        if seconds >= 1 / scale or unit == "µs":
            return f"{seconds * scale:.3g} {unit}"
    return f"{seconds:.3g} s"  # pragma: no cover - the loop always returns
