"""The README's layout section names every module (or its folder), so a new module cannot go undescribed."""

import pathlib
import re

import pytest

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

ROOT = pathlib.Path(__file__).resolve().parents[2]
LISTED_BY_MODULE = {"kernel/", "kernel/job/", "wire/", "runtime/", "backends/", "host/", "cluster/", "server/"}
NOT_DESCRIBED = {"__init__.py", "__main__.py", "_version.py"}


def _layout_section():
    text = (ROOT / "README.md").read_text()
    return text[text.index("## Layout") :]


def test_every_module_is_named_in_the_readme_layout():
    layout = _layout_section()
    named = {name.rsplit("/", 1)[-1] for name in re.findall(r"`([\w/]+\.py)`", layout)}
    folders = set(re.findall(r"`((?:jupyter_dl/)?[\w/]+/)`", layout))
    missing = []
    for path in sorted((ROOT / "jupyter_dl").rglob("*.py")):
        relative = path.relative_to(ROOT / "jupyter_dl")
        if path.name in NOT_DESCRIBED or "labextension" in relative.parts:
            continue
        folder = f"{relative.parent}/" if relative.parent != pathlib.Path(".") else ""
        # A folder named as a whole (`live/`) covers its modules; the layers of the kernel/engine split list theirs.
        listed_by_folder = folder and f"jupyter_dl/{folder}" in folders and folder not in LISTED_BY_MODULE
        if path.name not in named and not listed_by_folder:
            missing.append(str(relative))
    assert not missing, f"README layout does not name: {missing}"
