"""`jupyter-dl-pool`: the GPU pool as a JupyterHub managed service, for many users on one hub.

Every request carries a hub token (`Authorization: token ...`); JupyterHub checks it and the
`access:services!service=<name>` scope, and says who the user is. A user sees and controls only their own tickets
(another user's id is answered like an unknown one); hub admins and `--admin-users` see all. Priorities and quotas
are the admin's configuration, not the client's to choose. Errors are JSON `{code, message}`.

    jupyter-dl-pool --simulate-gpus gpu1:4,gpu2:4 --max-gpus 4 --max-jobs 2     (or discover this host's GPUs)
"""

import json
import os

from tornado import ioloop, web
from traitlets import Dict, Float, Integer, List, Unicode
from traitlets.config import Application

from jupyter_dl.pool.gang import GangPool, PoolError, Quota, UnknownTicket


class PoolHandler(web.RequestHandler):
    """Hub-authenticated JSON handler (the mixin is added at start-up: jupyterhub is imported only there)."""

    def initialize(self, pool, admins, priorities):
        self.pool, self.admins, self.priorities = pool, admins, priorities

    def check_xsrf_cookie(self):
        pass  # token-authenticated API, no cookies

    @property
    def user(self):
        return self.current_user["name"]

    @property
    def is_admin(self):
        return bool(self.current_user.get("admin")) or self.user in self.admins

    def reply(self, body, status=200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None))[1]
        if isinstance(exc, UnknownTicket):
            status_code, code, message = 404, "not_found", str(exc)
        elif isinstance(exc, PoolError):
            status_code, code, message = 409, "refused", str(exc)
        elif isinstance(exc, web.HTTPError):
            code, message = f"http_{status_code}", exc.log_message or self._reason
        else:
            code, message = "internal", "internal error; see the pool service log"
        self.set_status(status_code)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": code, "message": message}))

    def body(self):
        try:
            return json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the body must be JSON") from None

    def ticket_json(self, ticket):
        return self.pool.view(ticket)

    def devices(self, body, key):
        devices = body.get(key) or []
        if not isinstance(devices, list) or not all(
            isinstance(d, list) and len(d) == 2 and isinstance(d[1], int) for d in devices
        ):
            raise web.HTTPError(400, f"{key} must be a list of [host, gpu index] pairs")
        return [(str(host), gpu) for host, gpu in devices]


class TicketsHandler(PoolHandler):
    @web.authenticated
    def get(self):
        self.reply({"tickets": [self.ticket_json(t) for t in self.pool.visible(self.user, self.is_admin)]})

    @web.authenticated
    def post(self):
        body = self.body()
        gpus = body.get("gpus")
        if not isinstance(gpus, int):
            raise web.HTTPError(400, "gpus must be a whole number")
        allowed = self.devices(body, "allowed")
        min_gpus = body.get("min_gpus")
        if min_gpus is not None and not isinstance(min_gpus, int):
            raise web.HTTPError(400, "min_gpus must be a whole number, or left out for a fixed-size job")
        ticket = self.pool.submit(
            self.user,
            gpus,
            priority=self.priorities.get(self.user, 0),
            job=str(body.get("job", "")),
            owner=str(body.get("owner", "")),
            allowed=allowed,
            min_gpus=min_gpus,
        )
        self.reply(self.ticket_json(ticket), 201)


class TicketHandler(PoolHandler):
    @web.authenticated
    def get(self, ticket_id):
        ticket = self.pool.owned(ticket_id, self.user, self.is_admin)
        self.reply(self.ticket_json(ticket))

    @web.authenticated
    def delete(self, ticket_id):
        ticket = self.pool.release(ticket_id, self.user, self.is_admin)
        self.reply(self.ticket_json(ticket))


class ResizeHandler(PoolHandler):
    """An elastic job keeps only the GPUs it names; the same ownership rule as releasing it."""

    @web.authenticated
    def post(self, ticket_id):
        ticket = self.pool.resize(ticket_id, self.user, self.devices(self.body(), "keep"), self.is_admin)
        self.reply(self.ticket_json(ticket))


class HeartbeatHandler(PoolHandler):
    @web.authenticated
    def post(self):
        owner = str(self.body().get("owner", ""))
        if not owner:
            raise web.HTTPError(400, "owner is required")
        self.pool.heartbeat(owner, user=self.user)
        self.reply({"ok": True})


class SummaryHandler(PoolHandler):
    @web.authenticated
    def get(self):
        self.reply({"gpus": self.pool.size, "free": self.pool.free_count(), "queued": len(self.pool.queue())})


class PoolService(Application):
    name = "jupyter-dl-pool"
    description = "GPU pool with gang admission and quotas, as a JupyterHub service."

    port = Integer(10101, help="Port to listen on (loopback), when JUPYTERHUB_SERVICE_URL does not say.").tag(
        config=True
    )
    simulate_gpus = Unicode(
        "", help="Simulated inventory 'host:count,host:count' (for machines without GPUs); empty: this host's GPUs."
    ).tag(config=True)
    max_gpus = Integer(0, help="GPUs one user may hold at once (0: no limit).").tag(config=True)
    max_jobs = Integer(0, help="Jobs one user may run at once (0: no limit).").tag(config=True)
    quotas = Dict(help="Per-user quotas {user: {max_gpus, max_jobs}} overriding the defaults.").tag(config=True)
    priorities = Dict(help="Per-user priority {user: int}; higher is served first. Users cannot set their own.").tag(
        config=True
    )
    admin_users = List(Unicode(), help="Users who see and control every ticket (hub admins always do).").tag(
        config=True
    )
    lease_ttl = Float(60.0, help="Seconds without a heartbeat after which a kernel's tickets end.").tag(config=True)
    reserve_after = Float(3600.0, help="Seconds a blocked job waits before freed GPUs are kept for it.").tag(
        config=True
    )
    shrink_grace = Float(
        60.0,
        help="Seconds an elastic job may take to give back GPUs another job waits for. The pool keeps asking and "
        "never takes them back itself (the job's ranks still run on them); one that takes longer borrows no more "
        "GPUs for the rest of its run, and an admin may end it.",
    ).tag(config=True)

    aliases = {
        "port": "PoolService.port",
        "simulate-gpus": "PoolService.simulate_gpus",
        "max-gpus": "PoolService.max_gpus",
        "max-jobs": "PoolService.max_jobs",
        "lease-ttl": "PoolService.lease_ttl",
        "reserve-after": "PoolService.reserve_after",
        "shrink-grace": "PoolService.shrink_grace",
    }

    def inventory(self):
        if self.simulate_gpus:
            hosts = {}
            for part in self.simulate_gpus.split(","):
                host, _, count = part.partition(":")
                hosts[host.strip()] = list(range(int(count)))
            return hosts
        import socket

        from jupyter_dl.host.gpus import discover

        return {socket.gethostname(): discover()}

    def make_pool(self):
        limit = Quota(self.max_gpus or None, self.max_jobs or None)
        quotas = {user: Quota(q.get("max_gpus"), q.get("max_jobs")) for user, q in self.quotas.items()}
        return GangPool(
            self.inventory(),
            quotas,
            limit,
            lease_ttl=self.lease_ttl,
            reserve_after=self.reserve_after,
            shrink_grace=self.shrink_grace,
        )

    def make_app(self, pool):
        from jupyterhub.services.auth import HubAuthenticated
        from jupyterhub.utils import url_path_join

        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
        settings = {"pool": pool, "admins": set(self.admin_users), "priorities": dict(self.priorities)}
        routes = [
            ("api/tickets", TicketsHandler),
            (r"api/tickets/([^/]+)", TicketHandler),
            (r"api/tickets/([^/]+)/resize", ResizeHandler),
            ("api/heartbeat", HeartbeatHandler),
            ("api/pool", SummaryHandler),
        ]
        handlers = [
            (url_path_join(prefix, path), type(cls.__name__, (HubAuthenticated, cls), {}), settings)
            for path, cls in routes
        ]
        return web.Application(handlers)

    def start(self):
        from urllib.parse import urlparse

        pool = self.make_pool()
        app = self.make_app(pool)
        url = os.environ.get("JUPYTERHUB_SERVICE_URL")
        port = urlparse(url).port if url else self.port
        app.listen(port, address="127.0.0.1")
        self.log.info(
            "jupyter-dl-pool: %d GPUs on %d hosts, listening on 127.0.0.1:%d", pool.size, len(pool.inventory), port
        )
        ioloop.PeriodicCallback(pool.tick, 5000).start()
        ioloop.IOLoop.current().start()


main = PoolService.launch_instance

if __name__ == "__main__":
    main()
