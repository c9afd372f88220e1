"""Kernel side: the engine fork server of a local cluster started here (runtime/engine_forks.py), and the command
ipyparallel's local launcher runs for each engine so that the engine comes from it (runtime/forked_engine.py).

The server starts with the cluster, before its controller, so TensorFlow is imported while the controller starts
and the first engines register; engines that ask before the import is over wait for it. Replacements of dead
engines and an elastic job's new engines fork in about a second instead of importing TensorFlow again.
"""

import os
import shutil
import subprocess
import sys
import tempfile


class ForkServer:
    def __init__(self, environment: dict, niceness: int = 0):
        # A folder only this user can enter: whoever can connect to the socket gets an engine running as this user.
        self.directory = tempfile.mkdtemp(prefix="jdl-engines-")
        self.socket_path = os.path.join(self.directory, "forks.sock")
        self.ready_path = self.socket_path + ".ready"  # made by the server once it has imported everything
        with open(os.path.join(self.directory, "server.log"), "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "jupyter_dl.runtime.engine_forks",
                    self.socket_path,
                    str(os.getpid()),
                    str(niceness),
                ],
                env={**os.environ, **environment},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in a terminal kernel does not reach it
            )

    @property
    def engine_cmd(self) -> list:
        """ipyparallel's LocalEngineLauncher.engine_cmd for an engine forked from this server."""
        return [sys.executable, "-m", "jupyter_dl.runtime.forked_engine", self.socket_path]

    @property
    def importing(self) -> bool:
        """Whether the server is still importing (engines that asked for a fork wait for it)."""
        return self.process.poll() is None and not os.path.exists(self.ready_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 5.0):
        """End the server (engines already forked are the launcher's to stop) and remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
