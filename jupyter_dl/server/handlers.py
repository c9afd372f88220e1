"""Thin tornado handlers over JobService. Every handler requires an authenticated user; errors are
JSON `{code, message}` with the matching HTTP status: a handler lets a ServiceError (or tornado's HTTPError)
propagate, and _Base.write_error, the one translator, writes it."""

import json
import os

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from jupyter_dl.server.service import ServiceError

AUTH_RESOURCE = "jupyter_dl"


class _Base(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def service(self):
        return self.settings["jupyter_dl_service"]

    @property
    def viewer(self):
        """On a JupyterHub (JUPYTERHUB_USER set by the spawner) only the signed-in user's jobs are visible, even
        when the job store is shared; a plain single-user server shows every job in its store."""
        if not os.environ.get("JUPYTERHUB_USER"):
            return None
        return self.current_user.username

    def write_error(self, status_code, **kwargs):
        """Every error reply: a ServiceError a handler let through (its own status, code and message), or tornado's
        (an HTTPError, such as the 403 of a user without access, or 500 for anything unexpected)."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, ServiceError):
            status_code, code, message = exc.status, exc.code, exc.message
        else:
            code = {401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(status_code, "error")
            message = getattr(exc, "log_message", None) or self._reason
        self.set_status(status_code)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"code": code, "message": message}))

    def log_exception(self, typ, value, tb):
        """A ServiceError is an answer (no such job, a bad argument), not a failure of the server: no traceback in
        the log; the request line records its status."""
        if not isinstance(value, ServiceError):
            super().log_exception(typ, value, tb)

    def _call(self, fn, *args, status=200, **kwargs):
        result = fn(*args, **kwargs)
        self.set_status(status)
        return self.finish(json.dumps(result, default=str))

    def _call_with_figures(self, fn, *args, **kwargs):
        """Like _call, for replies holding plotly figures: plotly's own encoder writes them (numpy arrays, dates)."""
        result = fn(*args, **kwargs)
        return self.finish(json.dumps(result, cls=_figure_encoder()))


class JobsHandler(_Base):
    @web.authenticated
    @authorized
    def get(self):
        return self._call(
            lambda: {"jobs": self.service.list_jobs(self.get_query_argument("state", None), viewer=self.viewer)}
        )


class JobHandler(_Base):
    @web.authenticated
    @authorized
    def get(self, job_id):
        return self._call(self.service.get, job_id, viewer=self.viewer)

    @web.authenticated
    @authorized
    def delete(self, job_id):
        return self._call(self.service.cancel, job_id, status=202, viewer=self.viewer, source="the jobs panel")


class MetricsHandler(_Base):
    @web.authenticated
    @authorized
    def get(self, job_id):
        return self._call(
            self.service.metrics,
            job_id,
            self.get_query_argument("since", "0"),
            viewer=self.viewer,
            limit=self.get_query_argument("limit", None),
        )


class FiguresHandler(_Base):
    @web.authenticated
    @authorized
    def get(self, job_id):
        return self._call_with_figures(
            self.service.figures,
            job_id,
            viewer=self.viewer,
            theme=self.get_query_argument("theme", "auto"),
            version=self.get_query_argument("version", None),
        )


class LogsHandler(_Base):
    @web.authenticated
    @authorized
    def get(self, job_id):
        return self._call(
            self.service.logs,
            job_id,
            self.get_query_argument("rank", "0"),
            self.get_query_argument("tail", None),
            self.get_query_argument("stream", "stdout"),
            viewer=self.viewer,
        )


class ModelDownloadHandler(_Base):
    """A kept model's `.keras` file, as an attachment, sent in pieces (models may be hundreds of MB)."""

    CHUNK = 1 << 20

    @web.authenticated
    @authorized
    async def get(self, job_id, name):
        from jupyter_dl.jobs.results import model_file_name

        path = self.service.model_file(job_id, name, viewer=self.viewer)
        filename = model_file_name(self.service.store, job_id, name, viewer=self.viewer)  # the job's name, not its id
        self.set_header("Content-Type", "application/octet-stream")
        self.set_header("Content-Disposition", f'attachment; filename="{filename}"')
        self.set_header("Content-Length", str(path.stat().st_size))
        with open(path, "rb") as f:
            while chunk := f.read(self.CHUNK):
                self.write(chunk)
                await self.flush()
        self.finish()


class CompareHandler(_Base):
    @web.authenticated
    @authorized
    def get(self):
        return self._call_with_figures(
            self.service.compare,
            self.get_query_argument("ids", ""),
            self.get_query_argument("x", "step"),
            viewer=self.viewer,
            theme=self.get_query_argument("theme", "auto"),
        )


class ClusterHandler(_Base):
    @web.authenticated
    @authorized
    async def get(self):
        from jupyter_dl.server.owners import notebooks_by_kernel_pid

        owners = await notebooks_by_kernel_pid(self.serverapp)
        return self._call(self.service.cluster, with_child_processes(owners), viewer=self.viewer)


class ClusterStopHandler(_Base):
    """DELETE stops a running cluster with ipyparallel's own stop (engines, then the controller). It answers at
    once; the stop goes on in the background (engines busy in native code take ipyparallel's kill timeout)."""

    @web.authenticated
    @authorized
    async def delete(self, cluster_id):
        from jupyter_dl.server.owners import notebooks_by_kernel_pid

        # On a hub, only a cluster of this user's kernels (servers of one uid share their cluster files).
        kernels = with_child_processes(await notebooks_by_kernel_pid(self.serverapp)) if self.viewer else {}
        return self._call(self._stop, cluster_id, set(kernels), status=202)

    def _stop(self, cluster_id, kernel_pids):
        import asyncio

        import ipyparallel as ipp

        path = self.service.cluster_file(cluster_id, viewer=self.viewer, kernel_pids=kernel_pids)
        cluster = ipp.Cluster.from_file(path, log=self.log)
        task = asyncio.ensure_future(cluster.stop_cluster())
        _stopping.add(task)  # the loop holds tasks weakly: keep each until it is done
        task.add_done_callback(lambda done: self._stopped(cluster_id, done))
        return {"cluster_id": cluster_id, "state": "stopping"}

    def _stopped(self, cluster_id, task):
        _stopping.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.warning(f"jupyter-dl: stopping cluster {cluster_id}: {task.exception()}")


_stopping: set = set()  # tasks of stops under way


def with_child_processes(notebooks_by_pid: dict) -> dict:
    """{pid: notebook} for each kernel process the server started and every process under it. A kernel started
    through a wrapper (a shell script, `uv run`, a conda activation) runs Python, which names its clusters, under
    another pid than the one the server launched: its clusters showed as "kernel 7265" instead of the notebook."""
    import psutil

    found = dict(notebooks_by_pid)
    for pid, notebook in notebooks_by_pid.items():
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            continue
        for child in children:
            found.setdefault(child.pid, notebook)
    return found


def _warm_up_figures():
    """plotly's imports, in the background: the first loss tab opened would otherwise wait for them."""
    import threading

    from jupyter_dl.live.job_figures import warm_up

    threading.Thread(target=warm_up, name="jupyter-dl-plotly-warm-up", daemon=True).start()


def _figure_encoder():
    """plotly's JSON encoder, and as _call does, anything else it cannot write as its text."""
    from plotly.utils import PlotlyJSONEncoder

    class Encoder(PlotlyJSONEncoder):
        def default(self, obj):
            try:
                return super().default(obj)
            except TypeError:
                return str(obj)

    return Encoder


def setup_handlers(web_app, service):
    web_app.settings["jupyter_dl_service"] = service
    _warm_up_figures()
    base = url_path_join(web_app.settings["base_url"], "jupyter-dl", "api")
    job = r"/jobs/(?P<job_id>[A-Za-z0-9_-]+)"
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "jobs") + "/?", JobsHandler),
            (base + job + "/?", JobHandler),
            (base + job + "/metrics/?", MetricsHandler),
            (base + job + "/figures/?", FiguresHandler),
            (base + job + "/logs/?", LogsHandler),
            (base + job + r"/results/model/(?P<name>[^/]+)/?", ModelDownloadHandler),
            (url_path_join(base, "compare") + "/?", CompareHandler),
            (url_path_join(base, "cluster") + "/?", ClusterHandler),
            (url_path_join(base, "cluster") + r"/(?P<cluster_id>[A-Za-z0-9_.-]+)/?", ClusterStopHandler),
        ],
    )
