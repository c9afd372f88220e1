"""`jupyter-dl doctor`: one table of what jupyter-dl needs and what this environment has, with the fix for each
failing line, and last which backend `--backend auto` uses here. Exit 1 when something blocks jobs (FAIL);
warnings do not (sidebar, NCCL, and Horovod: without it zero-code cells run on TensorFlow's collectives).

`load_hint()` is the cheap version `%load_ext jupyter_dl` runs: module lookups only, no TensorFlow import."""

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

from traitlets import Float, Unicode
from traitlets.config import Application

from jupyter_dl._version import __version__
from jupyter_dl.cli.checks import FAIL, INFO, OK, WARN, Check, dist_version, pip_command, version_tuple
from jupyter_dl.cli.stack_checks import auto_backend, finish_probe, stack_checks, start_probe

MIN_IPP = (9, 2)
MIN_PY = (3, 10)


def load_hint(stream=None):
    """One line on stderr when something essential for jobs is missing; silent otherwise (runs at %load_ext).
    Horovod is not essential: without it the first job says it runs on TensorFlow's collectives."""
    missing = [name for name in ("tensorflow", "ipyparallel") if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"[jupyter-dl] {', '.join(missing)} not found in this kernel's environment: %%distribute cannot run "
            f"jobs yet. Run `jupyter-dl doctor` in a terminal for what to install.",
            file=stream or sys.stderr,
        )
    return missing


def python_check():
    found = f"{sys.version.split()[0]} ({sys.executable})"
    if sys.version_info[:2] < MIN_PY:
        return Check("Python", FAIL, found, "use Python 3.10 or newer for the kernel's environment")
    return Check("Python", OK, found)


def ipyparallel_check():
    version = dist_version("ipyparallel")
    if not version:
        return Check("ipyparallel", FAIL, "not installed", pip_command("ipyparallel>=9.2"))
    if version_tuple(version) < MIN_IPP:
        return Check("ipyparallel", FAIL, version, pip_command("ipyparallel>=9.2"))
    return Check("ipyparallel", OK, version)


def extension_checks():
    """Read the configuration the way `jupyter labextension list` / `jupyter server extension list` do (those
    commands take seconds each); the jobs sidebar needs both, jobs themselves neither (so: warn)."""
    checks = []
    try:
        from jupyter_core.paths import jupyter_config_path, jupyter_path
        from jupyterlab_server.config import get_federated_extensions, get_page_config

        paths = jupyter_path("labextensions")
        ext = get_federated_extensions(paths).get("jupyter-dl")
        disabled = get_page_config(paths).get("disabledExtensions") or {}
        if ext is None:
            checks.append(
                Check(
                    "Lab extension (jobs panel)",
                    WARN,
                    "not installed",
                    pip_command("jupyter_dl") + " --force-reinstall (the wheel carries it)",
                )
            )
        elif "jupyter-dl" in disabled:
            checks.append(
                Check(
                    "Lab extension (jobs panel)",
                    WARN,
                    f"{ext['version']} disabled",
                    "jupyter labextension enable jupyter-dl",
                )
            )
        elif not list(Path(ext["ext_path"], "static").glob("remoteEntry.*.js")):
            checks.append(
                Check(
                    "Lab extension (jobs panel)",
                    WARN,
                    f"{ext['ext_path']} has no built bundle",
                    "jupyter labextension develop --overwrite . (in a clone), or reinstall the wheel",
                )
            )
        else:
            checks.append(Check("Lab extension (jobs panel)", OK, f"{ext['version']} enabled ({ext['ext_path']})"))
    except ImportError:
        checks.append(
            Check("Lab extension (jobs panel)", WARN, "JupyterLab not installed", pip_command("jupyterlab>=4"))
        )
    try:
        from jupyter_core.paths import jupyter_config_path
        from jupyter_server.extension.config import ExtensionConfigManager

        enabled = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
        if enabled.get("jupyter_dl"):
            checks.append(Check("Server extension (jobs API)", OK, "jupyter_dl enabled"))
        else:
            checks.append(
                Check(
                    "Server extension (jobs API)",
                    WARN,
                    "disabled" if "jupyter_dl" in enabled else "not in the server's configuration",
                    "jupyter server extension enable jupyter_dl",
                )
            )
    except ImportError:
        checks.append(
            Check("Server extension (jobs API)", WARN, "jupyter_server not installed", pip_command("jupyter_server>=2"))
        )
    return checks


def configured_pool_url():
    """(url, where it came from): $JUPYTER_DL_POOL_URL, else c.JobRunner.pool_url in the IPython kernel config."""
    if os.environ.get("JUPYTER_DL_POOL_URL"):
        return os.environ["JUPYTER_DL_POOL_URL"], "$JUPYTER_DL_POOL_URL"
    from traitlets.config.loader import ConfigFileNotFound, JSONFileConfigLoader, PyFileConfigLoader

    try:
        from IPython.paths import get_ipython_dir

        dirs = [
            os.path.join(get_ipython_dir(), "profile_default"),
            os.path.join(sys.prefix, "etc", "ipython"),
            "/usr/local/etc/ipython",
            "/etc/ipython",
        ]
    except ImportError:
        return "", ""
    for folder in dirs:
        for base in ("ipython_kernel_config", "ipython_config"):
            for loader in (PyFileConfigLoader, JSONFileConfigLoader):
                filename = base + (".py" if loader is PyFileConfigLoader else ".json")
                try:
                    config = loader(filename, path=folder).load_config()
                except ConfigFileNotFound:
                    continue
                except Exception:  # a broken config file is the kernel's problem to report, not ours
                    continue
                # c.Launcher is the section's name before the rename; the kernel still reads it.
                url = config.get("JobRunner", {}).get("pool_url") or config.get("Launcher", {}).get("pool_url")
                if url:
                    return url, os.path.join(folder, filename)
    return "", ""


def pool_check(url, source, timeout):
    if not url:
        return Check("Pool service", INFO, "not configured (GPUs from the embedded per-host pool)")
    import requests

    target = url.rstrip("/") + "/api/pool"
    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    try:
        response = requests.get(target, timeout=timeout, headers={"Authorization": f"token {token}"})
    except requests.RequestException as exc:
        reason = type(exc).__name__ if not str(exc) else str(exc).split(":")[-1].strip(" ')>")
        return Check(
            "Pool service",
            FAIL,
            f"{url} (from {source}) unreachable: {reason[:100]}",
            f"start the jupyter-dl-pool service (a JupyterHub service), or fix/unset {source}",
        )
    if response.status_code in (401, 403):
        return Check(
            "Pool service",
            WARN,
            f"{url} reachable, token refused (HTTP {response.status_code})",
            "run the kernel in a hub-spawned server (it sets JUPYTERHUB_API_TOKEN)",
        )
    if response.status_code >= 400:
        return Check(
            "Pool service",
            FAIL,
            f"{url} answered HTTP {response.status_code} (not a jupyter-dl-pool?)",
            f"point {source} at the service URL, e.g. https://hub/services/jupyter-dl-pool/",
        )
    summary = response.json()
    return Check("Pool service", OK, f"{url}: {summary.get('free')} of {summary.get('gpus')} GPUs free")


def run_checks(pool_url="", timeout=5.0, probe_timeout=180.0):
    """(the table's checks, the line saying which backend `--backend auto` uses)."""
    proc = start_probe()  # the slow part (TensorFlow import) runs while the rest is read
    try:
        checks = [python_check(), ipyparallel_check(), *extension_checks()]
        url, source = (pool_url, "--pool-url") if pool_url else configured_pool_url()
        checks.append(pool_check(url, source, timeout))
    finally:
        probe = finish_probe(proc, probe_timeout)
    return [checks[0], *stack_checks(probe), *checks[1:]], auto_backend(probe)[1]


def format_table(checks):
    rows = [("CHECK", "STATUS", "FOUND")] + [(c.name, c.status, c.found) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = []
    for row, check in zip(rows, [None, *checks]):
        lines.append(f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}".rstrip())
        if check is not None and check.fix and check.status in (FAIL, WARN):
            lines.append(f"{'':{widths[0]}}  {'':{widths[1]}}  fix: {check.fix}")
    return "\n".join(lines)


class DoctorApp(Application):
    name = "jupyter-dl doctor"
    version = __version__
    description = "What jupyter-dl needs and what this environment has; exit 1 when something blocks jobs."
    pool_url = Unicode(
        "",
        help="Pool service URL to check. Empty: $JUPYTER_DL_POOL_URL, else c.JobRunner.pool_url "
        "from the IPython kernel configuration.",
    ).tag(config=True)
    timeout = Float(5.0, help="Seconds to wait for the pool service to answer.").tag(config=True)
    probe_timeout = Float(180.0, help="Seconds to wait for TensorFlow and Horovod to import in a child process.").tag(
        config=True
    )
    aliases = {"pool-url": "DoctorApp.pool_url", "timeout": "DoctorApp.timeout"}

    def start(self):
        if self.extra_args:
            print(
                f"jupyter-dl doctor: unexpected argument {self.extra_args[0]!r}; see jupyter-dl doctor --help",
                file=sys.stderr,
            )
            return 2
        checks, backend = run_checks(self.pool_url, self.timeout, self.probe_timeout)
        print(format_table(checks))
        failed = [c.name for c in checks if c.status == FAIL]
        if failed:
            print(
                f"\n{len(failed)} problem(s) block jobs: {', '.join(failed)}. Apply the fixes above, then run "
                f"`jupyter-dl doctor` again."
            )
        else:
            warned = sum(c.status == WARN for c in checks)
            print("\nready: %%distribute can run jobs" + (f" ({warned} warning(s) above)" if warned else ""))
        print(backend)
        return 1 if failed else 0
