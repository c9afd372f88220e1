# A shared GPU host on JupyterHub with the jupyter-dl GPU pool as a managed service.
#
#   pip install "jupyter-dl[hub]"          # on the hub's machine: jupyterhub and the pool service
#   jupyterhub -f jupyterhub_config.py
#
# Users' kernels reach the pool at <hub>/services/jupyter-dl-pool/ with their server's own hub token
# (JUPYTERHUB_API_TOKEN); the spawner passes the pool's URL to them. Every GPU on this host goes into the pool;
# a job gets all the GPUs it asks for at once or waits, fairly, within the quotas below.
import sys

c = get_config()  # noqa: F821 (provided by JupyterHub)

c.JupyterHub.bind_url = "http://:8000"
c.JupyterHub.authenticator_class = "pam"            # your site's authenticator
c.Authenticator.admin_users = {"admin"}

c.JupyterHub.services = [
    {
        "name": "jupyter-dl-pool",
        "url": "http://127.0.0.1:10101",
        "command": [sys.executable, "-m", "jupyter_dl.pool.service",
                    "--max-gpus=4",                   # GPUs one user may hold at once
                    "--max-jobs=2",                   # jobs one user may run at once
                    "--lease-ttl=60",                 # a silent kernel's GPUs return after 60 s
                    "--reserve-after=3600"],          # a blocked big job gets GPUs kept for it after an hour
        # Per-user overrides and priorities go in a config file the service reads, e.g.
        #   c.PoolService.quotas = {"alice": {"max_gpus": 8}}
        #   c.PoolService.priorities = {"deadline-team": 1}
    },
]

# Every user may use the pool; nothing else about their permissions changes.
c.JupyterHub.load_roles = [
    {"name": "user", "scopes": ["self", "access:services!service=jupyter-dl-pool"]},
    # The servers' own tokens need the scope too, for kernels to call the pool.
    {"name": "server", "scopes": ["users:activity!user", "access:servers!server",
                                  "access:services!service=jupyter-dl-pool"]},
]
c.Spawner.environment = {"JUPYTER_DL_POOL_URL": "http://127.0.0.1:8000/services/jupyter-dl-pool/"}
