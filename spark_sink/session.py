"""The SparkSession of the sink: Iceberg runtime jar, SQL extensions and the catalog."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.config import Config
from tidemark.runtime import java_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def iceberg_jar() -> Path:
    """The Iceberg runtime jar shipped in the ``snowpark-connect-deps-iceberg`` wheel."""
    from snowpark_connect_deps_iceberg import get_jars_dir

    return Path(get_jars_dir()) / ICEBERG_JAR


def create_session(config: Config) -> SparkSession:
    """A SparkSession for ``config.sink`` (``spark_conf`` entries are applied last)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("JAVA_HOME", str(java_home()))
    # Executors must run this interpreter (its packages), not whatever python3 is on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # PySpark turns timestamps into naive local datetimes: make local time UTC.
    os.environ["TZ"] = "UTC"
    time.tzset()
    sink = config.sink
    catalog = f"spark.sql.catalog.{sink.catalog_name}"
    builder = (
        SparkSession.builder.master(sink.spark_master)
        .appName(f"tidemark-sink-{config.processor.pipeline}")
        .config("spark.jars", str(iceberg_jar()))
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config(catalog, "org.apache.iceberg.spark.SparkCatalog")
        .config(f"{catalog}.type", sink.catalog_type)
        .config(f"{catalog}.warehouse", str(Path(sink.warehouse).resolve()))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    for key, value in sink.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
