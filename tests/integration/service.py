"""A server a test starts as a process of its own, in a folder of its own, on a free
loopback port: started and waited for, then stopped by its process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tidemark.core.ports import free_port, port_is_open


class Service:
    """One server process; :meth:`launch` starts it, :meth:`stop` ends it."""

    #: What it is, for the message when it does not start.
    what = "the server"
    #: Its log, in its folder.
    log_name = "server.log"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def launch(self, command: list[str], timeout: float) -> None:
        """Start ``command`` in the folder, and wait until the port takes connections."""
        log_path = self.folder / self.log_name
        with open(log_path, "wb") as log:
            self._process = subprocess.Popen(
                command, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not port_is_open(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.what} did not start:\n{tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        self._process = None
