"""jupyter_server extension: the authenticated REST API the JupyterLab jobs panel polls."""


def _load_jupyter_server_extension(serverapp):
    from jupyter_dl.jobs.store import JobStore
    from jupyter_dl.server.handlers import setup_handlers
    from jupyter_dl.server.service import JobService

    store = JobStore(config=serverapp.config)
    setup_handlers(serverapp.web_app, JobService(store, root_dir=serverapp.root_dir))
    serverapp.log.info(f"jupyter-dl: jobs API at /jupyter-dl/api (store {store.root})")
