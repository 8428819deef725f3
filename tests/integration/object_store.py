"""An S3-compatible server on a free loopback port for warehouses on ``s3://``: the
``moto`` package's server mode, a stand-in for S3 (nothing else S3-compatible can run
here). It keeps objects in memory and checks no signature, so the credentials the tests
give the sink are placeholders; the sink's AWS SDK signs and sends every request as it
would to S3."""

from __future__ import annotations

import sys
from typing import Any

from tests.integration.service import Service

#: The AWS SDK's variables for the sink's process: placeholders the server accepts.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "tidemark-test",
    "AWS_SECRET_ACCESS_KEY": "tidemark-test-secret",
    "AWS_REGION": "us-east-1",
}


class ObjectStore(Service):
    """A moto server process started by the tests, stopped by its process id."""

    what = "the S3-compatible server"
    log_name = "moto.log"

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
        self.launch(command, timeout)
        return self
