"""The %%distribute line and RunOptions.validate: what each option accepts, and the one-line error for what it refuses.

Pure: no cluster, no engines, no TensorFlow. Errors are asserted by their words, since the message is what a user
reads to fix the line.
"""

import os

import pytest

from jupyter_dl.errors import UsageError
from jupyter_dl.kernel.options import distribute_parser, parse_distribute_line
from jupyter_dl.wire.options import BACKENDS, BALANCE, LR_SCALES, OUTPUTS, RunOptions

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser


def usage_error(line):
    """The UsageError message `line` raises, checked to be a single line."""
    with pytest.raises(UsageError) as info:
        parse_distribute_line(line)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    return message


def validate_error(**kwargs):
    """The UsageError message RunOptions(**kwargs).validate() raises, checked to be a single line."""
    with pytest.raises(UsageError) as info:
        RunOptions(**kwargs).validate()
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ------------------------------------------------------------------------------------------------------ defaults
def test_empty_line_gives_documented_defaults():
    """A bare `%%distribute` means: all engines, the auto backend (Horovod where installed), rank 0's output, linear
    LR scaling, live plot, no limits."""
    opts = parse_distribute_line("")
    assert opts == RunOptions()
    assert (opts.n, opts.name, opts.backend, opts.timeout, opts.stall_timeout) == (None, None, "auto", None, None)
    assert (opts.output, opts.lr_scale, opts.balance) == ("rank0", "linear", "auto")
    assert (opts.manual, opts.plot, opts.recommend) == (False, True, False)
    assert (opts.restarts, opts.checkpoint_dir, opts.deadline, opts.secrets) == (0, None, None, ())


def test_whitespace_only_line_is_the_empty_line():
    """Trailing spaces or a blank line after the magic's name do not change anything."""
    assert parse_distribute_line("   \t ") == RunOptions()


def test_defaults_validate_unchanged():
    """RunOptions() as the Python API builds it passes validate() and validate() returns the same object."""
    opts = RunOptions()
    assert opts.validate() is opts
    assert opts == RunOptions()


def test_parser_defaults_match_the_dataclass():
    """The parser and RunOptions agree on every default a user can set from the line."""
    ns = vars(distribute_parser().parse_args([]))
    defaults = RunOptions()
    assert ns == {key: (list(getattr(defaults, key)) if key == "secrets" else getattr(defaults, key)) for key in ns}


def test_parser_choices_are_the_module_constants():
    """--backend/--balance/--output/--lr-scale offer exactly what validate() accepts."""
    actions = {a.dest: a for a in distribute_parser()._actions}
    assert tuple(actions["backend"].choices) == BACKENDS == ("auto", "horovod", "tf")
    assert tuple(actions["balance"].choices) == BALANCE == ("auto", "on", "off")
    assert tuple(actions["output"].choices) == OUTPUTS == ("rank0", "all")
    assert tuple(actions["lr_scale"].choices) == LR_SCALES == ("linear", "sqrt", "none")


# ------------------------------------------------------------------------------------------------ accepted forms
@pytest.mark.parametrize(
    "line, n",
    [("-n 1", 1), ("-n 2", 2), ("-n 64", 64), ("-n2", 2), ("-n=3", 3), ("-n 007", 7), ("-n ' 4'", 4)],
)
def test_ranks_accepted(line, n):
    """-n takes a positive whole number in argparse's usual spellings."""
    opts = parse_distribute_line(line)
    assert opts.n == n and isinstance(opts.n, int)
    assert opts.recommend is False


def test_ranks_auto_means_recommend():
    """-n auto turns on the recommendation and leaves the rank count to it."""
    opts = parse_distribute_line("-n auto")
    assert (opts.n, opts.recommend) == (None, True)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 90.0),
        ("0.5", 0.5),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("2h", 7200.0),
        ("1m30s", 90.0),
        ("1h30m", 5400.0),
        ("1h0m5s", 3605.0),
        ("1.5h", 5400.0),
        ("30M", 1800.0),
    ],
)
def test_deadline_durations(text, seconds):
    """--deadline takes plain seconds or h/m/s durations (combined, fractional, any case)."""
    opts = parse_distribute_line(f"--recommend --deadline {text}")
    assert opts.deadline == seconds
    assert opts.recommend is True


def test_deadline_with_n_auto():
    """-n auto counts as --recommend, so --deadline is allowed with it."""
    opts = parse_distribute_line("-n auto --deadline 5m")
    assert (opts.n, opts.recommend, opts.deadline) == (None, True, 300.0)


@pytest.mark.parametrize("text, seconds", [("1", 1.0), ("0.25", 0.25), ("3600", 3600.0), ("1e3", 1000.0)])
def test_timeout_seconds(text, seconds):
    """--timeout takes any positive number of seconds."""
    assert parse_distribute_line(f"--timeout {text}").timeout == seconds


@pytest.mark.parametrize("text, seconds", [("0", 0.0), ("0.5", 0.5), ("120", 120.0)])
def test_stall_timeout_seconds(text, seconds):
    """--stall-timeout takes seconds >= 0; 0 (turn it off) is allowed, unlike --timeout."""
    assert parse_distribute_line(f"--stall-timeout {text}").stall_timeout == seconds


@pytest.mark.parametrize("option, dest", [("--backend", "backend"), ("--balance", "balance"), ("--output", "output")])
def test_choice_options_accept_each_choice(option, dest):
    """Every documented value of the choice options parses to itself."""
    choices = {"backend": BACKENDS, "balance": BALANCE, "output": OUTPUTS}[dest]
    for value in choices:
        assert getattr(parse_distribute_line(f"{option} {value}"), dest) == value


@pytest.mark.parametrize("value", ["linear", "sqrt", "none"])
def test_lr_scale_choices(value):
    """--lr-scale linear|sqrt|none, as the README lists them."""
    assert parse_distribute_line(f"--lr-scale {value}").lr_scale == value


def test_flags():
    """--manual, --no-plot and --recommend are switches that take no value."""
    opts = parse_distribute_line("--manual --no-plot --recommend")
    assert (opts.manual, opts.plot, opts.recommend) == (True, False, True)


def test_name_with_spaces_is_quoted_shell_style():
    """The line is split like a shell line: a quoted name keeps its spaces."""
    assert parse_distribute_line("--name 'my first job' -n 2").name == "my first job"
    assert parse_distribute_line('--name "a b"').name == "a b"


def test_secrets_repeat_and_become_a_tuple():
    """--secret may be given several times; the names are kept in order as a tuple (values are never stored)."""
    opts = parse_distribute_line("--secret WANDB_API_KEY --secret HF_TOKEN --secret X1")
    assert opts.secrets == ("WANDB_API_KEY", "HF_TOKEN", "X1")


def test_restarts_with_checkpoint_dir_becomes_absolute(tmp_path, monkeypatch):
    """--restarts R --checkpoint-dir DIR: a relative DIR is made absolute (engines may run elsewhere)."""
    monkeypatch.chdir(tmp_path)
    opts = parse_distribute_line("--restarts 2 --checkpoint-dir ckpt")
    assert opts.restarts == 2
    assert opts.checkpoint_dir == str(tmp_path / "ckpt")
    assert os.path.isabs(opts.checkpoint_dir)


def test_checkpoint_dir_expands_home(tmp_path, monkeypatch):
    """~ in --checkpoint-dir is the user's home, not a directory literally called '~'."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_distribute_line("--checkpoint-dir ~/ck").checkpoint_dir == str(tmp_path / "ck")


def test_checkpoint_dir_existing_directory_is_fine(tmp_path):
    """An existing directory is accepted (an unfinished checkpoint there is resumed)."""
    assert parse_distribute_line(f"--checkpoint-dir {tmp_path}").checkpoint_dir == str(tmp_path)


def test_restarts_zero_needs_no_checkpoint_dir():
    """--restarts 0 is the default and needs nothing else."""
    assert parse_distribute_line("--restarts 0").restarts == 0


def test_everything_at_once(tmp_path):
    """All options together parse to the values given (no option shadows another)."""
    opts = parse_distribute_line(
        f"-n 4 --name run1 --backend tf --timeout 600 --stall-timeout 30 --restarts 1 "
        f"--checkpoint-dir {tmp_path} --balance on --output all --lr-scale sqrt --no-plot --secret TOKEN"
    )
    assert opts == RunOptions(
        n=4,
        name="run1",
        backend="tf",
        timeout=600.0,
        stall_timeout=30.0,
        restarts=1,
        checkpoint_dir=str(tmp_path),
        balance="on",
        output="all",
        lr_scale="sqrt",
        plot=False,
        secrets=("TOKEN",),
    )


# ---------------------------------------------------------------------------------------- refused on the line
USAGE = "Usage: %%distribute [-n N|MIN:MAX|auto]"


@pytest.mark.parametrize(
    "line, words",
    [
        ("-n 0", ["argument -n", "must be at least 1, got 0"]),
        ("-n -2", ["argument -n", "must be at least 1, got -2"]),
        ("-n x", ["argument -n", "expected a whole number of ranks, got 'x'"]),
        ("-n 1.5", ["argument -n", "expected a whole number of ranks, got '1.5'"]),
        ("-n", ["argument -n", "expected one argument"]),
        ("--timeout 0", ["argument --timeout", "must be more than 0, got 0"]),
        ("--timeout -1", ["argument --timeout", "must be more than 0, got -1"]),
        ("--timeout 1m", ["argument --timeout", "expected seconds, got '1m'"]),
        ("--stall-timeout -1", ["argument --stall-timeout", "must be at least 0, got -1"]),
        ("--stall-timeout soon", ["argument --stall-timeout", "expected seconds (0 turns it off), got 'soon'"]),
        ("--restarts -1", ["argument --restarts", "must be at least 0, got -1"]),
        ("--restarts 1.5", ["argument --restarts", "expected a whole number, got '1.5'"]),
        ("--deadline 1x", ["argument --deadline", "a duration looks like 30m, 2h, 1h30m or 90s", "'1x'"]),
        ("--deadline '1h 30m'", ["argument --deadline", "a duration looks like 30m", "'1h 30m'"]),
        ("--deadline -5m", ["argument --deadline", "expected one argument"]),
        ("--backend mpi", ["argument --backend", "invalid choice: 'mpi'", "'horovod'"]),
        ("--balance maybe", ["argument --balance", "invalid choice: 'maybe'", "'auto', 'on', 'off'"]),
        ("--output rank1", ["argument --output", "invalid choice: 'rank1'", "'rank0', 'all'"]),
        ("--lr-scale cubic", ["argument --lr-scale", "invalid choice: 'cubic'", "'linear', 'sqrt', 'none'"]),
        ("--bogus", ["unrecognized arguments: --bogus"]),
        ("-n 2 extra", ["unrecognized arguments: extra"]),
        ("-h", ["unrecognized arguments: -h"]),
        ("--manual=yes", ["argument --manual", "ignored explicit argument 'yes'"]),
        ("--secret", ["argument --secret", "expected one argument"]),
    ],
)
def test_bad_line_is_one_line_with_usage(line, words):
    """Each bad value names its option and what was wrong, then the usage to write instead, all on one line."""
    message = usage_error(line)
    assert message.startswith("%%distribute: ")
    for word in words:
        assert word in message
    assert USAGE in message
    assert message.endswith("[--secret NAME]")


def test_usage_stays_one_line_in_a_narrow_terminal(monkeypatch):
    """argparse wraps usage to the terminal width; the error still is a single line with the full usage."""
    monkeypatch.setenv("COLUMNS", "30")
    message = usage_error("--bogus")
    assert "[--lr-scale {linear,sqrt,none}] [--manual] [--no-plot] [--secret NAME]" in message


def test_unbalanced_quote_is_a_usage_error():
    """A line shlex cannot split is refused with one line naming the magic, not a ValueError traceback."""
    message = usage_error("--name 'unfinished")
    assert message == '%%distribute: no closing quotation in the options; close the quote, e.g. --name "my run"'


# ------------------------------------------------------------------------------------ refused by validate()
@pytest.mark.parametrize(
    "line, expected",
    [
        ("--deadline 30m", "--deadline is for --recommend (or -n auto): it picks the plan that meets it"),
        ("-n 2 --deadline 30m", "--deadline is for --recommend (or -n auto): it picks the plan that meets it"),
        ("--recommend --deadline 0", "--deadline must be a positive duration like 30m (got 0.0)"),
        ("-n auto --deadline 0s", "--deadline must be a positive duration like 30m (got 0.0)"),
        ("--timeout nan", "--timeout must be a positive number of seconds (got nan)"),
        ("--stall-timeout nan", "--stall-timeout must be seconds >= 0, 0 to turn it off (got nan)"),
        ("--secret MY-KEY", "--secret takes an environment variable name, got 'MY-KEY'"),
        ("--secret ''", "--secret takes an environment variable name, got ''"),
        ("--secret 'A B'", "--secret takes an environment variable name, got 'A B'"),
        (
            "--restarts 2",
            "--restarts needs --checkpoint-dir DIR: rank 0 saves a checkpoint there every epoch "
            "and a restart resumes from it",
        ),
        (
            "--manual --checkpoint-dir /tmp/ck",
            "--checkpoint-dir works through the Keras interception, which --manual turns off; "
            "save and load checkpoints yourself in a --manual cell",
        ),
    ],
)
def test_line_refused_by_validate(line, expected):
    """Lines argparse lets through but that cannot run are refused with the exact advice validate() gives."""
    assert usage_error(line) == expected


def test_checkpoint_dir_that_is_a_file(tmp_path):
    """--checkpoint-dir naming an existing file is refused before anything starts, saying to name a directory."""
    target = tmp_path / "not-a-dir"
    target.write_text("x")
    assert usage_error(f"--checkpoint-dir {target}") == f"--checkpoint-dir {target} is a file; name a directory"


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"n": 0}, "-n must be a positive number of ranks (got 0)"),
        ({"n": -3}, "-n must be a positive number of ranks (got -3)"),
        ({"n": 2.0}, "-n must be a positive number of ranks (got 2.0)"),
        ({"n": True}, "-n must be a positive number of ranks (got True)"),
        ({"n": "2"}, "-n must be a positive number of ranks (got '2')"),
        ({"backend": "mpi"}, "--backend must be one of auto, horovod, tf (got 'mpi')"),
        ({"lr_scale": "cubic"}, "--lr-scale must be one of linear, sqrt, none (got 'cubic')"),
        ({"balance": "yes"}, "--balance must be one of auto, on, off (got 'yes')"),
        ({"output": "rank1"}, "--output must be one of rank0, all (got 'rank1')"),
        ({"secrets": ("OK", "$BAD")}, "--secret takes an environment variable name, got '$BAD'"),
        ({"stall_timeout": -0.5}, "--stall-timeout must be seconds >= 0, 0 to turn it off (got -0.5)"),
        ({"restarts": -1}, "--restarts must be a whole number >= 0 (got -1)"),
        ({"restarts": 1.5}, "--restarts must be a whole number >= 0 (got 1.5)"),
        ({"restarts": True}, "--restarts must be a whole number >= 0 (got True)"),
        ({"timeout": 0}, "--timeout must be a positive number of seconds (got 0)"),
        ({"timeout": -10.0}, "--timeout must be a positive number of seconds (got -10.0)"),
        ({"deadline": 60.0}, "--deadline is for --recommend (or -n auto): it picks the plan that meets it"),
        ({"deadline": -1.0, "recommend": True}, "--deadline must be a positive duration like 30m (got -1.0)"),
    ],
)
def test_validate_refuses_api_values(kwargs, expected):
    """The Python API skips argparse: validate() alone must refuse bad values with the same one-line advice."""
    assert validate_error(**kwargs) == expected


def test_validate_n_auto_from_the_api():
    """n="auto" from the Python API is the same as -n auto: no fixed count, recommendation on."""
    opts = RunOptions(n="auto", deadline=120.0).validate()
    assert (opts.n, opts.recommend, opts.deadline) == (None, True, 120.0)


def test_validate_accepts_zero_stall_timeout_and_api_types():
    """stall_timeout=0 turns the stall check off; ints where floats are expected are fine."""
    opts = RunOptions(n=3, stall_timeout=0, timeout=5).validate()
    assert (opts.n, opts.stall_timeout, opts.timeout) == (3, 0, 5)


def test_manual_checkpoint_dir_refused_before_the_path_is_resolved():
    """With --manual, --checkpoint-dir is refused as is: the path is not made absolute first."""
    opts = RunOptions(manual=True, checkpoint_dir="rel/dir")
    with pytest.raises(UsageError, match="--manual turns off"):
        opts.validate()
    assert opts.checkpoint_dir == "rel/dir"


# ------------------------------------------------------------------------------------- one declaration, every way in
def test_every_user_option_reaches_the_magic_the_api_and_their_help():
    """Each option declared in wire/options.py is a flag of the parser (unless API-only), a keyword of distribute()
    with the same default, and documented in both `%%distribute?` and help(distribute)."""
    import inspect

    from jupyter_dl.kernel import api
    from jupyter_dl.kernel.magics import DistributeMagics
    from jupyter_dl.wire.options import user_options

    declared = user_options()
    assert len(declared) >= 15
    parser_dests = {action.dest for action in distribute_parser()._actions}
    signature = inspect.signature(api.distribute).parameters
    magic_doc, api_doc = DistributeMagics.distribute.__doc__, api.distribute.__doc__
    defaults = RunOptions()
    for name, flag in declared:
        assert name in signature, name
        expected = None if flag.python_default_differs else getattr(defaults, name)
        assert signature[name].default == expected, name
        assert f"{name} (" in api_doc or f"{name}:" in api_doc, name
        if flag.flags:
            assert name in parser_dests, name
            assert all(spelling in magic_doc for spelling in flag.flags), name
            assert flag.help.split(";")[0].split()[0] in magic_doc, name


def test_distribute_refuses_an_unknown_option_in_one_line_before_anything_starts():
    from jupyter_dl.kernel import api

    jobs_before = len(api._session.jobs.all()) if api._session is not None else 0
    with pytest.raises(UsageError) as info:
        api.distribute("x = 1", 2, lr_scaling="sqrt")
    assert str(info.value).startswith("distribute() has no option 'lr_scaling'; its options are: ")
    assert "lr_scale" in str(info.value) and "\n" not in str(info.value)
    jobs_after = len(api._session.jobs.all()) if api._session is not None else 0
    assert jobs_after == jobs_before  # nothing was started or recorded


def test_the_api_converts_what_python_callers_write():
    """distribute()'s values take the same checks as the line's; a duration may be text, secrets any iterable."""
    from jupyter_dl.kernel.options import options_from_python

    options = options_from_python({"recommend": True, "deadline": "1h30m", "secrets": ["A_KEY"]})
    assert (options.deadline, options.secrets) == (5400.0, ("A_KEY",))
    with pytest.raises(UsageError, match="^--lr-scale must be one of linear, sqrt, none"):
        options_from_python({"lr_scale": "cubic"})


def test_the_ranks_read_the_options_object_the_user_gave():
    """The rank spec carries the job's RunOptions as they are: no field is copied by hand on the way."""
    import dataclasses

    from jupyter_dl.wire.options import user_options
    from jupyter_dl.wire.spec import RankSpec

    spec_fields = {f.name for f in dataclasses.fields(RankSpec)}
    assert "options" in spec_fields
    copied = {name for name, _ in user_options()} & spec_fields
    assert copied == set(), f"copied into RankSpec besides options: {copied}"


def test_every_magic_shows_its_parsers_help():
    """`%dl_jobs?` and the others show what their parser accepts, usage and every option with its help: the usage
    is written once, in the parser."""
    from jupyter_dl.kernel.magics import DistributeMagics

    magics = {**DistributeMagics.magics["line"], **DistributeMagics.magics["cell"]}
    assert set(magics) >= {
        "distribute",
        "dl_cluster",
        "dl_jobs",
        "dl_compare",
        "lr_find",
        "dl_recommend",
        "dl_template",
    }
    for name, method in magics.items():
        doc = getattr(DistributeMagics, method).__doc__ or ""
        prefix = "%%" if name == "distribute" else "%"
        assert doc.startswith(f"usage: {prefix}{name}"), (name, doc[:80])
    cluster_doc = DistributeMagics.dl_cluster.__doc__
    assert "usage: %dl_cluster start" in cluster_doc and "--cluster-file FILE" in cluster_doc
