"""Kafka Connect schemas (as Debezium writes them in JSON) to Spark types, and values.

| Connect type / logical name                       | Spark / Iceberg type          |
| ------------------------------------------------- | ----------------------------- |
| int8, int16, int32                                | int                           |
| int64                                             | bigint                        |
| float / double                                    | float / double                |
| boolean, string, bytes                            | boolean, string, binary       |
| org.apache.kafka.connect.data.Decimal             | decimal(precision, scale)     |
| io.debezium.time.Date                             | date                          |
| io.debezium.time.Timestamp / MicroTimestamp / NanoTimestamp | timestamp_ntz (no zone) |
| io.debezium.time.ZonedTimestamp                   | timestamp (with time zone)    |
| io.debezium.time.Time / MicroTime / NanoTime      | string (HH:MM:SS.ffffff)      |
| io.debezium.data.Uuid, io.debezium.data.Json      | string                        |

Schemaless JSON carries no types: they are inferred from the values (integers
as bigint, numbers as double, objects and arrays as JSON text). That is lossy:
a decimal becomes a double, a timestamp stays text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from tidemark.errors import TidemarkError

EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - naive on purpose: timestamp without zone
EPOCH_DATE = dt.date(1970, 1, 1)


class SchemaError(TidemarkError):
    """A reconciled topic's schema cannot be mapped to a table."""


@dataclass(frozen=True)
class Column:
    """One table column: its name, Spark SQL type and how to convert a JSON value."""

    name: str
    sql_type: str
    convert: Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _decimal(scale: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-scale)

    return convert


def _epoch(divisor: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        return EPOCH + dt.timedelta(microseconds=int(value) * 1_000_000 // divisor)

    return convert


def _zoned(value: Any) -> Any:
    return None if value is None else dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _date(value: Any) -> Any:
    return None if value is None else EPOCH_DATE + dt.timedelta(days=int(value))


def _time(divisor: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        micros = int(value) * 1_000_000 // divisor
        return (EPOCH + dt.timedelta(microseconds=micros)).time().isoformat()

    return convert


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def _bytes(value: Any) -> Any:
    return None if value is None else base64.b64decode(value)


def _json_text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


_LOGICAL: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "io.debezium.time.Date": ("date", _date),
    "io.debezium.time.Timestamp": ("timestamp_ntz", _epoch(1_000)),
    "io.debezium.time.MicroTimestamp": ("timestamp_ntz", _epoch(1_000_000)),
    "io.debezium.time.NanoTimestamp": ("timestamp_ntz", _epoch(1_000_000_000)),
    "io.debezium.time.ZonedTimestamp": ("timestamp", _zoned),
    "io.debezium.time.Time": ("string", _time(1_000)),
    "io.debezium.time.MicroTime": ("string", _time(1_000_000)),
    "io.debezium.time.NanoTime": ("string", _time(1_000_000_000)),
    "io.debezium.data.Uuid": ("string", _identity),
    "io.debezium.data.Json": ("string", _identity),
}
_PLAIN: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "int8": ("int", _identity),
    "int16": ("int", _identity),
    "int32": ("int", _identity),
    "int64": ("bigint", _identity),
    "float": ("float", _float),
    "double": ("double", _float),
    "boolean": ("boolean", _identity),
    "string": ("string", _identity),
    "bytes": ("binary", _bytes),
    "struct": ("string", _json_text),
    "array": ("string", _json_text),
    "map": ("string", _json_text),
}


def column_from_connect(field: dict[str, Any]) -> Column:
    """The column for one Connect field of the row schema."""
    name = field.get("field")
    if not isinstance(name, str):
        raise SchemaError(f"schema field without a name: {field!r}")
    logical = field.get("name")
    if logical == "org.apache.kafka.connect.data.Decimal":
        params = field.get("parameters") or {}
        scale = int(params.get("scale", 0))
        precision = min(int(params.get("connect.decimal.precision", 38)), 38)
        return Column(name, f"decimal({precision},{scale})", _decimal(scale))
    if logical in _LOGICAL:
        sql_type, convert = _LOGICAL[logical]
        return Column(name, sql_type, convert)
    kind = field.get("type")
    if kind not in _PLAIN:
        raise SchemaError(f"column {name}: unsupported Connect type {kind!r}")
    sql_type, convert = _PLAIN[kind]
    return Column(name, sql_type, convert)


def columns_from_envelope(schema: dict[str, Any]) -> list[Column]:
    """Columns of the ``after`` row of a Debezium envelope schema."""
    for field in schema.get("fields", []):
        if field.get("field") == "after":
            return [column_from_connect(f) for f in field.get("fields", [])]
    raise SchemaError("envelope schema has no 'after' field")


def columns_from_values(row: dict[str, Any]) -> list[Column]:
    """Columns inferred from a schemaless row (lossy, see the module docstring)."""
    columns = []
    for name, value in row.items():
        if isinstance(value, bool):
            columns.append(Column(name, "boolean", _identity))
        elif isinstance(value, int):
            columns.append(Column(name, "bigint", _identity))
        elif isinstance(value, float):
            columns.append(Column(name, "double", _float))
        elif isinstance(value, dict | list):
            columns.append(Column(name, "string", _json_text))
        else:
            columns.append(Column(name, "string", _identity))
    return columns
