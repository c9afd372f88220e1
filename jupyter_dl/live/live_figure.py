"""The cell's live figures as a small widget of our own: plotly figure dicts (`data`, `layout`) synced to the browser
and drawn there with the plotly.js JupyterLab's plotly renderer already loaded (live_figure.js).

Plotly's FigureWidget sends its own 5 MB build of plotly.js with every widget, and the browser compiled each copy
on its main thread: the page froze for seconds twice per job (the loss and the resources figure). This one sends
a few kilobytes of code and the figure's data.
"""

import math
import pathlib

import anywidget
import traitlets

ESM = (pathlib.Path(__file__).with_name("live_figure.js")).read_text(encoding="utf-8")


class LiveFigure(anywidget.AnyWidget):
    _esm = traitlets.Unicode(ESM).tag(sync=True)
    # Not `layout`: every ipywidget has one (its CSS box), which the browser side reads as such.
    figure_data: traitlets.List[dict] = traitlets.List().tag(sync=True)
    figure_layout = traitlets.Dict().tag(sync=True)

    def __init__(self, layout: dict):
        super().__init__(figure_layout=expanded_layout(layout))

    def show(self, traces: list, layout_changes: dict | None = None):
        """Redraw with these traces (plotly dicts) and, when given, these layout keys changed (shapes, annotations)."""
        with self.hold_sync():  # one message for both
            if layout_changes:
                self.figure_layout = {**self.figure_layout, **json_safe(layout_changes)}
            self.figure_data = json_safe(traces)


def expanded_layout(layout: dict) -> dict:
    """The layout as plotly.js takes it: plotly.js knows no templates by name, so the named one is written out."""
    import plotly.graph_objects as go

    return go.Figure(layout=layout).to_plotly_json()["layout"]


def json_safe(value):
    """`value` with NaN and infinities as None (JSON has neither; a diverging loss is NaN), tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        try:
            if all(map(math.isfinite, value)):  # the common case, a series of numbers, at C speed
                return list(value)
        except TypeError:  # not all numbers: dicts, strings, None
            pass
        return [json_safe(v) for v in value]
    return value
