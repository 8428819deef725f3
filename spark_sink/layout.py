"""Table layout: partition spec, sort order, table properties and format version.

The rules are pure: a layout is parsed from the configuration (``sink.layout`` and
``sink.tables``), checked against a table's columns, and compared with the table's own
to plan the change. The sink records the layout it applied in the table property
``tidemark.layout`` and changes only the parts whose configuration changed since: a
table made by an earlier release, or changed by hand, keeps what no configuration
asked to change. :meth:`spark_sink.writer.Table.lay_out` applies a plan in one commit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import orjson

from spark_sink.errors import SchemaError
from tidemark.core.config import SinkConfig, TableLayout
from tidemark.core.errors import ConfigError

#: The table property that records the layout the sink last applied.
LAYOUT_PROPERTY = "tidemark.layout"
FORMAT_VERSIONS = (2, 3)
#: Properties a layout may not set: the format version has a field of its own,
#: ``tidemark.*`` are the sink's records, and Spark keeps the others for itself.
_RESERVED = re.compile(r"format-version|tidemark\..*|location|owner|comment|provider|external")
#: The sink's own properties, set at creation from ``sink.write_mode``: one a layout
#: stops naming goes back to that, not to Iceberg's default.
WRITE_MODES = ("write.merge.mode", "write.update.mode", "write.delete.mode")
#: Properties Iceberg reads at every write, whose values are checked before the sink
#: starts: a wrong one would fail every MERGE of the table.
_VALUES = {
    **dict.fromkeys(WRITE_MODES, ("copy-on-write", "merge-on-read")),
    "write.distribution-mode": ("none", "hash", "range"),
}
_COLUMN = r"[A-Za-z_][A-Za-z0-9_]*"
_TRANSFORM = re.compile(
    rf"(?P<name>[a-z_]+)\(\s*(?:(?P<width>\d+)\s*,\s*)?(?P<column>{_COLUMN})\s*\)"
)
_SORT = re.compile(
    rf"(?P<column>{_COLUMN})(?:\s+(?P<direction>asc|desc))?"
    r"(?:\s+nulls\s+(?P<nulls>first|last))?",
    re.IGNORECASE,
)
#: Iceberg's time transforms by the names Spark and Iceberg accept.
_TIME = {
    "year": "year",
    "years": "year",
    "month": "month",
    "months": "month",
    "day": "day",
    "days": "day",
    "date": "day",
    "hour": "hour",
    "hours": "hour",
    "date_hour": "hour",
}
#: The Spark types each transform takes (``decimal(p,s)`` as ``decimal``).
_TAKES = {
    "bucket": {"int", "bigint", "smallint", "tinyint", "decimal", "date", "timestamp",
               "timestamp_ntz", "string", "binary"},
    "truncate": {"int", "bigint", "smallint", "tinyint", "decimal", "string", "binary"},
    "year": {"date", "timestamp", "timestamp_ntz"},
    "month": {"date", "timestamp", "timestamp_ntz"},
    "day": {"date", "timestamp", "timestamp_ntz"},
    "hour": {"timestamp", "timestamp_ntz"},
}  # fmt: skip


@dataclass(frozen=True)
class PartitionField:
    """One partition field: ``transform`` of ``column`` (``width``: of bucket, truncate)."""

    transform: str  #: identity, bucket, truncate, year, month, day or hour
    column: str
    width: int = 0

    def text(self) -> str:
        """As the configuration writes it: ``id``, ``bucket(16, id)``, ``day(ts)``."""
        if self.transform == "identity":
            return self.column
        if self.width:
            return f"{self.transform}({self.width}, {self.column})"
        return f"{self.transform}({self.column})"

    def sql(self) -> str:
        """As ``PARTITIONED BY`` takes it (the column quoted)."""
        column = f"`{self.column}`"
        if self.transform == "identity":
            return column
        if self.width:
            return f"{self.transform}({self.width}, {column})"
        return f"{self.transform}s({column})"  # Spark's names: years, months, days, hours


@dataclass(frozen=True)
class SortField:
    """One sort field: ``column`` ascending or not, nulls first or last."""

    column: str
    descending: bool = False
    nulls_first: bool = True

    def text(self) -> str:
        """As the configuration writes it, in full: ``id asc nulls first``."""
        direction = "desc" if self.descending else "asc"
        return f"{self.column} {direction} nulls {'first' if self.nulls_first else 'last'}"


@dataclass(frozen=True)
class Layout:
    """A table's layout, resolved (every part given)."""

    partition_by: tuple[PartitionField, ...] = ()
    sort_by: tuple[SortField, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    format_version: int = 2

    def record(self) -> str:
        """The value of :data:`LAYOUT_PROPERTY`."""
        return orjson.dumps(
            {
                "partition_by": [p.text() for p in self.partition_by],
                "sort_by": [s.text() for s in self.sort_by],
                "properties": dict(sorted(self.properties.items())),
                "format_version": self.format_version,
            }
        ).decode()


#: What every release before layouts made, and what a table without a record has.
BUILT_IN = Layout()


def parse_partition(text: str) -> PartitionField:
    """A partition field from its configuration text; :class:`ConfigError` if malformed."""
    text = text.strip()
    if re.fullmatch(_COLUMN, text):
        return PartitionField("identity", text)
    found = _TRANSFORM.fullmatch(text)
    if found is None:
        raise ConfigError(
            f"{text!r} is not a partition field: a column, bucket(N, col), truncate(W, col), "
            "year(col), month(col), day(col) or hour(col)"
        )
    name, width, column = found["name"], found["width"], found["column"]
    if name in ("bucket", "truncate"):
        if width is None or int(width) < 1:
            raise ConfigError(f"{text!r}: {name} takes a width of at least 1 first")
        return PartitionField(name, column, int(width))
    if name not in _TIME or width is not None:
        raise ConfigError(f"{text!r}: {name!r} is not a transform Iceberg has")
    return PartitionField(_TIME[name], column)


def parse_sort(text: str) -> SortField:
    """A sort field from its configuration text; :class:`ConfigError` if malformed. Nulls
    come first when ascending and last when descending unless said (Iceberg's defaults)."""
    found = _SORT.fullmatch(text.strip())
    if found is None:
        raise ConfigError(
            f"{text!r} is not a sort field: a column, then asc or desc, then nulls first or "
            "nulls last"
        )
    descending = (found["direction"] or "asc").lower() == "desc"
    nulls = found["nulls"]
    first = not descending if nulls is None else nulls.lower() == "first"
    return SortField(found["column"], descending, first)


_Part = TypeVar("_Part")


def _chosen(own: _Part | None, shared: _Part | None, mine: str) -> tuple[_Part | None, str]:
    """A part of a table's layout, and where it comes from: the table's own entry
    (``mine``) unless it leaves the part out, else ``sink.layout``."""
    return (own, mine) if own is not None else (shared, "sink.layout")


def resolve(sink: SinkConfig, table: str) -> Layout:
    """The layout ``sink`` configures for ``table`` (``<schema>.<table>``); a
    :class:`ConfigError` naming the part that is wrong."""
    own = sink.tables.get(table, TableLayout())
    mine = f"sink.tables.{table}"
    partitions, at = _chosen(own.partition_by, sink.layout.partition_by, mine)
    try:
        partition_by = tuple(parse_partition(p) for p in partitions or [])
    except ConfigError as exc:
        raise ConfigError(f"{at}.partition_by: {exc}") from None
    kinds = [
        (p.column, "time" if p.transform in _TIME.values() else p.transform) for p in partition_by
    ]
    if len(set(kinds)) < len(kinds):
        raise ConfigError(
            f"{at}.partition_by: a column takes each transform once, and one time transform "
            "at most (Iceberg refuses the others as redundant)"
        )
    sorts, at = _chosen(own.sort_by, sink.layout.sort_by, mine)
    try:
        sort_by = tuple(parse_sort(s) for s in sorts or [])
    except ConfigError as exc:
        raise ConfigError(f"{at}.sort_by: {exc}") from None
    if len({s.column for s in sort_by}) < len(sort_by):
        raise ConfigError(f"{at}.sort_by: a column is named twice")
    version, at = _chosen(own.format_version, sink.layout.format_version, mine)
    if version is None:
        version = BUILT_IN.format_version
    if version not in FORMAT_VERSIONS:
        raise ConfigError(f"{at}.format_version: 2 or 3, not {version}")

    def where_of(key: str) -> str:
        return mine if key in own.properties else "sink.layout"

    for at, given in (("sink.layout", sink.layout.properties), (mine, own.properties)):
        for key in given:
            if _RESERVED.fullmatch(key):
                raise ConfigError(
                    f"{at}.properties: {key!r} is Tidemark's to set"
                    + (" (use format_version)" if key == "format-version" else "")
                )
    properties = {**sink.layout.properties, **own.properties}
    for key, allowed in _VALUES.items():
        if key in properties and properties[key] not in allowed:
            raise ConfigError(
                f"{where_of(key)}.properties: {key} is one of {', '.join(allowed)}, "
                f"not {properties[key]!r}"
            )
    return Layout(partition_by, sort_by, properties, version)


def check_all(sink: SinkConfig) -> None:
    """Every configured layout resolves (run before the sink starts)."""
    resolve(sink, "")
    for table in sink.tables:
        if not re.fullmatch(rf"{_COLUMN}\.{_COLUMN}", table):
            raise ConfigError(
                f"sink.tables: {table!r} is not a table name: '<schema>.<table>', as the "
                "reconciled topic's last two parts spell it"
            )
        resolve(sink, table)


def check_columns(layout: Layout, columns: dict[str, str], table: str) -> None:
    """A :class:`SchemaError` if a field names a column ``table`` lacks, or a transform a
    type it cannot take (``columns``: name to Spark type)."""
    for part in layout.partition_by:
        kind = columns.get(part.column)
        if kind is None:
            raise SchemaError(f"{table}: partition field {part.text()!r}: no such column")
        base = kind.split("(")[0]
        if part.transform != "identity" and base not in _TAKES[part.transform]:
            raise SchemaError(
                f"{table}: partition field {part.text()!r}: {part.transform} does not take "
                f"a {kind} column"
            )
    for sort in layout.sort_by:
        if sort.column not in columns:
            raise SchemaError(f"{table}: sort field {sort.text()!r}: no such column")


def recorded(properties: dict[str, str], table: str) -> Layout:
    """The layout a table's properties record as last applied (:data:`BUILT_IN` if none);
    a :class:`SchemaError` if the record cannot be read (changed by hand)."""
    text = properties.get(LAYOUT_PROPERTY)
    if text is None:
        return BUILT_IN
    try:
        data = orjson.loads(text)
        return Layout(
            tuple(parse_partition(p) for p in data["partition_by"]),
            tuple(parse_sort(s) for s in data["sort_by"]),
            {str(k): str(v) for k, v in data["properties"].items()},
            int(data["format_version"]),
        )
    except (orjson.JSONDecodeError, ConfigError, KeyError, TypeError, ValueError, AttributeError):
        raise SchemaError(
            f"{table}: the table property {LAYOUT_PROPERTY} is not a layout this sink wrote: "
            f"{text[:200]!r} (remove it to lay the table out as configured)"
        ) from None


@dataclass(frozen=True)
class Change:
    """What to do to a table's layout, in one commit; empty when nothing changes."""

    add_partitions: tuple[PartitionField, ...] = ()
    drop_partitions: tuple[PartitionField, ...] = ()
    sort_by: tuple[SortField, ...] | None = None  #: the new sort order, if it changes
    set_properties: dict[str, str] = field(default_factory=dict)
    remove_properties: tuple[str, ...] = ()
    format_version: int | None = None  #: an upgrade

    def __bool__(self) -> bool:
        return bool(
            self.add_partitions
            or self.drop_partitions
            or self.sort_by is not None
            or self.set_properties
            or self.remove_properties
            or self.format_version is not None
        )

    def describe(self) -> str:
        """The change in words, for the log."""
        parts = []
        if self.add_partitions:
            parts.append("partition by " + ", ".join(p.text() for p in self.add_partitions))
        if self.drop_partitions:
            dropped = ", ".join(p.text() for p in self.drop_partitions)
            parts.append(f"stop partitioning by {dropped}")
        if self.sort_by is not None:
            parts.append("sort by " + (", ".join(s.text() for s in self.sort_by) or "nothing"))
        if self.set_properties:
            parts.append("set " + ", ".join(sorted(self.set_properties)))
        if self.remove_properties:
            parts.append("remove " + ", ".join(self.remove_properties))
        if self.format_version is not None:
            parts.append(f"upgrade to format {self.format_version}")
        return "; ".join(parts) or "nothing"


def layout_change(
    actual: Layout,
    last: Layout,
    wanted: Layout,
    table: str,
    defaults: Mapping[str, str] | None = None,
) -> Change:
    """The change that brings each part of ``actual`` (the table's layout now) whose
    configuration moved from ``last`` (the one recorded) to ``wanted``; a
    :class:`SchemaError` for a change Iceberg cannot make (a format downgrade). A
    property the configuration stops naming is removed, or set back to its value in
    ``defaults`` if it has one there."""
    defaults = defaults or {}
    add: tuple[PartitionField, ...] = ()
    drop: tuple[PartitionField, ...] = ()
    if wanted.partition_by != last.partition_by:
        add = tuple(p for p in wanted.partition_by if p not in actual.partition_by)
        drop = tuple(p for p in actual.partition_by if p not in wanted.partition_by)
    sort_by = None
    if wanted.sort_by != last.sort_by and wanted.sort_by != actual.sort_by:
        sort_by = wanted.sort_by
    dropped = [key for key in last.properties if key not in wanted.properties]
    set_properties = {
        key: value
        for key, value in {
            **{k: defaults[k] for k in dropped if k in defaults},
            **wanted.properties,
        }.items()
        if last.properties.get(key) != value and actual.properties.get(key) != value
    }
    remove = tuple(
        sorted(key for key in dropped if key not in defaults and key in actual.properties)
    )
    version = None
    if wanted.format_version not in (actual.format_version, last.format_version):
        if wanted.format_version < actual.format_version:
            raise SchemaError(
                f"{table}: format version {actual.format_version} cannot go back to "
                f"{wanted.format_version} (Iceberg upgrades tables, never downgrades them)"
            )
        version = wanted.format_version
    return Change(add, drop, sort_by, set_properties, remove, version)
