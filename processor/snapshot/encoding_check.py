"""Whether a table's change events were encoded under the settings Tidemark backfills with.

Chunk rows are encoded under ``source.debezium`` (:mod:`tidemark.core.debezium_settings`).
If the connector runs with other settings, its events and the backfilled rows of one
column would differ in type, silently. So before a table's first row, every column
whose Connect schema a setting decides is compared with one of the table's events:

- JSON with schemas and Avro declare each field's schema: its type and logical name
  must be the ones the setting gives;
- schemaless JSON has only values: a value must have the setting's shape (a JSON
  number, an object, or text of the setting's form: decimal digits, base64, hex,
  ``P…`` for an interval). A value that fits either way, or a NULL, proves nothing,
  so a check of schemaless events can miss a mismatch; the schema checks cannot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from processor.events.change import FLAT_PREFIX
from processor.snapshot.connect_values import Column
from tidemark.core.debezium_settings import ValueSettings

#: Avro's types as Connect's (Confluent's ``AvroData``).
_AVRO_TYPES = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "boolean": "boolean",
    "record": "struct",
    "array": "array",
    "map": "map",
}
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_TEXT_FORMS = {
    "base64": _BASE64,
    "bytes": _BASE64,  # the JSON converter's form of bytes
    "base64-url-safe": re.compile(r"^[A-Za-z0-9_-]*={0,2}$"),
    "hex": re.compile(r"^(?:[0-9a-f]{2})*$"),
    "string": re.compile(r"^-?\d+(?:\.\d+)?$|^(?:NAN|POSITIVE_INFINITY|NEGATIVE_INFINITY)$"),
    "precise": _BASE64,
    "interval": re.compile(r"^P-?\d+Y-?\d+M-?\d+DT-?\d+H-?\d+M-?[\d.]+S$"),
}


@dataclass(frozen=True)
class Disagreement:
    """A column whose events were encoded under another value of ``setting``."""

    column: str
    setting: str
    configured: str
    seen: str
    expected: str

    def __str__(self) -> str:
        return (
            f"column {self.column}: its change events carry {self.seen}, but "
            f"{self.setting}={self.configured} writes {self.expected}; set "
            f"source.debezium.{self.setting} to the connector's value"
        )


def declared_disagreements(
    fields: dict[str, tuple[str, str | None]], columns: list[Column], settings: ValueSettings
) -> list[Disagreement]:
    """Columns whose declared field schema (``(type, logical name)``) is not theirs."""
    out = []
    for col in columns:
        declared = fields.get(col.name)
        if col.schema is None or col.setting is None or declared is None:
            continue
        if declared != col.schema:
            out.append(_disagreement(col, settings, _schema_text(declared)))
    return out


def value_disagreements(
    row: dict[str, Any], columns: list[Column], settings: ValueSettings
) -> list[Disagreement]:
    """Columns whose value in a schemaless event's ``row`` has another setting's shape."""
    out = []
    for col in columns:
        value = row.get(col.name)
        if col.schema is None or col.setting is None or value is None:
            continue
        if not _fits(value, col, settings):
            out.append(_disagreement(col, settings, f"{type(value).__name__} {value!r:.40}"))
    return out


def avro_row_fields(schema: Any, flat: bool = False) -> list[dict[str, Any]]:
    """The row fields (``after``'s) of a parsed Debezium value schema, in order; of a
    ``flat`` row's schema, its fields but those the flattening adds (``__``)."""
    if flat:
        return [f for f in schema.get("fields", []) if not f["name"].startswith(FLAT_PREFIX)]
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    row = next((f["type"] for f in schema.get("fields", []) if f["name"] == "after"), None)
    record = _resolve(_non_null(row), named)
    return list(record.get("fields", [])) if isinstance(record, dict) else []


def avro_fields(schema: Any, flat: bool = False) -> dict[str, tuple[str, str | None]]:
    """The Connect schemas of a parsed Debezium value schema's row fields (``after``), or
    of a ``flat`` row's."""
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    out: dict[str, tuple[str, str | None]] = {}
    for field in avro_row_fields(schema, flat):
        kind = _resolve(_non_null(field["type"]), named)
        if isinstance(kind, str):
            out[field["name"]] = (_AVRO_TYPES.get(kind, kind), None)
        elif isinstance(kind, dict):
            base = str(kind.get("type", ""))
            out[field["name"]] = (_AVRO_TYPES.get(base, base), kind.get("connect.name"))
    return out


def json_fields(schema: dict[str, Any], flat: bool = False) -> dict[str, tuple[str, str | None]]:
    """The Connect schemas of a JSON converter's value schema's row fields (``after``), or
    of a ``flat`` row's (but those the flattening adds, ``__``)."""
    return {f["field"]: (f.get("type", ""), f.get("name")) for f in json_row_fields(schema, flat)}


def json_row_fields(schema: dict[str, Any], flat: bool = False) -> list[dict[str, Any]]:
    """The row fields (``after``'s) of a JSON converter's value schema, in order; of a
    ``flat`` row's schema, its fields but those the flattening adds (``__``)."""
    fields: list[dict[str, Any]] = schema.get("fields", [])
    if flat:
        return [f for f in fields if not f["field"].startswith(FLAT_PREFIX)]
    return next((f for f in fields if f.get("field") == "after"), {}).get("fields", [])


def _fits(value: Any, col: Column, settings: ValueSettings) -> bool:
    assert col.schema is not None
    kind, name = col.schema
    if kind in ("int32", "int64"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "double":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind in ("struct", "map"):
        return isinstance(value, dict)
    if not isinstance(value, str):
        return False
    if col.setting == "binary.handling.mode":
        return _has_form(value, settings.binary_handling_mode)
    if col.setting == "decimal.handling.mode":
        return _has_form(value, settings.decimal_handling_mode)
    if name == "io.debezium.time.Interval":
        return bool(_TEXT_FORMS["interval"].match(value))
    return True


def _has_form(value: str, form: str) -> bool:
    """Whether ``value`` is text of ``form``; base64 comes in groups of four characters."""
    if _TEXT_FORMS[form] is _BASE64 or form == "base64-url-safe":
        if len(value) % 4:
            return False
    return bool(_TEXT_FORMS[form].match(value))


def _disagreement(col: Column, settings: ValueSettings, seen: str) -> Disagreement:
    assert col.schema is not None and col.setting is not None
    configured = settings.properties()[col.setting]
    return Disagreement(
        f"{col.name} ({col.type_name})", col.setting, configured, seen, _schema_text(col.schema)
    )


def _schema_text(schema: tuple[str, str | None]) -> str:
    kind, name = schema
    return f"{kind} ({name})" if name else kind


#: Connect's logical name of a fixed-scale decimal.
DECIMAL = "org.apache.kafka.connect.data.Decimal"
#: A decimal's precision and scale as Connect's parameters give them (text), if given.
Scale = tuple[str | None, str | None]


def json_decimal_scales(schema: dict[str, Any], flat: bool = False) -> dict[str, Scale]:
    """The precision and scale a JSON converter's value schema declares for each ``Decimal``
    row field (``after``'s, or a ``flat`` row's)."""
    return {
        f["field"]: _scale_of(f.get("parameters") or {})
        for f in json_row_fields(schema, flat)
        if f.get("name") == DECIMAL
    }


def avro_decimal_scales(schema: Any, flat: bool = False) -> dict[str, Scale]:
    """The precision and scale a parsed Debezium value schema declares for each ``Decimal``
    row field (Confluent's ``connect.parameters``, else Avro's own attributes)."""
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    out: dict[str, Scale] = {}
    for field in avro_row_fields(schema, flat):
        kind = _resolve(_non_null(field["type"]), named)
        if isinstance(kind, dict) and kind.get("connect.name") == DECIMAL:
            parameters = kind.get("connect.parameters") or {
                "connect.decimal.precision": kind.get("precision"),
                "scale": kind.get("scale"),
            }
            out[field["name"]] = _scale_of(parameters)
    return out


def _scale_of(parameters: dict[str, Any]) -> Scale:
    precision, scale = parameters.get("connect.decimal.precision"), parameters.get("scale")
    return (
        None if precision is None else str(precision),
        None if scale is None else str(scale),
    )


def _non_null(kind: Any) -> Any:
    if isinstance(kind, list):
        return next((k for k in kind if k != "null"), None)
    return kind


def _resolve(kind: Any, named: dict[str, Any]) -> Any:
    return named.get(kind, kind) if isinstance(kind, str) else kind
