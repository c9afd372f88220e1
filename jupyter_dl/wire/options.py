"""Every option of one distributed run, declared once: name, type, default, help, how the magic reads it and what
makes it valid.

From these declarations follow the `%%distribute` parser and its help (kernel/options.py), the keyword arguments
and documentation of `jupyter_dl.distribute` (kernel/api.py), the job record (the options are stored as they are)
and what the ranks read (`RankSpec.options`: the same object travels). Adding an option means adding a field here
and reading it where it matters; nothing else. Kernel and engines both import this module: it imports nothing
heavy.
"""

import argparse
import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_dl.errors import UsageError
from jupyter_dl.wire.lr_scale import SCALE_FACTORS

BACKENDS = ("auto", "horovod", "tf")
LR_SCALES = tuple(SCALE_FACTORS)
OUTPUTS = ("rank0", "all")
BALANCE = ("auto", "on", "off")


@dataclass(frozen=True)
class Flag:
    """How a user sets an option: on the %%distribute line (`flags`) and as a keyword of distribute()."""

    flags: tuple[str, ...]
    help: str
    parse: Callable[[str], Any] | None = None  # the magic's text -> value (raises argparse.ArgumentTypeError)
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    action: str | None = None  # argparse's: store_true, store_false (a --no-... flag), append
    check: Callable[[Any], str | None] | None = None  # a wrong value -> what must hold ("must be ...")
    from_python: Callable[[Any], Any] | None = None  # distribute(name=value) -> the stored value
    python_default: Any = None  # distribute()'s default, where `python_default_differs`
    python_default_differs: bool = False

    def label(self, name: str) -> str:
        """How error messages name the option: its flag, or its keyword when the magic has none."""
        return self.flags[0] if self.flags else name


def option(default, *flags: str, help: str, **how) -> Any:
    """A user-facing field of RunOptions."""
    return field(default=default, metadata={"flag": Flag(tuple(flags), help, **how)})


# ---------------------------------------------------------------------------------------------- value readers
def parse_duration(text: str) -> float:
    """'30m', '2h', '90s', '1h30m' or plain seconds -> seconds."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"a duration looks like 30m, 2h, 1h30m or 90s (got {text!r})")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def number(convert, expected, lowest, inclusive=True, hint=""):
    """A text reader: `convert` the text, refusing values below `lowest` (or equal to it, when not inclusive)."""

    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < lowest or (value == lowest and not inclusive):
            bound = f"at least {lowest}" if inclusive else f"more than {lowest}"
            raise argparse.ArgumentTypeError(f"must be {bound}{hint}, got {text}")
        return value

    return parse


positive_int = number(int, "a whole number of ranks", 1)
count = number(int, "a whole number", 0)
seconds = number(float, "seconds", 0, inclusive=False)
seconds_or_off = number(float, "seconds (0 turns it off)", 0)


def _ranks(text):
    if text == "auto":
        return "auto"
    if ":" in text:  # MIN:MAX, an elastic job
        low, _, high = text.partition(":")
        return (positive_int(low), positive_int(high))
    return positive_int(text)


def _ranks_from_python(value):
    """distribute(n=...) takes 4, "auto", "2:8" or (2, 8)."""
    if isinstance(value, str) and value != "auto":
        try:
            return _ranks(value)
        except argparse.ArgumentTypeError:
            return value  # validate() names what is wrong
    return tuple(value) if isinstance(value, list) else value


def duration(text):
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration_from_python(value):
    return parse_duration(value) if isinstance(value, str) else value


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_ranks(value):
    if isinstance(value, tuple):
        if len(value) != 2 or not all(_whole(v) and v >= 1 for v in value):
            return "MIN:MAX must be two positive numbers of ranks, e.g. 2:8"
        if value[0] > value[1]:
            return f"MIN:MAX needs MIN <= MAX (got {value[0]}:{value[1]}); e.g. -n 2:8"
        return None
    if value is not None and value != "auto" and not (_whole(value) and value >= 1):
        return "must be a positive number of ranks"
    return None


def _check_secrets(names):
    bad = [name for name in names if not str(name).replace("_", "").isalnum()]
    return f"takes an environment variable name, got {bad[0]!r}" if bad else None


def _positive_or_none(text):
    return lambda value: None if value is None or value > 0 else text


# ------------------------------------------------------------------------------------------------ the options
@dataclass
class RunOptions:
    n: int | str | tuple | None = option(
        None,
        "-n",
        parse=_ranks,
        check=_check_ranks,
        from_python=_ranks_from_python,
        metavar="N|MIN:MAX|auto",
        help="number of ranks (default: all engines); MIN:MAX: an elastic job that starts with MIN, grows into "
        "engines that come free and survives lost ranks; auto: the recommended number (see --recommend)",
    )
    recommend: bool = option(
        False,
        "--recommend",
        action="store_true",
        help="probe the cell, show the recommended devices, batch and learning rate, then run with them",
    )
    deadline: float | None = option(
        None,
        "--deadline",
        parse=duration,
        metavar="30m",
        from_python=_duration_from_python,
        check=_positive_or_none("must be a positive duration like 30m"),
        help="with --recommend: the lowest-energy plan finishing within this time",
    )
    name: str | None = option(None, "--name", help="job name, shown in the panel and %dl_jobs (default: job-<number>)")
    backend: str = option(
        "auto",
        "--backend",
        choices=BACKENDS,
        help="the collectives the ranks use: horovod, tf (TensorFlow's own; nothing to build), or auto: Horovod "
        "where it is installed, else tf",
    )
    timeout: float | None = option(
        None,
        "--timeout",
        parse=seconds,
        metavar="SEC",
        check=_positive_or_none("must be a positive number of seconds"),
        help="stop the job after this many seconds",
    )
    stall_timeout: float | None = option(
        None,
        "--stall-timeout",
        parse=seconds_or_off,
        metavar="SEC",
        check=lambda value: None if value is None or value >= 0 else "must be seconds >= 0, 0 to turn it off",
        help="stop the job when a rank waits this long in a collective the others never enter "
        "(default: JobRunner.stall_timeout; 0 turns it off)",
    )
    restarts: int = option(
        0,
        "--restarts",
        parse=count,
        metavar="R",
        check=lambda value: None if _whole(value) and value >= 0 else "must be a whole number >= 0",
        help="after a failure, restart the job up to R times from its last checkpoint (needs --checkpoint-dir)",
    )
    checkpoint_dir: str | None = option(
        None,
        "--checkpoint-dir",
        metavar="DIR",
        help="rank 0 saves a checkpoint here every epoch; an unfinished one is resumed",
    )
    balance: str = option(
        "auto",
        "--balance",
        choices=BALANCE,
        help="per-rank batch sizes proportional to measured speed, gradients weighted so the update is unchanged "
        "(auto: when the ranks span hosts)",
    )
    output: str = option("rank0", "--output", choices=OUTPUTS, help="whose printed output the cell shows")
    lr_scale: str = option(
        "linear", "--lr-scale", choices=LR_SCALES, help="how the learning rate grows with the number of ranks"
    )
    manual: bool = option(
        False, "--manual", action="store_true", help="no Keras interception: the cell calls Horovod itself"
    )
    plot: bool = option(
        True,
        "--no-plot",
        action="store_false",
        python_default_differs=True,  # plot=None: shown when running in a notebook kernel
        help="no live figure or progress bar in the cell (distribute(): plot=None shows them in a notebook kernel)",
    )
    secrets: tuple = option(
        (),
        "--secret",
        action="append",
        metavar="NAME",
        from_python=tuple,
        check=_check_secrets,
        help="pass this secret (kernel environment or secrets file) to the ranks' environment; names only are stored",
    )
    stream_metrics: bool = option(
        True, help="False: no metric records from the ranks (no live figure); only to measure what streaming costs"
    )
    # Set by jupyter-dl itself (a recommendation, its own measurements), not by users:
    probe: bool = False  # run the cell on one rank up to fit and profile that instead of training
    batch_size: int | None = None  # per-rank batch replacing the cell's
    lr_multiplier: float = 1.0  # learning-rate factor for that batch change
    device_kind: str | None = None  # only engines of this kind ("cpu", "gpu:<name>") take ranks
    pooled: bool = True  # take the job's GPUs from the pool; off only for jupyter-dl's own brief measurements
    elastic_min: int | None = None  # -n MIN:MAX: MIN here, MAX in n (set by validate)

    @property
    def elastic(self) -> bool:
        return self.elastic_min is not None

    def validate(self) -> "RunOptions":
        if self.n == "auto":
            self.n, self.recommend = None, True
        for name, flag in user_options():
            value = getattr(self, name)
            if flag.choices and value not in flag.choices:
                raise UsageError(f"{flag.label(name)} must be one of {', '.join(flag.choices)} (got {value!r})")
            wrong = flag.check(value) if flag.check else None
            if wrong:
                shown = "" if "got " in wrong else f" (got {value!r})"  # a check may name the wrong part itself
                raise UsageError(f"{flag.label(name)} {wrong}{shown}")
        if isinstance(self.n, tuple):
            low, high = self.n
            self.n, self.elastic_min = high, (low if low < high else None)  # 4:4 is a fixed -n 4
        self._check_together()
        if self.checkpoint_dir:
            # Engines may run in another working directory: they get an absolute path.
            self.checkpoint_dir = os.path.abspath(os.path.expanduser(self.checkpoint_dir))
            if os.path.exists(self.checkpoint_dir) and not os.path.isdir(self.checkpoint_dir):
                raise UsageError(f"--checkpoint-dir {self.checkpoint_dir} is a file; name a directory")
        return self

    def _check_together(self):
        if self.deadline is not None and not self.recommend:
            raise UsageError("--deadline is for --recommend (or -n auto): it picks the plan that meets it")
        if self.restarts and not self.checkpoint_dir:
            raise UsageError(
                "--restarts needs --checkpoint-dir DIR: rank 0 saves a checkpoint there every epoch "
                "and a restart resumes from it"
            )
        if self.elastic:
            self._check_elastic()
        if self.checkpoint_dir and self.manual:
            raise UsageError(
                "--checkpoint-dir works through the Keras interception, which --manual turns off; "
                "save and load checkpoints yourself in a --manual cell"
            )

    def _check_elastic(self):
        n = f"-n {self.elastic_min}:{self.n}"
        if self.recommend:
            raise UsageError(f"{n} (elastic) and --recommend both choose the number of ranks; pick one")
        if self.restarts or self.checkpoint_dir:
            raise UsageError(
                f"{n} (elastic) keeps its commits in the engines' memory and survives lost ranks by itself; "
                "drop --restarts and --checkpoint-dir, or use a fixed -n"
            )


def user_options() -> list[tuple[str, Flag]]:
    """(field name, Flag) of every option a user sets, in declaration order."""
    return [(f.name, f.metadata["flag"]) for f in dataclasses.fields(RunOptions) if "flag" in f.metadata]


def defaults() -> dict:
    return {f.name: f.default for f in dataclasses.fields(RunOptions)}
