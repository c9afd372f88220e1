"""Run cells in a notebook's kernel on a Jupyter server over HTTP, as JupyterLab does: a session for the notebook
(REST), then execute requests and their outputs on the kernel's websocket. Through a hub's proxy this is exactly the
path a user's browser takes, with the user's token in place of the login cookie."""

import json
import time
import uuid

import requests
import websocket


class Cell:
    """What one executed cell showed: stream text by name, error (ename, evalue) or None, whether it finished."""

    def __init__(self, msg_id):
        self.msg_id = msg_id
        self.streams = {"stdout": "", "stderr": ""}
        self.error = None
        self.done = False

    @property
    def text(self):
        return self.streams["stdout"] + self.streams["stderr"]


class NotebookKernel:
    def __init__(self, server_url, token, path, timeout=60):
        """server_url: the server's base URL (a hub's `<hub>/user/<name>/`); path: the notebook, relative to its
        root (it need not exist: a session is what names a kernel's notebook)."""
        self.headers = {"Authorization": f"token {token}"}
        reply = requests.post(
            server_url + "api/sessions",
            headers=self.headers,
            timeout=timeout,
            json={"path": path, "name": path, "type": "notebook", "kernel": {"name": "python3"}},
        )
        assert reply.status_code == 201, reply.text
        self.kernel_id = reply.json()["kernel"]["id"]
        self.session = uuid.uuid4().hex
        url = server_url.replace("http", "ws", 1) + f"api/kernels/{self.kernel_id}/channels?session_id={self.session}"
        # The handshake waits for the kernel to start; reads then poll in short steps (see wait).
        self.ws = websocket.create_connection(
            url, header=[f"{k}: {v}" for k, v in self.headers.items()], timeout=timeout
        )
        self.ws.settimeout(1)
        self.cells = {}

    def execute(self, code) -> Cell:
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "session": self.session,
            "username": "test",
            "version": "5.3",
        }
        content = {"code": code, "silent": False, "store_history": True, "allow_stdin": False, "stop_on_error": True}
        message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
        self.ws.send(json.dumps(message))
        self.cells[msg_id] = cell = Cell(msg_id)
        return cell

    def wait(self, cell, until=None, timeout=120) -> Cell:
        """Read the kernel's messages until the cell finished (or `until(cell)` holds); AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while not cell.done and not (until and until(cell)):
            assert time.monotonic() < deadline, f"cell still running after {timeout}s; it showed:\n{cell.text[-3000:]}"
            self._read_one()
        return cell

    def run(self, code, timeout=120) -> Cell:
        """Execute and wait; AssertionError when the cell raised, with its output."""
        cell = self.wait(self.execute(code), timeout=timeout)
        assert cell.error is None, f"{cell.error}\n{cell.text[-3000:]}"
        return cell

    def _read_one(self):
        try:
            message = json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            return
        cell = self.cells.get(message.get("parent_header", {}).get("msg_id"))
        if cell is None:
            return
        kind, content = message["header"]["msg_type"], message["content"]
        if kind == "stream":
            cell.streams[content["name"]] += content["text"]
        elif kind == "error":
            cell.error = (content["ename"], content["evalue"])
        elif kind == "execute_reply" and content.get("status") == "error":
            cell.error = cell.error or (content.get("ename"), content.get("evalue"))
        elif kind == "status" and content["execution_state"] == "idle":
            cell.done = True  # idle comes after every output of the request on the same socket

    def close(self):
        self.ws.close()
