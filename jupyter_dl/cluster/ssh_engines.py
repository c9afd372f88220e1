"""Kernel side: what a cluster with ipyparallel's SSH engines needs before it starts (ipyparallel's own traits)."""

import sys

from jupyter_dl.errors import UsageError
from jupyter_dl.host import network


def configured(config, classes, name) -> bool:
    """Whether `config` sets trait `name` on any of `classes` (traitlets config sections by class name)."""
    return any(cls.__name__ in config and name in config[cls.__name__] for cls in classes)


def prepare(cluster) -> dict:
    """{host: engines} from ipyparallel's c.SSHEngineSetLauncher.engines, refused when empty before any process
    starts (ipyparallel would start no engine and the wait would only time out); and the controller pointed at this
    host's address on its route to them: ipyparallel's default, loopback, is out of their reach.
    c.Cluster.controller_ip / controller_location override that."""
    from ipyparallel.cluster.launcher import SSHEngineSetLauncher

    hosts = SSHEngineSetLauncher(config=cluster.config).engines
    if not hosts:
        raise UsageError(
            "--engines ssh needs a host list: set c.SSHEngineSetLauncher.engines = {'host1': 2, "
            "'host2': 2} (engines per host) in your IPython or ipcluster config"
        )
    if not configured(cluster.config, [type(cluster)], "controller_ip"):
        cluster.controller_ip = network.address_toward([network.ssh_target(host) for host in hosts])
        if not configured(cluster.config, [type(cluster)], "controller_location"):
            cluster.controller_location = cluster.controller_ip
    return {host: spec.get("n", 1) if isinstance(spec, dict) else int(spec) for host, spec in hosts.items()}


def engine_options(config) -> dict:
    """Launcher settings the SSH engines need unless configured: this kernel's Python, which has jupyter-dl, Horovod
    and ipyparallel, at the same path on the other hosts (a shared filesystem or image)."""
    from ipyparallel.cluster.launcher import SSHEngineSetLauncher

    if configured(config, SSHEngineSetLauncher.mro(), "remote_python"):
        return {}
    return {"remote_python": sys.executable}
