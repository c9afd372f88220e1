"""Kernel side: talk to the `jupyter-dl-pool` service with the user's hub token (`requests`)."""

import os

import requests

from jupyter_dl.pool.access import PoolAccess
from jupyter_dl.pool.gang import PoolError


class PoolClient(PoolAccess):
    def __init__(self, url=None, token=None, timeout=10.0):
        # In a hub-spawned server the token is the server's own; the URL is the service's public one.
        self.url = (url or os.environ.get("JUPYTER_DL_POOL_URL", "")).rstrip("/") + "/"
        self.token = token or os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self.timeout = timeout
        if self.url == "/":
            raise PoolError("no pool service URL: set JUPYTER_DL_POOL_URL (e.g. https://hub/services/jupyter-dl-pool)")

    def _call(self, method, path, body=None):
        response = requests.request(
            method, self.url + path, json=body, timeout=self.timeout, headers={"Authorization": f"token {self.token}"}
        )
        try:
            data = response.json()
        except ValueError:
            data = {"message": response.text[:200]}
        if response.status_code >= 400:
            raise PoolError(f"pool: {data.get('message') or response.reason} (HTTP {response.status_code})")
        return data

    def submit(self, gpus, job="", owner="", allowed=(), min_gpus=None):
        body = {"gpus": gpus, "job": job, "owner": owner, "allowed": [list(d) for d in allowed]}
        if min_gpus is not None:  # only elastic requests carry it
            body["min_gpus"] = min_gpus
        return self._call("POST", "api/tickets", body)

    def ticket(self, ticket_id):
        return self._call("GET", f"api/tickets/{ticket_id}")

    def tickets(self):
        return self._call("GET", "api/tickets")["tickets"]

    def release(self, ticket_id):
        return self._call("DELETE", f"api/tickets/{ticket_id}")

    def resize(self, ticket_id, keep_devices):
        return self._call("POST", f"api/tickets/{ticket_id}/resize", {"keep": [list(d) for d in keep_devices]})

    def heartbeat(self, owner):
        return self._call("POST", "api/heartbeat", {"owner": owner})

    def summary(self):
        return self._call("GET", "api/pool")
