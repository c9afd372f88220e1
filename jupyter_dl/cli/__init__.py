"""`jupyter-dl` console commands: `doctor` (what is installed and what is missing) and `install-horovod` (Horovod
compiled against the installed TensorFlow, cached). Imports stay light: `%load_ext` reads the doctor's quick check."""

import sys

from traitlets.config import Application

from jupyter_dl._version import __version__


class JupyterDLApp(Application):
    name = "jupyter-dl"
    version = __version__
    description = "jupyter-dl setup commands. Run `jupyter-dl doctor` to see what is missing and how to fix it."
    subcommands = {
        "doctor": (
            "jupyter_dl.cli.doctor.DoctorApp",
            "One table of what jupyter-dl needs and what it found; exit 1 when something blocks jobs.",
        ),
        "install-horovod": (
            "jupyter_dl.cli.install_horovod.InstallHorovodApp",
            "Build Horovod against the installed TensorFlow (cached wheel), and install it.",
        ),
    }

    def start(self):
        if self.subapp is not None:
            # traitlets only warns about an unknown --option; a typo must not run a build with defaults.
            unknown = [k for k in self.subapp.cli_config if not k[:1].isupper()]
            if unknown:
                print(
                    f"jupyter-dl: unknown option --{unknown[0]}; see jupyter-dl {self.subapp.name.split()[-1]} --help",
                    file=sys.stderr,
                )
                return 2
        elif self.extra_args:
            print(
                f"jupyter-dl: unknown command {self.extra_args[0]!r}; use {' or '.join(self.subcommands)}",
                file=sys.stderr,
            )
            return 2
        if self.subapp is None:
            print(f"usage: jupyter-dl {{{'|'.join(self.subcommands)}}} [--help]", file=sys.stderr)
            self.exit(2)
        return self.subapp.start()


def main(argv=None):
    from traitlets import TraitError

    app = JupyterDLApp.instance()
    try:
        app.initialize(argv)
    except (TraitError, ValueError) as exc:  # a bad option value: one line, not a traceback
        print(f"jupyter-dl: {exc}", file=sys.stderr)
        sys.exit(2)
    code = app.start()
    sys.exit(code or 0)
