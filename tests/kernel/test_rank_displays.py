"""What a distributed cell displays shows in the cell, as in one process (real 2-rank jobs on the local cluster).

A training cell often ends with a plot of its history or a `display(...)`. The engines draw with matplotlib's
inline backend, as a notebook kernel does, but their displays went nowhere, and a figure drawn without
`plt.show()` (the notebook shows those when the cell ends) stayed open in the engine from job to job. Rank 0's
displays now reach the cell, once each; every rank's figures are closed at the end of the cell.
"""

import pytest
from IPython.utils.capture import capture_output

CELL = """%%distribute -n 2 --no-plot --backend {backend}
import keras
import matplotlib.pyplot as plt
from IPython.display import HTML, display

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
history = model.fit(x_train, y_train, epochs=2, batch_size=64, verbose=0)
display(HTML("<b>trained</b>"))
plt.figure()
plt.plot(history.history["loss"])
plt.show()
plt.figure()
plt.plot([1, 2, 3])  # never shown in the cell's code: the notebook shows it when the cell ends
"""


def _open_figures(dl_session):
    def count():
        import sys

        plt = sys.modules.get("matplotlib.pyplot")
        return len(plt.get_fignums()) if plt else 0

    return dl_session.cluster.client[:].apply_sync(count)


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_rank_0_s_displays_and_figures_show_in_the_cell_once(shell, digits, dl_session, backend):
    shell.user_ns.update(x_train=digits["x_train"], y_train=digits["y_train"])
    with capture_output() as captured:
        result = shell.run_cell(CELL.format(backend=backend), store_history=False)
    assert result.success, result.error_in_exec
    shown = [output.data for output in captured.outputs]
    images = [data for data in shown if "image/png" in data]
    html = [data["text/html"] for data in shown if "<b>trained</b>" in data.get("text/html", "")]
    assert len(html) == 1, shown  # rank 0's only: two ranks ran the display
    assert len(images) == 2, [sorted(data) for data in shown]  # the shown figure and the one left open
    assert all(len(data["image/png"]) > 1000 for data in images)
    assert _open_figures(dl_session) == [0, 0]


def test_a_figure_drawn_before_an_error_still_shows(shell, dl_session):
    code = "%%distribute -n 2 --no-plot --manual\nimport matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\n1 / 0\n"
    with capture_output() as captured:
        result = shell.run_cell(code, store_history=False)
    assert not result.success
    assert sum("image/png" in output.data for output in captured.outputs) == 1
    assert _open_figures(dl_session) == [0, 0]
