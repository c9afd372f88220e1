"""The metric record kinds are defined once, in jupyter_dl/data/metric_kinds.json: every kind the sources write
must be listed there, and every listed kind has a reader (the panel reads none itself: the server draws its figures
with the same live/state.py as the cell)."""

import ast
import json
import pathlib

import pytest

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "jupyter_dl"

pytestmark = pytest.mark.fast


def _listed():
    return json.loads((PACKAGE / "data" / "metric_kinds.json").read_text())["kinds"]


def emitted_kinds(source: str) -> set:
    """Kinds of the metric records a module builds: dict literals with a constant "kind" and a "t" (every metric
    record carries its time; other dicts with a "kind", such as comparison curves, have none)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Dict):
            continue
        keys = {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
        kind = keys.get("kind")
        if "t" in keys and isinstance(kind, ast.Constant) and isinstance(kind.value, str):
            found.add(kind.value)
    return found


def test_every_emitted_kind_is_listed():
    emitted = {}
    for path in PACKAGE.rglob("*.py"):
        for kind in emitted_kinds(path.read_text()):
            emitted.setdefault(kind, []).append(str(path.relative_to(PACKAGE)))
    missing = {kind: where for kind, where in emitted.items() if kind not in _listed()}
    assert not missing, f"metric kinds written but not in data/metric_kinds.json: {missing}"
    # The scan sees the writers it should (so an empty scan cannot pass for a clean one).
    assert {"begin", "batch", "epoch", "resources", "stall", "restart"} <= set(emitted)


def test_the_list_has_no_duplicates_and_the_scan_tells_records_from_other_dicts():
    assert len(_listed()) == len(set(_listed()))
    assert emitted_kinds('r = {"kind": "novel", "rank": 0, "t": now}') == {"novel"}
    assert emitted_kinds('curve = {"run": i, "kind": "batch", "y": ys}') == set()


READERS = ("live/state.py", "kernel/job/feed.py")


def test_every_listed_kind_is_read():
    sources = "".join((PACKAGE / reader).read_text() for reader in READERS)
    unread = [kind for kind in _listed() if f'"{kind}"' not in sources]
    assert not unread, f"metric kinds nobody reads ({', '.join(READERS)}): {unread}"
