"""Which JupyterLab theme the user runs, so the figure matches it.

The kernel cannot ask the browser, but JupyterLab keeps the chosen theme in its user settings, which live beside
the kernel in the usual single-host and JupyterHub setups. Backgrounds stay transparent either way.
"""
import json
import pathlib
import re

DARK_TEMPLATE = "plotly_dark"
LIGHT_TEMPLATE = "plotly_white"


def _settings_file():
    from jupyter_core.paths import jupyter_config_dir

    return pathlib.Path(jupyter_config_dir()) / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension" / \
        "themes.jupyterlab-settings"


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
