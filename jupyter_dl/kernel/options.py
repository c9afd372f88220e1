"""The `%%distribute` line and `distribute()`'s keywords, both built from the options declared in wire/options.py:
the parser (with the help `%%distribute?` shows), the API's signature and its documentation."""

import argparse
import inspect
import shlex
import textwrap

from jupyter_dl.errors import UsageError
from jupyter_dl.wire.options import RunOptions, defaults, user_options

SUMMARY = "Run an unchanged Keras cell as an N-rank Horovod job on the cluster's engines."


class Parser(argparse.ArgumentParser):
    """argparse that raises one-line UsageErrors instead of printing and exiting."""

    def error(self, message):
        usage = " ".join(self.format_usage().split()[1:])  # argparse wraps usage; a usage error stays one line
        raise UsageError(f"{self.prog}: {message}. Usage: {usage}")

    def exit(self, status=0, message=None):
        self.error(message or "invalid arguments")


def distribute_parser() -> Parser:
    p = Parser(prog="%%distribute", add_help=False, description=SUMMARY)
    for name, flag in user_options():
        if not flag.flags:
            continue  # an option of distribute() only
        settings: dict = {"dest": name, "help": flag.help.replace("%", "%%")}  # argparse %-formats help
        if flag.action:
            settings["action"] = flag.action
        else:
            settings["default"] = defaults()[name]
        if flag.action == "append":
            settings["default"] = []
        if flag.parse:
            settings["type"] = flag.parse
        if flag.choices:
            settings["choices"] = flag.choices
        if flag.metavar:
            settings["metavar"] = flag.metavar
        p.add_argument(*flag.flags, **settings)
    return p


def parse_distribute_line(line: str) -> RunOptions:
    """Parse a %%distribute line. Errors are one line (plus usage) and nothing has been started."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:  # shlex: an unclosed quote
        raise UsageError(
            f'%%distribute: {str(exc).lower()} in the options; close the quote, e.g. --name "my run"'
        ) from None
    values = vars(distribute_parser().parse_args(argv))
    return options_from_python(values)


def options_from_python(values: dict) -> RunOptions:
    """RunOptions from keyword values (distribute()'s, or the parsed line's), converted and validated."""
    flags = dict(user_options())
    unknown = sorted(set(values) - set(flags))
    if unknown:
        raise UsageError(f"distribute() has no option {unknown[0]!r}; its options are: {', '.join(flags)}")
    converted = {name: _from_python(flags[name], value) for name, value in values.items()}
    return RunOptions(**converted).validate()


def _from_python(flag, value):
    return flag.from_python(value) if flag.from_python is not None and value is not None else value


def python_defaults() -> dict:
    """distribute()'s default for each option."""
    found = {}
    for name, flag in user_options():
        found[name] = flag.python_default if flag.python_default_differs else defaults()[name]
    return found


def python_parameters(positional=("n",)) -> list[inspect.Parameter]:
    """The options as keyword-only parameters, for distribute()'s signature (`positional` ones come earlier)."""
    return [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in python_defaults().items()
        if name not in positional
    ]


def python_doc() -> str:
    """One paragraph per option, for distribute()'s docstring."""
    lines = ["Options (the same as %%distribute's; `%%distribute?` shows them as flags):"]
    for name, flag in user_options():
        spelled = f" ({', '.join(flag.flags)})" if flag.flags else ""
        text = f"{name}{spelled}: {flag.help}"
        if flag.choices:
            text += f"; one of {', '.join(flag.choices)}"
        lines.extend(textwrap.wrap(text, 112, initial_indent="    ", subsequent_indent="        "))
    return "\n".join(lines)


def help_text(parser: argparse.ArgumentParser) -> str:
    """A magic's help: its parser's, with each subcommand's usage and options after it."""
    parts = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parts.extend(sub.format_help() for sub in action.choices.values())
    return "\n".join(parts)


def magic_help() -> str:
    """What `%%distribute?` shows: the usage and every option's help."""
    return distribute_parser().format_help()
