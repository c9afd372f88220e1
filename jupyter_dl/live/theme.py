"""Which JupyterLab theme the user runs, so the figure matches it.

The kernel cannot ask the browser, but JupyterLab keeps the chosen theme in its user settings, which live beside
the kernel in the usual single-host and JupyterHub setups.

A figure keeps its template after the user switches theme (the static copy left in the notebook most of all), so
its background is its template's own, not transparent: plotly_white's dark text on a white card stays readable in
a dark JupyterLab, plotly_dark's light text on near-black in a light one. In the matching theme the card has the
page's own colour (white; JupyterLab dark's #111), so nothing shows.
"""

import json
import pathlib
import re

DARK_TEMPLATE = "plotly_dark"
# Every axis of our figures: plotly.js' default for a linear axis ("hide past div") measures each tick label's box
# on every redraw to hide those past the figure's edge (none are: margins are fixed), a forced page layout per
# label, a third of a live redraw in JupyterLab. A fixed x tick angle likewise spares the measuring that picks one.
# The plotly templates turn on `automargin`, which grows the margins to the tick labels' and titles' boxes: plotly.js
# then measures them and, when a margin moves, draws the whole figure a second time. Off, with margins that fit our
# labels, a first draw (the live figure's first, the static copy's at the job's end) took 60-90 ms of CPU instead
# of 130-190, and a live redraw 60 instead of 90.
QUICK_AXIS = dict(ticklabeloverflow="allow", automargin=False)
QUICK_X_AXIS = dict(QUICK_AXIS, tickangle=0)
LIGHT_TEMPLATE = "plotly_white"


def _settings_file():
    from jupyter_core.paths import jupyter_config_dir

    return (
        pathlib.Path(jupyter_config_dir())
        / "lab"
        / "user-settings"
        / "@jupyterlab"
        / "apputils-extension"
        / "themes.jupyterlab-settings"
    )


def jupyterlab_theme_is_dark(settings_file=None) -> bool:
    path = pathlib.Path(settings_file) if settings_file else _settings_file()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    text = re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE)  # the settings format allows // comments
    try:
        theme = json.loads(text).get("theme", "")
    except ValueError:
        return False
    return "dark" in theme.lower()


def template_for(preference: str = "auto", settings_file=None) -> str:
    if preference == "dark" or (preference == "auto" and jupyterlab_theme_is_dark(settings_file)):
        return DARK_TEMPLATE
    return LIGHT_TEMPLATE


def background_for(template: str) -> dict:
    """The template's own paper and plot background colours, as layout settings ({} for an unknown template)."""
    try:
        import plotly.io as pio

        layout = pio.templates[template].layout
    except (ImportError, KeyError, ValueError):
        return {}
    return {
        key: value for key in ("paper_bgcolor", "plot_bgcolor") if (value := getattr(layout, key, None)) is not None
    }


def backgrounds(template: str) -> dict:
    """Paper and plot background for a figure: the template's own, not transparent (a static copy of the figure
    outlives a theme switch), white where the template names none."""
    return {"paper_bgcolor": "white", "plot_bgcolor": "white", **background_for(template)}


def frame(template: str, title: str, title_size: int, margin: dict, **size) -> dict:
    """The layout every figure here shares: its template, title, margins and background; `size` is width and/or
    height (fixed: autosize off, so the live figure and its static copy keep the same box)."""
    fixed = dict(size, autosize=False) if "width" in size else dict(size)
    return dict(
        template=template,
        margin=margin,
        title=dict(text=title, font=dict(size=title_size)),
        **fixed,
        **backgrounds(template),
    )
