"""An S3-compatible server on a free loopback port for warehouses on ``s3://``: the
``moto`` package's server mode, a stand-in for S3 (nothing else S3-compatible can run
here). It keeps objects in memory and checks no signature, so the credentials the tests
give the sink are placeholders; the sink's AWS SDK signs and sends every request as it
would to S3."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tidemark.core.ports import free_port, port_is_open

#: The AWS SDK's variables for the sink's process: placeholders the server accepts.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "tidemark-test",
    "AWS_SECRET_ACCESS_KEY": "tidemark-test-secret",
    "AWS_REGION": "us-east-1",
}


class ObjectStore:
    """A moto server process started by the tests, stopped by its process id."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        """``sink.catalog_properties`` that point ``S3FileIO`` at this server."""
        return {"s3.endpoint": self.endpoint, "s3.path-style-access": "true"}

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_REGION"],
        )

    def keys(self, bucket: str, prefix: str = "") -> set[str]:
        """Every object's key under ``prefix``."""
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return {item["Key"] for page in pages for item in page.get("Contents", [])}

    def start(self, timeout: float = 60) -> ObjectStore:
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        with open(self.folder / "moto.log", "wb") as log:
            self._process = subprocess.Popen(
                command, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not port_is_open(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.folder / "moto.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the S3-compatible server did not start:\n{tail}")
            time.sleep(0.2)
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
