"""A real Hive metastore for the sink's ``hive`` catalog: the one the pyspark wheel ships
(Hive 2.3), on an embedded Derby database in a folder of its own, serving Thrift on a
free loopback port (``hive/Metastore.java`` starts it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tidemark.core.binaries import java_home
from tidemark.core.ports import free_port, port_is_open

LAUNCHER = Path(__file__).parent / "hive" / "Metastore.java"


class Metastore:
    """A Hive metastore process started by the tests, stopped by its process id."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> Metastore:
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
        shutil.rmtree(self.folder, ignore_errors=True)  # its transaction tables made anew
        self.folder.mkdir(parents=True)
        settings = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.folder / 'db'}"
            ";create=true",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": str(self.folder / "warehouse"),
            # its logs in its folder, not in /tmp/<user>, and no asynchronous logger
            # (whose library the wheel does not ship)
            "hive.log.dir": str(self.folder),
            "hive.async.log.enabled": "false",
            "derby.stream.error.file": str(self.folder / "derby.log"),
        }
        command = [
            str(java_home() / "bin" / "java"),
            "-Xmx384m",
            "-cp",
            f"{jars}/*",
            *(f"-D{k}={v}" for k, v in settings.items()),
            str(LAUNCHER),
            "-p",
            str(self.port),
        ]
        with open(self.folder / "metastore.log", "wb") as log:
            self._process = subprocess.Popen(
                command, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not port_is_open(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.folder / "metastore.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the Hive metastore did not start:\n{tail}")
            time.sleep(0.3)
        return self

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
