"""Engine side: bring what native code writes to file descriptor 2 during a job into the rank's captured stderr.

ipyparallel captures Python's sys.stderr only. Horovod's C++ core (its stall inspector, gloo and NCCL errors) and
TensorFlow's C++ logging (`E0000 ... cuda_platform.cc:51] failed call to cuInit ...`) write to fd 2, which on an
engine goes to a log file nobody reads. While a job runs, fd 2 is a pipe whose lines a thread forwards to
sys.stderr, each tagged with NATIVE_TAG, so they reach the per-rank logs (tag removed) while the kernel's output
relay keeps them out of the cell unless `--output all` asks for every rank's output. The tag and the helpers that
read it are the wire's (wire/native_tags.py), shared with the kernel.
"""

import os
import re
import threading

from jupyter_dl.wire.native_tags import NATIVE_TAG

# absl-format INFO lines (`I0000 00:00:... file.cc:12] ...`) are TensorFlow start-up chatter, not news to a user.
_INFO_LINE = re.compile(r"^I\d{4} ")
_NOISE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


class NativeStderr:
    """Context manager: redirect fd 2 into `sink` (a text stream) line by line for its duration."""

    def __init__(self, sink):
        self.sink = sink
        self._saved = None
        self._thread = None

    def __enter__(self):
        try:
            read_fd, write_fd = os.pipe()
            self._saved = os.dup(2)
        except OSError:  # out of descriptors: run without forwarding rather than fail the job
            return self
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._thread = threading.Thread(target=self._forward, args=(read_fd,), name="jdl-native-stderr", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._saved is None:
            return False
        os.dup2(self._saved, 2)  # closes the pipe's last write end (unless a child kept one): the thread sees EOF
        os.close(self._saved)
        self._saved = None
        self._thread.join(timeout=1.0)
        return False

    def _forward(self, read_fd):
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            pending = b""
            while True:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                self._write(lines)
            if pending:
                self._write([pending])

    def _write(self, raw_lines):
        text = "".join(
            NATIVE_TAG + line + "\n"
            for line in (raw.decode("utf-8", "replace") for raw in raw_lines)
            if not _INFO_LINE.match(line) and line.strip() != _NOISE and line.strip()
        )
        if text:
            try:
                self.sink.write(text)
                self.sink.flush()
            except Exception:  # the stream closed under us at the very end of a job; nothing left to tell
                pass
