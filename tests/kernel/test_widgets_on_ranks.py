"""A widget shown on the ranks (`tqdm.auto`, `display(ipywidgets.IntProgress())`) in a shell that is not a notebook
kernel (a terminal IPython, a script; here a real IPython shell over real engines): the cell and every later cell
still show the ranks' output. ipyparallel's client failed on the widget's comm message there, and pyzmq closed its
IOPub stream: all later output was lost (cluster/iopub_guard.py)."""

from IPython.utils.capture import capture_output

WIDGETS = """%%distribute -n 2
import ipywidgets
from IPython.display import display
from tqdm.auto import tqdm

display(ipywidgets.IntProgress())
for step in tqdm(range(3)):
    pass
print("after the widgets")
"""


def _shown(shell, code):
    with capture_output() as shown:
        result = shell.run_cell(code, store_history=False)
    assert result.success, result.error_in_exec
    return shown.stdout


def test_widgets_on_the_ranks_leave_the_output_of_later_cells(shell):
    assert "after the widgets" in _shown(shell, WIDGETS)
    assert "later" in _shown(shell, "%%distribute -n 2\nprint('later')\n")
    assert "and later" in _shown(shell, "%%distribute -n 2 --output all\nprint('and later')\n")
