"""A real JupyterHub on loopback for tests, with the GPU pool as its managed service.

Shared by tests/pool/test_hub_pool.py (tickets only, no single-user servers) and tests/pool/test_hub_end_to_end.py
(real users' servers). The hub runs under pytest's parent-death signal; `running_hub` stops it however the test ends.
"""

import contextlib
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time

import requests
from process_guard import die_with_pytest

SERVICE = "jupyter-dl-pool"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dies_with_hub(command):
    """`command` under setpriv's parent-death signal: the proxy and the services the hub starts die with it when it
    is killed (the hub's own parent-death signal does not reach them)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *command] if setpriv else list(command)


def proxy_command():
    cache = pathlib.Path(os.environ.get("JUPYTER_DL_CACHE", pathlib.Path.home() / ".cache" / "jupyter-dl"))
    local = cache / "chp" / "node_modules" / ".bin" / "configurable-http-proxy"
    found = str(local) if local.exists() else shutil.which("configurable-http-proxy")
    assert found, "configurable-http-proxy is missing: run `make setup` (scripts/setup.sh installs it)"
    return found


@contextlib.contextmanager
def running_hub(root, users, pool_args, extra_config="", admin_scopes=(), env=None, timeout=90):
    """A hub on loopback whose users are `users` (dummy authenticator: any password), with `jupyter-dl-pool` as a
    managed service started with `pool_args`, and a `test-admin` service token with `admin_scopes` besides user
    admin and tokens. `extra_config` is appended to the hub's config (the spawner). Yields a dict: base (the hub's
    public URL), api, url (the pool service's), admin (headers), log, root."""
    port, hub_port, proxy_api, pool_port = (free_port() for _ in range(4))
    admin_token = secrets.token_hex(16)
    config = pathlib.Path(root) / "jupyterhub_config.py"
    scopes = ["admin:users", "tokens", *admin_scopes]
    config.write_text(f"""
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.ConfigurableHTTPProxy.command = {dies_with_hub([proxy_command()])!r}
c.JupyterHub.db_url = "sqlite:///{pathlib.Path(root) / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(pathlib.Path(root) / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(pathlib.Path(root) / "hub.pid")!r}
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.spawner_class = "simple"
c.Authenticator.allowed_users = {set(users)!r}
c.Authenticator.admin_users = {{"root"}}
c.JupyterHub.services = [
    {{"name": {SERVICE!r}, "url": "http://127.0.0.1:{pool_port}",
      "command": {dies_with_hub([sys.executable, "-m", "jupyter_dl.pool.service", *pool_args])!r}}},
    {{"name": "test-admin", "api_token": {admin_token!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "user", "scopes": ["self", "access:services!service={SERVICE}"]}},
    {{"name": "test-admin", "scopes": {scopes!r}, "services": ["test-admin"]}},
]
{extra_config}
""")
    log_path = pathlib.Path(root) / "hub.log"
    log = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(config)],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        preexec_fn=die_with_pytest,
    )
    base = f"http://127.0.0.1:{port}/"
    hub = {
        "base": base,
        "api": base + "hub/api",
        "url": f"{base}services/{SERVICE}/",
        "admin": {"Authorization": f"token {admin_token}"},
        "log": log_path,
        "root": pathlib.Path(root),
    }
    try:
        deadline = time.monotonic() + timeout
        while True:  # the hub is up, and the proxy routes to the pool service
            try:
                if requests.get(hub["api"], timeout=2).ok and requests.get(
                    hub["url"] + "api/pool", timeout=2
                ).status_code in (401, 403):
                    break
            except requests.ConnectionError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.3)
        yield hub
    finally:
        process.terminate()  # the hub stops the servers it spawned (cleanup_servers) before it exits
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def user_token(hub, user, scopes):
    """A new hub token of `user` (created first if need be) with exactly `scopes`."""
    requests.post(f"{hub['api']}/users/{user}", headers=hub["admin"], timeout=10)  # 409 when it exists
    reply = requests.post(
        f"{hub['api']}/users/{user}/tokens",
        headers=hub["admin"],
        timeout=10,
        json={"scopes": list(scopes), "note": "jupyter-dl test"},
    )
    assert reply.status_code == 201, reply.text
    return reply.json()["token"]
