"""What each `jupyter-dl doctor` line is, and the version helpers its checks share."""

import importlib.metadata
import sys
from dataclasses import dataclass

OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "-"


@dataclass
class Check:
    name: str
    status: str
    found: str
    fix: str = ""


def version_tuple(text):
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def dist_version(*names):
    """The installed version of the first of these distributions that is installed, or None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def pip_command(spec):
    return f"{sys.executable} -m pip install '{spec}'"
