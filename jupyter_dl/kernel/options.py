"""Options of one distributed run, validated in one place for the magic and the Python API alike."""

import argparse
import os
import shlex
from dataclasses import dataclass

from jupyter_dl.errors import UsageError

BACKENDS = ("horovod",)
LR_SCALES = ("linear", "sqrt", "none")
OUTPUTS = ("rank0", "all")
BALANCE = ("auto", "on", "off")


@dataclass
class RunOptions:
    n: int | None = None
    name: str | None = None
    backend: str = "horovod"
    timeout: float | None = None
    output: str = "rank0"
    lr_scale: str = "linear"
    manual: bool = False
    plot: bool = True  # the live figure and progress bar in the cell (--no-plot turns them off)
    secrets: tuple = ()  # names only: values are looked up at launch and never stored
    stall_timeout: float | None = None  # seconds in one collective before the job is stopped; None: the trait
    restarts: int = 0  # how often a failed job is restarted from its last checkpoint
    checkpoint_dir: str | None = None  # where rank 0 saves a checkpoint every epoch (absolute after validate)
    balance: str = "auto"  # per-rank batch sizes by measured speed: auto (ranks on several hosts), on, off
    recommend: bool = False  # probe the cell, show the recommended plan, then run with it (also -n auto)
    deadline: float | None = None  # seconds the whole training may take, for the recommendation
    # Set from a recommendation, not by users directly:
    probe: bool = False  # run the cell on one rank up to fit and profile that instead of training
    batch_size: int | None = None  # per-rank batch replacing the cell's
    lr_multiplier: float = 1.0  # learning-rate factor for that batch change
    device_kind: str | None = None  # only engines of this kind ("cpu", "gpu:<name>") take ranks
    stream_metrics: bool = True  # engine-side metric streaming; off only to measure its cost
    pooled: bool = True  # take the job's GPUs from the pool; off only for jupyter-dl's own brief measurements

    def validate(self):
        if self.n == "auto":
            self.n, self.recommend = None, True
        if self.deadline is not None and not self.recommend:
            raise UsageError("--deadline is for --recommend (or -n auto): it picks the plan that meets it")
        if self.deadline is not None and not self.deadline > 0:
            raise UsageError(f"--deadline must be a positive duration like 30m (got {self.deadline!r})")
        if self.n is not None and (not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1):
            raise UsageError(f"-n must be a positive number of ranks (got {self.n!r})")
        if self.backend not in BACKENDS:
            raise UsageError(f"--backend must be one of {', '.join(BACKENDS)} (got {self.backend!r})")
        if self.lr_scale not in LR_SCALES:
            raise UsageError(f"--lr-scale must be one of {', '.join(LR_SCALES)} (got {self.lr_scale!r})")
        if self.balance not in BALANCE:
            raise UsageError(f"--balance must be one of {', '.join(BALANCE)} (got {self.balance!r})")
        if self.output not in OUTPUTS:
            raise UsageError(f"--output must be one of {', '.join(OUTPUTS)} (got {self.output!r})")
        for name in self.secrets:
            if not name.replace("_", "").isalnum():
                raise UsageError(f"--secret takes an environment variable name, got {name!r}")
        if self.stall_timeout is not None and not self.stall_timeout >= 0:
            raise UsageError(f"--stall-timeout must be seconds >= 0, 0 to turn it off (got {self.stall_timeout!r})")
        if not isinstance(self.restarts, int) or isinstance(self.restarts, bool) or self.restarts < 0:
            raise UsageError(f"--restarts must be a whole number >= 0 (got {self.restarts!r})")
        if self.restarts and not self.checkpoint_dir:
            raise UsageError(
                "--restarts needs --checkpoint-dir DIR: rank 0 saves a checkpoint there every epoch "
                "and a restart resumes from it"
            )
        if self.checkpoint_dir and self.manual:
            raise UsageError(
                "--checkpoint-dir works through the Keras interception, which --manual turns off; "
                "save and load checkpoints yourself in a --manual cell"
            )
        if self.checkpoint_dir:
            # Engines may run in another working directory: they get an absolute path.
            self.checkpoint_dir = os.path.abspath(os.path.expanduser(self.checkpoint_dir))
            if os.path.exists(self.checkpoint_dir) and not os.path.isdir(self.checkpoint_dir):
                raise UsageError(f"--checkpoint-dir {self.checkpoint_dir} is a file; name a directory")
        if self.timeout is not None and not self.timeout > 0:
            raise UsageError(f"--timeout must be a positive number of seconds (got {self.timeout!r})")
        return self


class _Parser(argparse.ArgumentParser):
    """argparse that raises one-line UsageErrors instead of printing and exiting."""

    def error(self, message):
        usage = " ".join(self.format_usage().split()[1:])  # argparse wraps usage; a usage error stays one line
        raise UsageError(f"{self.prog}: {message}. Usage: {usage}")

    def exit(self, status=0, message=None):
        self.error(message or "invalid arguments")


def _ranks(text):
    return "auto" if text == "auto" else _positive_int(text)


def _duration(text):
    from jupyter_dl.recommend.planner import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number(convert, expected, lowest, inclusive=True, hint=""):
    """An argparse type: `convert` the text, refusing values below `lowest` (or equal to it, when not inclusive)."""

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


_positive_int = _number(int, "a whole number of ranks", 1)
_count = _number(int, "a whole number", 0)
_seconds = _number(float, "seconds", 0, inclusive=False)
_seconds_or_off = _number(float, "seconds (0 turns it off)", 0)


def distribute_parser():
    p = _Parser(prog="%%distribute", add_help=False)
    p.add_argument(
        "-n",
        type=_ranks,
        default=None,
        help="number of ranks (default: all engines); auto: the recommended number (see --recommend)",
    )
    p.add_argument(
        "--recommend",
        action="store_true",
        help="probe the cell, show the recommended devices, batch and learning rate, then run with them",
    )
    p.add_argument(
        "--deadline",
        type=_duration,
        default=None,
        metavar="30m",
        help="with --recommend: the lowest-energy plan finishing within this time",
    )
    p.add_argument("--name", default=None, help="job name")
    p.add_argument("--backend", choices=BACKENDS, default="horovod")
    p.add_argument("--timeout", type=_seconds, default=None, metavar="SEC", help="stop the job after this many seconds")
    p.add_argument(
        "--stall-timeout",
        type=_seconds_or_off,
        default=None,
        dest="stall_timeout",
        metavar="SEC",
        help="stop the job when a rank waits this long in a collective the others never enter",
    )
    p.add_argument(
        "--restarts",
        type=_count,
        default=0,
        metavar="R",
        help="after a failure, restart the job up to R times from its last checkpoint",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        dest="checkpoint_dir",
        metavar="DIR",
        help="rank 0 saves a checkpoint here every epoch; an unfinished one is resumed",
    )
    p.add_argument(
        "--balance",
        choices=BALANCE,
        default="auto",
        help="per-rank batch sizes proportional to measured speed (auto: when ranks span hosts)",
    )
    p.add_argument("--output", choices=OUTPUTS, default="rank0", help="whose output to show")
    p.add_argument("--lr-scale", choices=LR_SCALES, default="linear", dest="lr_scale")
    p.add_argument("--manual", action="store_true", help="no Keras interception; Horovod is initialised")
    p.add_argument("--no-plot", dest="plot", action="store_false", help="no live figure or progress bar")
    p.add_argument(
        "--secret",
        dest="secrets",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this secret (kernel environment or secrets file) to the ranks' environment",
    )
    return p


def parse_distribute_line(line: str) -> RunOptions:
    """Parse a %%distribute line. Errors are one line (plus usage) and nothing has been started."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:  # shlex: an unclosed quote
        raise UsageError(
            f'%%distribute: {str(exc).lower()} in the options; close the quote, e.g. --name "my run"'
        ) from None
    ns = distribute_parser().parse_args(argv)
    ns.secrets = tuple(ns.secrets)
    return RunOptions(**vars(ns)).validate()
