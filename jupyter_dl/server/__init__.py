"""jupyter_server extension: the authenticated REST API the JupyterLab jobs panel polls."""


def _load_jupyter_server_extension(serverapp):
    from ..jobs.store import JobStore
    from .handlers import setup_handlers
    from .service import JobService

    store = JobStore(config=serverapp.config)
    setup_handlers(serverapp.web_app, JobService(store, root_dir=serverapp.root_dir))
    serverapp.log.info(f"jupyter-dl: jobs API at /jupyter-dl/api (store {store.root})")


load_jupyter_server_extension = _load_jupyter_server_extension
