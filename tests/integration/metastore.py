"""A real Hive metastore for the sink's ``hive`` catalog: the one the pyspark wheel ships
(Hive 2.3), on an embedded Derby database in a folder of its own, serving Thrift on a
free loopback port (``hive/Metastore.java`` starts it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.integration.service import Service
from tidemark.core.binaries import java_home

LAUNCHER = Path(__file__).parent / "hive" / "Metastore.java"


class Metastore(Service):
    """A Hive metastore process started by the tests, stopped by its process id."""

    what = "the Hive metastore"
    log_name = "metastore.log"

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
        self.launch(command, timeout)
        return self
