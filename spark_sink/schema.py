"""Event schemas to table columns: types, value conversion and the schema evolution rules.

Debezium's Connect types (written in JSON, or in Avro by Confluent's
``AvroConverter``, whose ``connect.name`` attributes keep the logical names) map
to Spark and Iceberg types:

| Connect type / logical name                       | Spark / Iceberg type          |
| ------------------------------------------------- | ----------------------------- |
| int8, int16, int32                                | int                           |
| int64                                             | bigint                        |
| float / double                                    | float / double                |
| boolean, string, bytes                            | boolean, string, binary       |
| org.apache.kafka.connect.data.Decimal             | decimal(precision, scale)     |
| io.debezium.data.VariableScaleDecimal             | string (the exact decimal)    |
| io.debezium.time.Date                             | date                          |
| io.debezium.time.Timestamp / MicroTimestamp / NanoTimestamp | timestamp_ntz (no zone) |
| io.debezium.time.ZonedTimestamp                   | timestamp (with time zone)    |
| io.debezium.time.Time / MicroTime / NanoTime      | string (HH:MM:SS.ffffff)      |
| io.debezium.data.Uuid, io.debezium.data.Json      | string                        |
| struct, array, map                                | string (JSON text)            |

Schemaless JSON carries no types: they are inferred from the values (integers
as bigint, numbers as double, objects and arrays as JSON text). That is lossy:
a decimal becomes a double or base64 text, a timestamp stays a number.

Schema evolution (:func:`evolve`): a column the table lacks is added (nullable);
a column the events lack is kept and written null; a type may widen as Iceberg
allows (int to bigint, float to double, a decimal's precision up at the same
scale). Any other change is incompatible and stops that table.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from spark_sink.errors import SchemaError

EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - naive on purpose: timestamp without zone
EPOCH_DATE = dt.date(1970, 1, 1)


class Spec(NamedTuple):
    """A column's name and Spark SQL type (what the driver plans with)."""

    name: str
    sql_type: str


@dataclass(frozen=True)
class Column:
    """One column of an event schema: its spec and how to convert a decoded value."""

    name: str
    sql_type: str
    convert: Callable[[Any], Any]

    @property
    def spec(self) -> Spec:
        """The column's name and type."""
        return Spec(self.name, self.sql_type)


# -- value conversion (JSON and Avro forms alike) ---------------------------------


def identity(value: Any) -> Any:
    """The converter of values that need none (the row builder copies them directly)."""
    return value


def _raw_bytes(value: Any) -> bytes:
    """Bytes as Avro gives them, or base64 text as JSON does."""
    return value if isinstance(value, bytes) else base64.b64decode(value)


def _scaled(unscaled: int, scale: int) -> decimal.Decimal:
    """Exact, whatever the digits (arithmetic would round to the context's 28)."""
    return decimal.Decimal(f"{unscaled}E-{scale}")


def _decimal(precision: int, scale: int) -> Callable[[Any], Any]:
    """Decimals of ``decimal(precision, scale)``; a ``ValueError`` for one with more
    digits (a source's precision above Spark's 38)."""
    limit = decimal.Decimal(10) ** (precision - scale)

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, decimal.Decimal):
            value = _scaled(int.from_bytes(_raw_bytes(value), "big", signed=True), scale)
        if not -limit < value < limit:
            raise ValueError(f"more than {precision - scale} digits before the point")
        return value

    return convert


def _variable_decimal(value: Any) -> Any:
    if value is None:
        return None
    unscaled = int.from_bytes(_raw_bytes(value["value"]), "big", signed=True)
    return str(_scaled(unscaled, int(value["scale"])))


def _epoch(divisor: int) -> Callable[[Any], Any]:
    if divisor == 1_000_000:

        def micros(value: Any) -> Any:
            return None if value is None else EPOCH + dt.timedelta(microseconds=value)

        return micros

    def convert(value: Any) -> Any:
        if value is None:
            return None
        return EPOCH + dt.timedelta(microseconds=int(value) * 1_000_000 // divisor)

    return convert


def _zoned(value: Any) -> Any:
    return None if value is None else dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _date(value: Any) -> Any:
    if value is None or isinstance(value, dt.date):
        return value
    return EPOCH_DATE + dt.timedelta(days=int(value))


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
    return None if value is None else _raw_bytes(value)


def _json_text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


_LOGICAL: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "io.debezium.time.Date": ("date", _date),
    "io.debezium.time.Timestamp": ("timestamp_ntz", _epoch(1_000)),
    "io.debezium.time.MicroTimestamp": ("timestamp_ntz", _epoch(1_000_000)),
    "io.debezium.time.NanoTimestamp": ("timestamp_ntz", _epoch(1_000_000_000)),
    "io.debezium.time.ZonedTimestamp": ("timestamp", _zoned),
    "io.debezium.time.Time": ("string", _time(1_000)),
    "io.debezium.time.MicroTime": ("string", _time(1_000_000)),
    "io.debezium.time.NanoTime": ("string", _time(1_000_000_000)),
    "io.debezium.data.Uuid": ("string", identity),
    "io.debezium.data.Json": ("string", identity),
    "io.debezium.data.VariableScaleDecimal": ("string", _variable_decimal),
}
_PLAIN: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "int8": ("int", identity),
    "int16": ("int", identity),
    "int32": ("int", identity),
    "int64": ("bigint", identity),
    "float": ("float", _float),
    "double": ("double", _float),
    "boolean": ("boolean", identity),
    "string": ("string", identity),
    "bytes": ("binary", _bytes),
    "struct": ("string", _json_text),
    "array": ("string", _json_text),
    "map": ("string", _json_text),
}


# -- schemas to columns --------------------------------------------------------------


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
        return Column(name, f"decimal({precision},{scale})", _decimal(precision, scale))
    if logical in _LOGICAL:
        sql_type, convert = _LOGICAL[logical]
        return Column(name, sql_type, convert)
    kind = field.get("type")
    if kind not in _PLAIN:
        raise SchemaError(f"column {name}: unsupported Connect type {kind!r}")
    sql_type, convert = _PLAIN[kind]
    return Column(name, sql_type, convert)


def columns_from_envelope(schema: dict[str, Any]) -> list[Column]:
    """Columns of the ``after`` row of a Debezium envelope's Connect schema (JSON)."""
    for field in schema.get("fields", []):
        if field.get("field") == "after":
            return [column_from_connect(f) for f in field.get("fields", [])]
    raise SchemaError("envelope schema has no 'after' field")


_AVRO_TO_CONNECT = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "record": "struct",
    "array": "array",
    "map": "map",
    "enum": "string",
}


def connect_field_from_avro(field: dict[str, Any]) -> dict[str, Any]:
    """An Avro field written by ``AvroConverter`` as the Connect field it came from."""
    kind = field["type"]
    if isinstance(kind, list):  # an optional field: ["null", T]
        kind = next(k for k in kind if k != "null")
    if isinstance(kind, str):
        return {"field": field["name"], "type": _AVRO_TO_CONNECT.get(kind, kind)}
    avro_type = kind.get("type")
    connect_type = kind.get("connect.type") or _AVRO_TO_CONNECT.get(avro_type, avro_type)
    return {
        "field": field["name"],
        "type": connect_type,
        "name": kind.get("connect.name"),
        "parameters": kind.get("connect.parameters") or {},
    }


def columns_from_avro(envelope: dict[str, Any]) -> list[Column]:
    """Columns of the row of a Debezium envelope's Avro schema.

    The row record is defined at its first use (``before``); ``after`` names it.
    """
    for field in envelope.get("fields", []):
        if field.get("name") in ("before", "after"):
            kind = field["type"]
            for candidate in kind if isinstance(kind, list) else [kind]:
                if isinstance(candidate, dict) and candidate.get("type") == "record":
                    return [
                        column_from_connect(connect_field_from_avro(f)) for f in candidate["fields"]
                    ]
    raise SchemaError("Avro envelope schema has no row record in 'before' or 'after'")


def _inferred(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    return "string"


def specs_from_values(row: dict[str, Any]) -> list[Spec]:
    """Column specs inferred from a schemaless row; null values say nothing of a type."""
    return [Spec(name, kind) for name, value in row.items() if (kind := _inferred(value))]


def _to_bigint(value: Any) -> Any:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"{value!r} is not an integer")


def _to_double(value: Any) -> Any:
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return None if value is None else float(value)
    raise ValueError(f"{value!r} is not a number")


def _to_boolean(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{value!r} is not a boolean")


def _to_string(value: Any) -> Any:
    if value is None or isinstance(value, str | dict | list):
        return _json_text(value)
    raise ValueError(f"{value!r} is not text")


#: Converters of schemaless values into an inferred column type (a mismatch raises).
INFERRED_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "bigint": _to_bigint,
    "double": _to_double,
    "boolean": _to_boolean,
    "string": _to_string,
}


# -- evolution -----------------------------------------------------------------------

_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


def widens(old: str, new: str) -> bool:
    """Whether Iceberg can change a column of type ``old`` to ``new`` (or they are equal)."""
    if old == new or (old, new) in {("int", "bigint"), ("float", "double")}:
        return True
    old_dec, new_dec = _DECIMAL.fullmatch(old), _DECIMAL.fullmatch(new)
    if old_dec and new_dec:
        return old_dec.group(2) == new_dec.group(2) and int(new_dec.group(1)) >= int(
            old_dec.group(1)
        )
    return False


def union(specs: Iterable[Spec], where: str) -> list[Spec]:
    """The columns of several schemas of one batch, each at its widest type, in first-seen order."""
    merged: dict[str, str] = {}
    for name, sql_type in specs:
        known = merged.get(name)
        if known is None or widens(known, sql_type):
            merged[name] = sql_type
        elif not widens(sql_type, known):
            raise SchemaError(f"{where}: column {name} is both {known} and {sql_type} in one batch")
    return [Spec(n, t) for n, t in merged.items()]


class Evolution(NamedTuple):
    """What a batch needs of its table: columns to add, types to widen, and the result."""

    add: list[Spec]
    widen: list[Spec]
    columns: list[Spec]


def evolve(table: list[Spec], batch: list[Spec], where: str) -> Evolution:
    """The table change a batch with columns ``batch`` needs (see the module docstring)."""
    current = dict(table)
    add: list[Spec] = []
    widen: list[Spec] = []
    for name, sql_type in batch:
        known = current.get(name)
        if known is None:
            add.append(Spec(name, sql_type))
            current[name] = sql_type
        elif widens(sql_type, known):  # the same type, or narrower: the table holds it
            continue
        elif widens(known, sql_type):
            widen.append(Spec(name, sql_type))
            current[name] = sql_type
        else:
            raise SchemaError(
                f"{where}: column {name} changed from {known} to {sql_type}, which Iceberg "
                "cannot widen; the table stops (recreate it, or map the column to a new name)"
            )
    return Evolution(add, widen, [Spec(n, t) for n, t in current.items()])
