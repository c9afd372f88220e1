"""Which notebook each running kernel of this server serves, by the kernel's process id: the panel names the
notebook that owns a cluster (jupyter-dl names its clusters after the kernel's pid)."""


async def notebooks_by_kernel_pid(serverapp) -> dict:
    """{kernel pid: notebook path relative to the server root}; kernels without a session or a local pid are left
    out. Never raises: the cluster list shows without owners rather than not at all."""
    try:
        sessions = await serverapp.session_manager.list_sessions()
    except Exception:
        return {}
    path_by_kernel = {s["kernel"]["id"]: s.get("path") for s in sessions if s.get("kernel")}
    found = {}
    for kernel_id, path in path_by_kernel.items():
        try:
            provisioner = serverapp.kernel_manager.get_kernel(kernel_id).provisioner
        except Exception:
            continue
        pid = getattr(provisioner, "pid", None) or getattr(getattr(provisioner, "process", None), "pid", None)
        if pid and path:
            found[int(pid)] = path
    return found
