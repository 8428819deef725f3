"""The Connect schemas Debezium's PostgreSQL connector declares for a table, from its catalog.

A table with no change event yet (Debezium started with ``snapshot.mode=no_data``,
and nothing changed since) shows no schema to copy, so its backfill builds the
key's and the row's field schemas the way the connector's ``TableSchemaBuilder`` and
``PostgresValueConverter.schemaBuilder`` do, under the deployment's value settings,
in the JSON converter's form: ``type``, then ``fields``/``items``/``keys`` and
``values``, ``optional``, ``name``, ``version``, ``doc``, ``parameters``, ``field``.

Only the types the chunk-event tests compare with Debezium's own schemas are built;
any other type, and a column with a ``DEFAULT`` other than a sequence's (Debezium
declares constant defaults in the schema, parsed its own way), refuse the table with
the advice to change one of its rows first.
"""

from __future__ import annotations

from typing import Any

from processor.errors import UnsupportedTypeError
from processor.snapshot.chunk_reader import TableInfo
from processor.snapshot.postgres.values import decimal_parameters, declared_schema
from tidemark.core.debezium_settings import ValueSettings

#: Types whose schema is one Connect type and no logical name, whatever the settings.
_PLAIN = {
    "int2": "int16",
    "int4": "int32",
    "int8": "int64",
    "float4": "float",
    "float8": "double",
    "bool": "boolean",
    "text": "string",
    "varchar": "string",
    "bpchar": "string",
    "inet": "string",
}
#: Types declared as a string with a logical name of Debezium's.
_NAMED_STRINGS = {
    "uuid": "io.debezium.data.Uuid",
    "json": "io.debezium.data.Json",
    "jsonb": "io.debezium.data.Json",
    "xml": "io.debezium.data.Xml",
    "timestamptz": "io.debezium.time.ZonedTimestamp",
    "timetz": "io.debezium.time.ZonedTime",
}
_VARIABLE_SCALE_FIELDS = [
    {"type": "int32", "optional": False, "field": "scale"},
    {"type": "bytes", "optional": False, "field": "value"},
]


def key_and_row_fields(
    info: TableInfo, settings: ValueSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The field schemas of the table's key struct (its primary key) and row struct."""
    if not info.primary:
        raise UnsupportedTypeError(
            f"{info.name} has no primary key: Debezium's events of it have no key to build"
        )
    row = []
    for at, name in enumerate(info.columns):
        default = info.defaults[at]
        if default is not None and not default.startswith("nextval("):
            raise UnsupportedTypeError(
                f"column {name} of {info.name} has a DEFAULT ({default}), which Debezium "
                "declares in its schema in its own way"
            )
        type_name, typmod, category, element = info.types[at]
        schema = field_schema(type_name, typmod, category, element, info.labels[at], settings)
        row.append(_ordered({**schema, "optional": not info.not_null[at], "field": name}))
    by_name = {f["field"]: f for f in row}
    return [_ordered(dict(by_name[name], optional=False)) for name in info.primary], row


def field_schema(
    type_name: str,
    typmod: int,
    category: str,
    element: str | None,
    labels: tuple[str, ...] | None,
    settings: ValueSettings,
) -> dict[str, Any]:
    """A column's Connect schema without its ``optional`` and ``field``."""
    if category == "A" and element is not None:
        items = field_schema(element, typmod, "", None, None, settings)
        return {"type": "array", "items": _ordered({**items, "optional": True})}
    if category == "E" and labels is not None:
        return _logical("string", "io.debezium.data.Enum", {"allowed": ",".join(labels)})
    if type_name in _PLAIN:
        return {"type": _PLAIN[type_name]}
    if type_name in _NAMED_STRINGS:
        return _logical("string", _NAMED_STRINGS[type_name])
    declared = declared_schema(type_name, typmod, settings)
    if declared is None:
        raise UnsupportedTypeError(
            f"type {type_name}: its Connect schema is not built from the catalog yet"
        )
    kind, name = declared
    if kind == "map":
        return {
            "type": "map",
            "keys": {"type": "string", "optional": False},
            "values": {"type": "string", "optional": True},
        }
    if name == "io.debezium.data.VariableScaleDecimal":
        schema = _logical("struct", name)
        schema["doc"] = "Variable scaled decimal"
        return {"type": "struct", "fields": _VARIABLE_SCALE_FIELDS, **schema}
    if name == "org.apache.kafka.connect.data.Decimal":
        precision, scale = decimal_parameters(type_name, typmod, settings)
        parameters = {"scale": scale}
        if precision is not None:
            parameters["connect.decimal.precision"] = precision
        return _logical(kind, name, parameters)
    return _logical(kind, name) if name else {"type": kind}


def _logical(kind: str, name: str, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind, "name": name, "version": 1}
    if parameters:
        schema["parameters"] = parameters
    return schema


def _ordered(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``'s keys in the order the JSON converter writes them."""
    order = ("type", "fields", "items", "keys", "values", "optional", "name", "version", "doc")
    out = {k: schema[k] for k in order if k in schema}
    out.update({k: v for k, v in schema.items() if k not in out and k != "field"})
    if "field" in schema:
        out["field"] = schema["field"]
    return out
