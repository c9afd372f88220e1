"""Kernel side: the request handler of a job's gloo rendezvous server, answering a key that is not there yet when it
arrives instead of at once.

`hvd.init` meets the other ranks six times (global, local and cross contexts, then again for process set 0), and in
each Horovod's store asks for the peers' keys, sleeps 10 ms when one is missing, and asks again. Ranks reach a
rendezvous a few milliseconds apart, so most of them paid a sleep. Here a GET for a missing key waits on the server
until another rank PUTs it (at most WAIT_S, then the usual 404 and Horovod retries as before), so a rank hears the
key the moment it lands. Measured in bench/horovod_init.py.
"""

import threading
import time

from horovod.runner.http.http_server import RendezvousHandler

WAIT_S = 0.2  # well under Horovod's per-request timeout; a missing key then gets the ordinary "not found"


class WaitingRendezvousHandler(RendezvousHandler):
    def _get_value(self, scope, key):
        arrivals = _arrivals_of(self.server)
        deadline = time.monotonic() + WAIT_S
        with arrivals:
            while True:
                value = super()._get_value(scope, key)
                left = deadline - time.monotonic()
                if value is not None or left <= 0:
                    return value
                arrivals.wait(left)

    def _put_value(self, scope, key, value):
        super()._put_value(scope, key, value)
        arrivals = _arrivals_of(self.server)
        with arrivals:
            arrivals.notify_all()


_creating = threading.Lock()


def _arrivals_of(server) -> threading.Condition:
    """One condition per server (handlers are made per request), woken by every PUT."""
    with _creating:
        if not hasattr(server, "jdl_arrivals"):
            server.jdl_arrivals = threading.Condition()
        return server.jdl_arrivals
