"""Kernel side: talk to the `jupyter-dl-pool` service with the user's hub token (`requests`)."""
import os
import time

import requests

from .gang import PoolError


class PoolClient:
    def __init__(self, url=None, token=None, timeout=10.0):
        # In a hub-spawned server the token is the server's own; the URL is the service's public one.
        self.url = (url or os.environ.get("JUPYTER_DL_POOL_URL", "")).rstrip("/") + "/"
        self.token = token or os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self.timeout = timeout
        if self.url == "/":
            raise PoolError("no pool service URL: set JUPYTER_DL_POOL_URL (e.g. https://hub/services/jupyter-dl-pool)")

    def _call(self, method, path, body=None):
        response = requests.request(method, self.url + path, json=body, timeout=self.timeout,
                                    headers={"Authorization": f"token {self.token}"})
        try:
            data = response.json()
        except ValueError:
            data = {"message": response.text[:200]}
        if response.status_code >= 400:
            raise PoolError(f"pool: {data.get('message') or response.reason} (HTTP {response.status_code})")
        return data

    def submit(self, gpus, job="", owner=""):
        return self._call("POST", "api/tickets", {"gpus": gpus, "job": job, "owner": owner})

    def ticket(self, ticket_id):
        return self._call("GET", f"api/tickets/{ticket_id}")

    def tickets(self):
        return self._call("GET", "api/tickets")["tickets"]

    def release(self, ticket_id):
        return self._call("DELETE", f"api/tickets/{ticket_id}")

    def heartbeat(self, owner):
        return self._call("POST", "api/heartbeat", {"owner": owner})

    def summary(self):
        return self._call("GET", "api/pool")

    def wait_granted(self, ticket_id, owner="", on_wait=None, poll=1.0, timeout=None):
        """Block until the ticket is granted (heartbeating meanwhile); on_wait(ticket) is called on each poll."""
        end = time.monotonic() + timeout if timeout else None
        while True:
            ticket = self.ticket(ticket_id)
            if ticket["state"] == "granted":
                return ticket
            if ticket["state"] != "queued":
                raise PoolError(f"pool: ticket {ticket_id} ended while queued ({ticket['state']})")
            if on_wait is not None:
                on_wait(ticket)
            if end is not None and time.monotonic() > end:
                raise PoolError(f"pool: still queued after {timeout:.0f}s (position {ticket['position']}): "
                                f"{ticket['reason']}")
            if owner:
                self.heartbeat(owner)
            time.sleep(poll)
