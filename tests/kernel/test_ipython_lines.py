"""Which IPython lines of a `%%distribute` cell the notebook does itself (kernel/ipython_lines.py)."""

import pytest

from jupyter_dl.kernel.cell import analyse
from jupyter_dl.kernel.ipython_lines import CellTimer, take_kernel_lines

pytestmark = pytest.mark.fast


def test_time_and_notebook_line_magics_are_taken_and_line_numbers_kept():
    cell = "\n%%time\n%matplotlib inline\n%load_ext tensorboard\nx = 1\n%env A=1\ny = x + undefined_name\n"
    taken = take_kernel_lines(cell)
    assert taken.timed
    assert taken.line_magics == [("matplotlib", "inline"), ("load_ext", "tensorboard"), ("env", "A=1")]
    lines = taken.code.split("\n")
    assert len(lines) == len(cell.split("\n")) and lines[4] == "x = 1" and lines[6].startswith("y = ")
    assert analyse(taken.code).reads  # plain Python now


def test_other_ipython_syntax_stays_for_the_one_line_refusal():
    indented = "for i in range(2):\n    %matplotlib inline"
    for cell in ("x = 1\n%%time\n", "!nvidia-smi\nx = 1", "%timeit x = 1", indented):
        taken = take_kernel_lines(cell)
        assert not taken.timed and not taken.line_magics and taken.code == cell, cell


def test_the_timer_reads_as_ipython_s_time():
    report = CellTimer().report()
    first, second = report.split("\n")
    assert first.startswith("CPU times: user ") and ", sys: " in first and ", total: " in first
    assert second.startswith("Wall time: ") and second.endswith(("s", "ms", "µs"))
