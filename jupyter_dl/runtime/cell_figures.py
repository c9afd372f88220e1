"""Engine side: the cell's open matplotlib figures at its end, shown as a notebook shows them.

In a notebook, the inline backend shows every figure a cell drew when the cell ends (a post-execute hook) and closes
it. A rank runs the cell inside an ipyparallel `apply`, where no such hook runs: a `plt.plot(...)` without
`plt.show()` would never appear, and its figure would stay open in the engine across jobs. So rank 0 shows them
(the kernel relays its displays into the cell, kernel/output.py) and every rank closes them.
"""

import sys


def show_and_close(show: bool):
    """Display the figures still open (when `show`), then close them all. Nothing happens where the cell never
    imported pyplot: importing it here would cost a job ~0.5 s for nothing."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        if show and "inline" in plt.get_backend():
            from IPython.display import display

            for number in plt.get_fignums():
                display(plt.figure(number))
    finally:
        plt.close("all")
