"""Iceberg tables: creation, evolution, the committed offsets, and the MERGE that carries them.

The offsets a batch consumed are written as the snapshot summary property
``tidemark.offsets`` of the very commit that holds the batch's rows, through
Iceberg's ``CommitMetadata.withCommitProperties``: data and offsets are one
atomic commit, so a restart resumes exactly after the last merged batch. They
are read back from the newest snapshot in the current snapshot's lineage that
carries them (maintenance's commits do not: :mod:`spark_sink.maintenance`).
The same commit records, per partition, a time before which no unread record was
written (:mod:`spark_sink.gaps`).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from spark_sink.errors import SchemaError
from spark_sink.history import (
    APPEND,
    BATCH_COLUMNS,
    BATCH_POSITION,
    COLUMNS,
    INGESTED_AT,
    MERGE,
    MERGE_ONLY,
    MODE_PROPERTY,
    NAMES,
    OP,
    POSITION,
    Keeping,
)
from spark_sink.layout import (
    LAYOUT_PROPERTY,
    WRITE_MODES,
    Change,
    Layout,
    PartitionField,
    SortField,
)
from spark_sink.schema import Evolution, Spec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OFFSETS_PROPERTY = "tidemark.offsets"
UNREAD_SINCE_PROPERTY = "tidemark.unread-since"
#: Unix time (ms) before which every record of the table's topic is in this snapshot.
FRESH_UNTIL_PROPERTY = "tidemark.fresh-until-ms"
KEY_PROPERTY = "tidemark.key"
#: Columns of a batch that are not table columns (the time: the record's, in ms).
OFFSET, DELETED, TIME = "__tidemark_offset", "__tidemark_deleted", "__tidemark_time"
#: Soft-delete columns of a table (``sink.soft_delete``).
SOFT_DELETED, SOFT_DELETED_AT = "tidemark_deleted", "tidemark_deleted_at"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def quote(name: str) -> str:
    """A Spark SQL identifier in backticks; names that need escaping are refused."""
    if not _NAME.fullmatch(name):
        raise SchemaError(f"{name!r} is not a supported column or table name")
    return f"`{name}`"


def parse_offsets(text: str) -> dict[int, int]:
    """The offsets of a snapshot summary property."""
    return {int(p): int(o) for p, o in orjson.loads(text).items()}


def format_offsets(offsets: dict[int, int]) -> str:
    """Offsets as a snapshot summary property."""
    return orjson.dumps({str(p): o for p, o in sorted(offsets.items())}).decode()


def unread_since_of(snapshot: Any) -> dict[int, int]:
    """The times a commit recorded with its offsets (:mod:`spark_sink.gaps`); none for a
    commit of an earlier release."""
    value = None if snapshot is None else snapshot.summary().get(UNREAD_SINCE_PROPERTY)
    return {} if value is None else parse_offsets(value)


class Table:
    """One Iceberg table fed by one reconciled topic."""

    def __init__(
        self,
        spark: SparkSession,
        catalog: str,
        namespace: str,
        name: str,
        soft_delete: bool,
        keeping: Keeping = MERGE_ONLY,
    ) -> None:
        self.spark = spark
        self.path = f"{catalog}.{namespace}.{name}"
        self.namespace = f"{quote(catalog)}.{quote(namespace)}"
        self.name = f"{self.namespace}.{quote(name)}"
        #: What the table keeps; the sink sets it to the table's own once it exists
        #: (:meth:`kept`).
        self.keeping = keeping
        self._soft_delete = soft_delete

    @property
    def soft_delete(self) -> bool:
        """Whether deletes mark rows; not in an ``append`` table, which keeps the delete."""
        return self._soft_delete and not self.keeping.append

    def exists(self) -> bool:
        """Whether the table was created."""
        return bool(self.spark.catalog.tableExists(self.path))

    def create(self, columns: list[Spec], keys: list[str], write_mode: str, layout: Layout) -> None:
        """Create the table (and its namespace) when missing, with ``layout``'s partition
        spec and format version, and the record of those (:data:`LAYOUT_PROPERTY`). Its
        sort order and properties come from :meth:`lay_out`, after: properties through
        Iceberg's API, never in SQL text (Spark would substitute ``${...}`` in them)."""
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.namespace}")
        extra = [Spec(SOFT_DELETED, "boolean"), Spec(SOFT_DELETED_AT, "timestamp")]
        body = ", ".join(
            f"{quote(c.name)} {c.sql_type}"
            for c in columns
            + (extra if self.soft_delete else [])
            + (list(COLUMNS) if self.keeping.metadata else [])
        )
        made = Layout(layout.partition_by, (), {}, layout.format_version)
        properties = {  # names and values checked: no quote, no ``${``
            "format-version": str(layout.format_version),
            **dict.fromkeys(WRITE_MODES, write_mode),
            KEY_PROPERTY: orjson.dumps(keys).decode(),
            LAYOUT_PROPERTY: made.record(),
            MODE_PROPERTY: self.keeping.mode,
        }
        listed = ", ".join(f"'{k}'='{v}'" for k, v in properties.items())
        spec = ", ".join(p.sql() for p in layout.partition_by)
        with _refusals(self.path):
            self.spark.sql(
                f"CREATE TABLE IF NOT EXISTS {self.name} ({body}) USING iceberg"
                + (f" PARTITIONED BY ({spec})" if spec else "")
                + f" TBLPROPERTIES ({listed})"
            )

    def layout(self) -> tuple[Layout, dict[str, str]]:
        """The table's layout now, and all its properties."""
        table = self.iceberg()
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        schema = table.schema()
        partitions = []
        for part in table.spec().fields():
            transform = str(part.transform().toString())  # identity, bucket[16], day
            name, _, width = transform.rstrip("]").partition("[")
            if name == "void":  # a field dropped from a format 1 table
                continue
            column = str(schema.findColumnName(part.sourceId()))
            partitions.append(PartitionField(name, column, int(width or 0)))
        sorts = []
        for sort in table.sortOrder().fields():
            column = str(schema.findColumnName(sort.sourceId()))
            if str(sort.transform().toString()) != "identity":
                column += f" {sort.transform().toString()}"  # never equal to a configured one
            sorts.append(
                SortField(
                    column,
                    str(sort.direction().toString()) == "DESC",
                    "FIRST" in str(sort.nullOrder().toString()).upper(),
                )
            )
        properties = {str(k): str(v) for k, v in table.properties().items()}
        version = int(jvm.org.apache.iceberg.TableUtil.formatVersion(table))
        actual = Layout(tuple(partitions), tuple(sorts), properties, version)
        return actual, properties

    def _lay_out(self, change: Change, record: str) -> None:
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        transaction = self.iceberg().newTransaction()
        if change.add_partitions or change.drop_partitions:
            spec = transaction.updateSpec()
            for part in change.drop_partitions:
                spec = spec.removeField(_term(jvm, part))
            for part in change.add_partitions:
                spec = spec.addField(_term(jvm, part))
            spec.commit()
        if change.sort_by is not None:
            order = transaction.replaceSortOrder()
            for sort in change.sort_by:
                nulls = jvm.org.apache.iceberg.NullOrder
                null_order = nulls.NULLS_FIRST if sort.nulls_first else nulls.NULLS_LAST
                column = jvm.org.apache.iceberg.expressions.Expressions.ref(sort.column)
                order = (order.desc if sort.descending else order.asc)(column, null_order)
            order.commit()
        properties = transaction.updateProperties()
        for key, value in change.set_properties.items():
            properties.set(key, value)
        for key in change.remove_properties:
            properties.remove(key)
        if change.format_version is not None:
            properties.set("format-version", str(change.format_version))
        properties.set(LAYOUT_PROPERTY, record)
        properties.commit()
        transaction.commitTransaction()

    def lay_out(self, change: Change, record: str) -> None:
        """Apply ``change`` and record the layout (:data:`LAYOUT_PROPERTY`) in one commit;
        a :class:`SchemaError` with Iceberg's reason if it refuses the change."""
        with _refusals(self.path):
            self._lay_out(change, record)

    def columns(self) -> list[Spec]:
        """The table's columns (the soft-delete and metadata columns left out)."""
        fields = self.spark.table(self.path).schema.fields
        return [
            Spec(f.name, f.dataType.simpleString())
            for f in fields
            if f.name not in (SOFT_DELETED, SOFT_DELETED_AT) and f.name not in NAMES
        ]

    def kept(self) -> Keeping:
        """What the table keeps: the mode it was made with (``merge`` before modes were
        recorded), and whether it has the metadata columns."""
        mode = APPEND if self._property(MODE_PROPERTY) == APPEND else MERGE
        names = {f.name for f in self.spark.table(self.path).schema.fields}
        return Keeping(mode, POSITION in names)

    def add_metadata(self) -> None:
        """Add the metadata columns (a metadata-only commit)."""
        listed = ", ".join(f"{quote(c.name)} {c.sql_type}" for c in COLUMNS)
        self.spark.sql(f"ALTER TABLE {self.name} ADD COLUMNS ({listed})")

    def key_names(self) -> list[str]:
        """The primary-key columns recorded when the table was created (``[]`` if none)."""
        value = self._property(KEY_PROPERTY)
        return list(orjson.loads(value)) if value.startswith("[") else []

    def _property(self, key: str) -> str:
        """A table property's value; for one the table lacks, Spark's sentence saying so."""
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {self.name} ('{key}')").collect()
        return str(rows[0]["value"]) if rows else ""

    def evolve(self, evolution: Evolution) -> None:
        """Add and widen columns (metadata-only commits, before the batch's data commit)."""
        for name, sql_type in evolution.add:
            self.spark.sql(f"ALTER TABLE {self.name} ADD COLUMNS ({quote(name)} {sql_type})")
        for name, sql_type in evolution.widen:
            self.spark.sql(f"ALTER TABLE {self.name} ALTER COLUMN {quote(name)} TYPE {sql_type}")

    def iceberg(self) -> Any:
        """The table through Iceberg's Java API (py4j)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.path
        )

    def committed(self) -> tuple[dict[int, int], Any]:
        """``(next offset per partition, the snapshot that holds them)`` from the lineage."""
        if not self.exists():
            return {}, None
        table = self.iceberg()
        snapshot = table.currentSnapshot()
        while snapshot is not None:
            value = snapshot.summary().get(OFFSETS_PROPERTY)
            if value is not None:
                return parse_offsets(value), snapshot
            parent = snapshot.parentId()
            snapshot = None if parent is None else table.snapshot(parent)
        return {}, None

    def merge(
        self,
        batch: DataFrame,
        keys: list[str],
        columns: list[str],
        offsets: dict[int, int],
        unread_since: dict[int, int],
        whole: bool = False,
    ) -> int:
        """MERGE the newest event per key of ``batch``; commit ``offsets`` and
        ``unread_since`` with it. With ``whole`` the batch is the whole topic, and rows
        whose key it does not have are deleted (a rebuild). An ``append`` table takes
        each version (key and position) the batch has and the table has not instead
        (:meth:`_append`), and a rebuild deletes nothing from it.

        Returns the rows merged (events left after the newest per key was taken).
        """
        version = [*keys, BATCH_POSITION] if self.keeping.append else keys
        order = ", ".join(quote(k) for k in version)
        view = f"tidemark_batch_{abs(hash(self.name))}"
        batch.createOrReplaceTempView(view)
        latest = self.spark.sql(
            f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {order} "
            f"ORDER BY {OFFSET} DESC) AS __rank FROM {view}) WHERE __rank = 1"
        ).persist()  # MERGE reads its source twice (the files to rewrite, then the rows)
        try:
            merged = latest.count()
            # The MERGE's source is the cached rows under a filter that keeps them all:
            # Spark builds a bloom filter of a join side's keys only when that side is
            # a filter over a scan, and it prunes the table's rows by it
            # (session.create_session's settings).
            latest.where("__rank = 1").createOrReplaceTempView(view + "_latest")
            statement = self._statement(view + "_latest", keys, columns, whole)
            properties = {
                OFFSETS_PROPERTY: format_offsets(offsets),
                UNREAD_SINCE_PROPERTY: format_offsets(unread_since),
            }
            if offsets and set(offsets) <= set(unread_since):
                fresh = min(unread_since[p] for p in offsets)
                properties[FRESH_UNTIL_PROPERTY] = str(fresh)
            with_commit_properties(self.spark, properties, lambda: self.spark.sql(statement))
        finally:
            latest.unpersist()
            self.spark.catalog.dropTempView(view)
            self.spark.catalog.dropTempView(view + "_latest")
        return merged

    def _statement(self, source: str, keys: list[str], columns: list[str], whole: bool) -> str:
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
        sets = [f"t.{quote(c)} = s.{quote(c)}" for c in columns]
        names = [quote(c) for c in columns]
        values = [f"s.{quote(c)}" for c in columns]
        marks: list[str] = []  # the metadata columns' assignments of a soft delete
        if self.keeping.metadata:
            stamped = [(quote(column), made) for _b, _t, column, made in BATCH_COLUMNS]
            stamped.append((quote(INGESTED_AT), "current_timestamp()"))
            sets += [f"t.{column} = {made}" for column, made in stamped]
            names += [column for column, _made in stamped]
            values += [made for _column, made in stamped]
            # A tombstone whose delete an earlier batch or compaction took carries no
            # metadata: the row keeps what it had, but its operation.
            marks = [
                f"t.{column} = 'd'"
                if column == quote(OP)
                else f"t.{column} = coalesce({made}, t.{column})"
                for column, made in stamped
            ]
        if self.keeping.append:
            return self._append(source, keys, names, values)
        if not self.soft_delete:
            gone = " WHEN NOT MATCHED BY SOURCE THEN DELETE" if whole else ""
            return (
                f"MERGE INTO {self.name} t USING {source} s ON {on} "
                f"WHEN MATCHED AND s.{DELETED} THEN DELETE "
                f"WHEN MATCHED THEN UPDATE SET {', '.join(sets)} "
                f"WHEN NOT MATCHED AND NOT s.{DELETED} "
                f"THEN INSERT ({', '.join(names)}) VALUES ({', '.join(values)})" + gone
            )
        flag, at = quote(SOFT_DELETED), quote(SOFT_DELETED_AT)
        mark = ", ".join([f"t.{flag} = true", f"t.{at} = timestamp_millis(s.{TIME})", *marks])
        gone = (
            f" WHEN NOT MATCHED BY SOURCE AND NOT t.{flag} "
            f"THEN UPDATE SET t.{flag} = true, t.{at} = current_timestamp()"
            if whole
            else ""
        )
        return (
            f"MERGE INTO {self.name} t USING {source} s ON {on} "
            f"WHEN MATCHED AND s.{DELETED} AND NOT t.{flag} "
            f"THEN UPDATE SET {mark} "
            f"WHEN MATCHED AND NOT s.{DELETED} "
            f"THEN UPDATE SET {', '.join(sets)}, t.{flag} = false, t.{at} = NULL "
            f"WHEN NOT MATCHED AND NOT s.{DELETED} THEN INSERT ({', '.join(names + [flag, at])}) "
            f"VALUES ({', '.join(values)}, false, NULL)" + gone
        )

    def _append(self, source: str, keys: list[str], names: list[str], values: list[str]) -> str:
        """The batch's versions the table does not have yet, inserted. Not a MERGE with
        only ``WHEN NOT MATCHED``: Spark makes that an anti join of the batch with the
        whole table, which it shuffles. Here the versions the table already has are found
        by a semi join first, whose table side Spark filters by a bloom filter of the
        batch's keys before the shuffle (as a MERGE's: session.create_session)."""
        found = " AND ".join(
            [f"t.{quote(k)} = b.{quote(k)}" for k in keys]
            + [f"t.{quote(POSITION)} = b.{BATCH_POSITION}"]
        )
        taken = ", ".join([f"t.{quote(k)}" for k in keys] + [f"t.{quote(POSITION)}"])
        new = " AND ".join(
            [f"s.{quote(k)} = e.{quote(k)}" for k in keys]
            + [f"s.{BATCH_POSITION} = e.{quote(POSITION)}"]
        )
        return (
            f"INSERT INTO {self.name} ({', '.join(names)}) SELECT {', '.join(values)} "
            f"FROM {source} s LEFT ANTI JOIN (SELECT {taken} FROM {self.name} t "
            f"LEFT SEMI JOIN {source} b ON {found}) e ON {new}"
        )


#: The Java exceptions Spark and Iceberg raise, themselves (not as a cause), for a layout
#: they refuse (a redundant partition field, a property on a column the table lacks).
_REFUSED = frozenset(
    {
        "java.lang.IllegalArgumentException",
        "org.apache.iceberg.exceptions.ValidationException",
    }
)


@contextlib.contextmanager
def _refusals(table: str) -> Iterator[None]:
    """Turn Spark's or Iceberg's refusal of a layout into a :class:`SchemaError`; any
    other failure (a catalog that does not answer) goes on as it was."""
    try:
        yield
    except Exception as exc:
        reason = _refusal(exc)
        if reason is None:
            raise
        raise SchemaError(f"{table}: the layout cannot be applied: {reason}") from None


def _refusal(exc: BaseException) -> str | None:
    """The reason of a refusal: an analysis or argument error Spark converted, or one of
    :data:`_REFUSED` raised by the call itself; ``None`` for anything else."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException, IllegalArgumentException

    if isinstance(exc, AnalysisException | IllegalArgumentException):
        text = str(exc)
    elif isinstance(exc, Py4JJavaError) and (
        str(exc.java_exception.getClass().getName()) in _REFUSED
    ):
        text = str(exc.java_exception.getMessage() or "")
    else:
        return None
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__


def _term(jvm: Any, part: PartitionField) -> Any:
    """A partition field as Iceberg's Java API takes it."""
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    if part.transform == "identity":
        return expressions.ref(part.column)
    if part.transform in ("bucket", "truncate"):
        return getattr(expressions, part.transform)(part.column, part.width)
    return getattr(expressions, part.transform)(part.column)


def commit_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is Iceberg refusing a commit that conflicts with a concurrent one
    (the commit changed nothing: it can be tried again).

    The last marker is a MERGE whose scan was planned at one snapshot and whose runtime
    filter, loading the table again (a catalog without table caching), found another: a
    concurrent writer such as ``sink maintain`` committed in between, before the MERGE
    wrote anything."""
    text = str(exc)
    return any(
        name in text
        for name in (
            "org.apache.iceberg.exceptions.CommitFailedException",
            "org.apache.iceberg.exceptions.ValidationException",
            "Runtime file filtering is not possible: the table has been concurrently modified",
        )
    )


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


_CALLBACK_SERVER = threading.Lock()


def with_commit_properties(spark: SparkSession, properties: dict[str, str], function: Any) -> None:
    """Run ``function`` so that the Iceberg commits it makes carry ``properties``."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    with _CALLBACK_SERVER:  # tables commit from threads of their own
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
