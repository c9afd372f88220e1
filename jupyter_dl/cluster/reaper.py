"""Kernel side: the local cluster ends with the kernel that started it.

ipyparallel starts its controller in a session of its own, so a kernel that is shut down or killed leaves the
controller and its scheduler processes running (about 430 MB each time). The engines watch the kernel themselves
(runtime.rank.describe); the controller cannot run our code, so a small detached watcher does it for them: it exits
quietly when the cluster is stopped normally, and ends the controller's process tree when the kernel is gone.
"""

import subprocess
import sys
import time

INTERVAL = 1.0


def start(kernel_pid: int, pids: list) -> subprocess.Popen:
    """Watch `kernel_pid`; when it is gone, end the processes `pids` and all their children."""
    return subprocess.Popen(
        [sys.executable, "-m", "jupyter_dl.cluster.reaper", str(kernel_pid), *map(str, pids)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # outlives the kernel's process group


def _alive(proc) -> bool:
    from jupyter_dl.host.processes import process_running

    return process_running(proc)


def watch(kernel_pid: int, pids: list, interval: float = INTERVAL):
    import psutil

    def processes(ids):
        found = []
        for pid in ids:
            try:
                found.append(psutil.Process(pid))
            except psutil.Error:
                pass
        return found

    kernel = processes([kernel_pid])
    cluster = processes(pids)
    while True:
        if not any(_alive(p) for p in cluster):
            return  # stopped normally
        if not kernel or not _alive(kernel[0]):
            break
        time.sleep(interval)
    tree = []
    for proc in cluster:
        try:
            tree += [proc] + proc.children(recursive=True)
        except psutil.Error:
            pass
    for proc in tree:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(tree, timeout=5)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass


if __name__ == "__main__":
    watch(int(sys.argv[1]), [int(a) for a in sys.argv[2:]])
