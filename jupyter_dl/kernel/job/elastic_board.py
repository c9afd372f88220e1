"""Kernel side: where an elastic job's rank 0 reads, at each commit point, whether the kernel wants the group changed.

The ranks are busy running the cell, so the kernel cannot send them a task; rank 0 instead asks this small HTTP
server (on the address the ranks already reach for the rendezvous) once per epoch, and tells the other ranks in a
collective (runtime/elastic.py). One GET of a few bytes per commit point: nothing a training step would notice.
It also says when a rank's engine died, for backends whose survivors would otherwise notice only seconds later.
"""

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ElasticBoard:
    def __init__(self, bind_address: str):
        self._change: str | None = None
        self._lost: str | None = None
        self._path = f"/{secrets.token_urlsafe(16)}"  # only this job's ranks know where to read
        board = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != board._path:
                    self.send_error(404)
                    return
                body = json.dumps({"change": board._change, "lost": board._lost}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # not the notebook's stderr
                pass

        self._server = ThreadingHTTPServer((bind_address, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="jdl-elastic-board", daemon=True)
        self._thread.start()

    def url(self, address: str) -> str:
        """Where ranks read it, through `address` (the kernel's address they reach)."""
        return f"http://{address}:{self._server.server_address[1]}{self._path}"

    def request(self, reason: str | None):
        """Ask for a change (the reason is what the job's record and the cell will say), or withdraw the request."""
        self._change = reason

    def report_lost(self, what: str):
        """A rank's engine died: the other ranks' listeners (runtime/elastic.py) end their waits for it at once."""
        self._lost = what

    @property
    def requested(self) -> str | None:
        return self._change

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
