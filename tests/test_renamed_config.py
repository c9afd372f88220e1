"""The job runner was called Launcher: settings written as c.Launcher.* keep working, with a message saying the new
name, and the new name wins where both are set. Real traitlets config, as ipython_config.py produces it."""

import warnings

import pytest
from traitlets.config import Config

from jupyter_dl.launch.runner import JobRunner


class _NoCluster:
    local = True
    client = None


def _runner(config):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner = JobRunner(_NoCluster(), config=Config(config))
    return runner, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_old_section_still_applies_and_says_the_new_name():
    runner, messages = _runner({"Launcher": {"stop_grace": 2.5, "pool_url": "http://pool/"}})
    assert runner.stop_grace == 2.5 and runner.pool_url == "http://pool/"
    assert any("c.Launcher.stop_grace is deprecated" in m and "use c.JobRunner.stop_grace" in m for m in messages)
    assert runner.pools.url == "http://pool/"


def test_new_section_wins_over_the_old_one():
    runner, messages = _runner({"Launcher": {"stop_grace": 2.5}, "JobRunner": {"stop_grace": 7.0}})
    assert runner.stop_grace == 7.0
    assert messages == []


def test_new_section_alone_gives_no_message():
    runner, messages = _runner({"JobRunner": {"collective_timeout": 30.0}})
    assert runner.collective_timeout == 30.0 and messages == []


def test_unknown_old_setting_is_named_not_silently_dropped():
    with pytest.warns(UserWarning, match="c.Launcher.no_such_knob is not a setting of JobRunner"):
        JobRunner(_NoCluster(), config=Config({"Launcher": {"no_such_knob": 1}}))


def test_old_import_name_resolves_to_the_runner():
    import jupyter_dl.launcher as old

    with pytest.warns(DeprecationWarning, match="JobRunner"):
        assert old.Launcher is JobRunner
    from jupyter_dl.launcher import CellWork  # noqa: F401  (users' imports of the work types keep working)
