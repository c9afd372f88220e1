"""Deprecated module name: the job runner lives in jupyter_dl.launch (runner.JobRunner, work.CellWork, ...).

Kept so that `from jupyter_dl.launcher import CellWork` in users' code goes on working."""

import warnings

from .launch.feed import MetricsFeed as _MetricsFeed  # noqa: F401
from .launch.outcomes import describe_stall
from .launch.runner import JobRunner
from .launch.work import CellWork, FunctionWork, RunResult

__all__ = ["JobRunner", "CellWork", "FunctionWork", "RunResult", "describe_stall"]


def __getattr__(name):
    if name == "Launcher":
        warnings.warn(
            "jupyter_dl.launcher.Launcher was renamed jupyter_dl.launch.runner.JobRunner",
            DeprecationWarning,
            stacklevel=2,
        )
        return JobRunner
    raise AttributeError(name)
