"""Iceberg tables: creation, the committed offsets, and the MERGE that carries them.

The offsets a batch consumed are written as the snapshot summary property
``tidemark.offsets`` of the very commit that holds the batch's rows, through
Iceberg's ``CommitMetadata.withCommitProperties``: data and offsets are one
atomic commit, so a restart resumes exactly after the last merged batch.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from spark_sink.schema import Column, SchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OFFSETS_PROPERTY = "tidemark.offsets"
DELETED = "__tidemark_deleted"
OFFSET = "__tidemark_offset"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quote(name: str) -> str:
    """A Spark SQL identifier in backticks; names that need escaping are refused."""
    if not _NAME.fullmatch(name):
        raise SchemaError(f"{name!r} is not a supported column or table name")
    return f"`{name}`"


class Table:
    """One Iceberg table fed by one reconciled topic."""

    def __init__(self, spark: SparkSession, catalog: str, namespace: str, name: str) -> None:
        self.spark = spark
        self.namespace = f"{quote(catalog)}.{quote(namespace)}"
        self.name = f"{self.namespace}.{quote(name)}"

    def exists(self) -> bool:
        """Whether the table was created."""
        return bool(self.spark.catalog.tableExists(self.name.replace("`", "")))

    def create(self, columns: list[Column]) -> None:
        """Create the table (and its namespace) when missing."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.namespace}")
        body = ", ".join(f"{quote(c.name)} {c.sql_type}" for c in columns)
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.name} ({body}) USING iceberg "
            "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='copy-on-write')"
        )

    def committed_offsets(self) -> dict[int, int]:
        """Next offset per partition, from the newest snapshot that carries them."""
        if not self.exists():
            return {}
        rows = self.spark.sql(
            f"SELECT summary['{OFFSETS_PROPERTY}'] AS offsets FROM {self.name}.snapshots "
            f"WHERE summary['{OFFSETS_PROPERTY}'] IS NOT NULL "
            "ORDER BY committed_at DESC LIMIT 1"
        ).collect()
        if not rows:
            return {}
        return {int(p): int(o) for p, o in orjson.loads(rows[0]["offsets"]).items()}

    def merge(
        self, batch: DataFrame, keys: list[str], columns: list[str], offsets: dict[int, int]
    ) -> None:
        """MERGE the newest event per key of ``batch``; commit ``offsets`` with it."""
        view = f"tidemark_batch_{abs(hash(self.name))}"
        order = ", ".join(quote(k) for k in keys)
        batch.createOrReplaceTempView(view)
        latest = (
            f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {order} "
            f"ORDER BY {OFFSET} DESC) AS __rank FROM {view}) WHERE __rank = 1"
        )
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
        sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns)
        names = ", ".join(quote(c) for c in columns)
        values = ", ".join(f"s.{quote(c)}" for c in columns)
        statement = (
            f"MERGE INTO {self.name} t USING ({latest}) s ON {on} "
            f"WHEN MATCHED AND s.{DELETED} THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND NOT s.{DELETED} THEN INSERT ({names}) VALUES ({values})"
        )
        properties = {
            OFFSETS_PROPERTY: orjson.dumps({str(p): o for p, o in sorted(offsets.items())}).decode()
        }
        with_commit_properties(self.spark, properties, lambda: self.spark.sql(statement))
        self.spark.catalog.dropTempView(view)


class _Callable:
    """A Python function as ``java.util.concurrent.Callable`` (through py4j's callback server)."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.function()
        except BaseException as exc:
            self.error = exc
            raise

    class Java:
        implements = ["java.util.concurrent.Callable"]


def with_commit_properties(spark: SparkSession, properties: dict[str, str], function: Any) -> None:
    """Run ``function`` so that the Iceberg commits it makes carry ``properties``."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    if gateway.get_callback_server() is None:
        gateway.start_callback_server()
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(key, value)
    callable_ = _Callable(function)
    exception_class = jvm.java.lang.Class.forName("java.lang.RuntimeException")
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            props, callable_, exception_class
        )
    except Exception:
        if callable_.error is not None:
            raise callable_.error from None
        raise
