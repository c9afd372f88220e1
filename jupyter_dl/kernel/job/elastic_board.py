"""Kernel side: where an elastic job's rank 0 reads, at each commit point, whether the kernel wants the group changed.

The ranks are busy running the cell, so the kernel cannot send them a task; rank 0 instead asks this small HTTP
server (on the address the ranks already reach for the rendezvous) once per epoch, and tells the other ranks in a
collective (runtime/elastic.py). One GET of a few bytes per commit point: nothing a training step would notice.
It also says when a peer was lost (its engine died, or its host went silent), for survivors that would otherwise
notice only seconds (a dead engine on TensorFlow's collectives) or minutes (a silent host) later. Every rank asks it
four times a second whether one was (runtime/elastic.py), which is the rank's heartbeat: a host whose ranks all
stopped asking while the others go on is cut off from the job.
"""

import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ElasticBoard:
    def __init__(self, bind_address: str):
        self._change: str | None = None
        self._lost: str | None = None
        self._beats: dict = {}  # rank -> time.monotonic() of its last question
        self._path = f"/{secrets.token_urlsafe(16)}"  # only this job's ranks know where to read
        board = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path, _, query = self.path.partition("?")
                if path != board._path:
                    self.send_error(404)
                    return
                board._beat(urllib.parse.parse_qs(query))
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

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, address: str) -> str:
        """Where ranks read it, through `address` (the kernel's address they reach)."""
        return f"http://{address}:{self.port}{self._path}"

    def request(self, reason: str | None):
        """Ask for a change (the reason is what the job's record and the cell will say), or withdraw the request."""
        self._change = reason

    def report_lost(self, what: str):
        """A rank's engine died, or a host went silent: the other ranks' listeners (runtime/elastic.py) end their
        waits for it at once."""
        self._lost = what

    def _beat(self, query: dict):
        try:
            rank = int(query["rank"][0])
        except (KeyError, ValueError):  # rank 0's read of the request at a commit point
            return
        self._beats[rank] = time.monotonic()

    def silent_hosts(self, hosts, pending, timeout: float) -> dict:
        """{host: [rank, ...]} of the hosts whose ranks (pending: still running) all asked before and then not for
        `timeout` seconds, while a running rank on another host still asks: those hosts are cut off from the job.
        Nothing while no rank asks at all (this kernel was paused, not the hosts)."""
        now = time.monotonic()
        last = {rank: self._beats[rank] for rank in pending if rank in self._beats}
        by_host: dict = {}
        for rank in pending:
            by_host.setdefault(hosts[rank], []).append(rank)
        heard = {rank for rank, t in last.items() if now - t <= timeout}
        asking = {host for host, ranks in by_host.items() if heard & set(ranks)}
        if not asking:
            return {}
        return {host: ranks for host, ranks in by_host.items() if host not in asking and all(r in last for r in ranks)}

    @property
    def requested(self) -> str | None:
        return self._change

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
