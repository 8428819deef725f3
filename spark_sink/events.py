"""Reconciled events decoded for the sink, from JSON or Avro, into rows of a planned table.

The decoding is the processor's: JSON through its envelope splitter (a repeated
schema is parsed once), Avro in the Confluent wire format through its registry
cache and Avro reader. Runs in Spark executors. A JSON payload, bare or in the
envelope of the schema the splitter knows, is first read by the compiled scanner
(:func:`~tidemark.core.json_scan.scan_envelope`): taken, only its ``after`` is parsed;
declined, the splitter parses it all and decides, errors included.

A batch is planned on the driver from a sample of its events' schemas
(:mod:`spark_sink.reader`). An event whose schema has a column the plan lacks,
or a type the planned column cannot hold, raises :class:`SchemaDrift`; the
driver then plans from every schema in the batch and runs it again. An event
that cannot be decoded at all raises :class:`TableStop`: the sink's input is
the processor's output, so that is a bug or a foreign writer, and the table
stops with the message's coordinates rather than skip it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from spark_sink.errors import SchemaDrift, SchemaError, TableStop
from spark_sink.history import Metadata, event_metadata
from spark_sink.schema import (
    INFERRED_CONVERTERS,
    Column,
    Spec,
    column_from_connect,
    columns_from_avro,
    columns_from_envelope,
    connect_field_from_avro,
    identity,
    specs_from_values,
    widens,
)
from tidemark.core.avro_wire import HEADER, MAGIC, read_avro, schema_id_of
from tidemark.core.errors import InputError, UnknownSchemaError
from tidemark.core.json_envelope import SCHEMA_HEAD, EnvelopeSplitter
from tidemark.core.json_scan import scan_envelope
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache

#: A decoded event: ``(deleted, key or row, the row's columns or None when schemaless)``.
Decoded = tuple[bool, dict[str, Any], list[Column] | None]

_DELETE = ord("d")


class EventDecoder:
    """Decodes the reconciled events of one topic (any mix of JSON and Avro)."""

    def __init__(self, schemas: SchemaCache | None, scan: bool = True) -> None:
        """``scan=False``: every JSON payload is parsed by the splitter, none by the compiled
        scanner (the slow path, which the scanner is held to)."""
        self._schemas = schemas
        self._scan = scan
        self._values = EnvelopeSplitter()
        self._keys = EnvelopeSplitter()
        self._json_schema: dict[str, Any] | None = None
        self._json_columns: list[Column] = []
        self._json_key_schema: dict[str, Any] | None = None
        self._json_key_columns: list[Column] = []
        self._by_schema: dict[Any, list[Column]] = {}

    def decode(self, msg: RawMessage) -> Decoded:
        """The event in ``msg``: a row to upsert, or the key of a row to delete."""
        raw = msg.value
        if raw is None:
            return True, self.key(msg), None
        if self._scan and raw[:1] != MAGIC:
            values = self._values
            prefix = values.prefix
            schema: dict[str, Any] | None = None
            if prefix and raw.startswith(prefix) and raw.endswith(b"}"):  # as split() reads it
                scan = scan_envelope(raw, len(prefix), len(raw) - 1)
                schema = values.schema
            elif raw.startswith(SCHEMA_HEAD):
                scan = None  # a schema split() learns, or one it does not remember
            else:  # bare: taken with an ``after`` (without, it may be an envelope split() opens)
                scan = scan_envelope(raw, 0, len(raw))
                if scan is not None and scan[2] < 0:
                    scan = None
            if scan is not None:
                columns = None if schema is None else self._json(schema)
                op, row, row_at, row_end = scan
                if op == _DELETE or not row:
                    return True, self.key(msg), None
                return False, orjson.loads(raw[row_at:row_end]), columns
        payload, parsed = self._parsed(raw, msg)
        return self._event(payload, parsed, msg)

    def decode_with_metadata(self, msg: RawMessage) -> tuple[Decoded, Metadata | None]:
        """The event in ``msg`` and its metadata (:mod:`spark_sink.history`); ``None`` for
        a tombstone, which is no version of a row. Every payload is parsed whole here."""
        if msg.value is None:
            return (True, self.key(msg), None), None
        payload, columns = self._parsed(msg.value, msg)
        return self._event(payload, columns, msg), event_metadata(payload)

    def _parsed(self, raw: bytes, msg: RawMessage) -> tuple[Any, list[Column] | None]:
        """A value parsed whole (Avro, or JSON through the splitter), with its columns
        (``None``: schemaless)."""
        if raw[:1] == MAGIC:
            return self._avro(raw, msg)
        payload, schema, _text = self._values.split(raw, msg, "value")
        return payload, None if schema is None else self._json(schema)

    def _event(self, payload: Any, columns: list[Column] | None, msg: RawMessage) -> Decoded:
        if not isinstance(payload, dict):
            raise InputError("value is not a Debezium envelope", msg, "not-debezium")
        after = payload.get("after")
        if payload.get("op") == "d" or after is None:
            return True, self.key(msg), None
        if not isinstance(after, dict):
            raise InputError("'after' is not a row", msg, "not-debezium")
        return False, after, columns

    def key(self, msg: RawMessage) -> dict[str, Any]:
        """The key's primary-key columns, converted to their column types."""
        raw = msg.key
        if raw is None:
            raise InputError("reconciled event without a key", msg, "no-key")
        if raw[:1] == MAGIC:
            document, parsed = self._schema(schema_id_of(raw, msg, "key"), msg)
            key = read_avro(raw, HEADER.size, parsed, msg, "key")[0]
            converters = {
                c.name: c.convert
                for c in self._cached(("key", id(document)), lambda: _avro_key_columns(document))
            }
        else:
            key, schema, _text = self._keys.split(raw, msg, "key")
            converters = {}
            if isinstance(schema, dict):  # the splitter hands a repeated schema back as is
                if schema is not self._json_key_schema:
                    self._json_key_schema = schema
                    self._json_key_columns = self._cached(
                        orjson.dumps(schema),
                        lambda: [column_from_connect(f) for f in schema.get("fields", [])],
                    )
                converters = {c.name: c.convert for c in self._json_key_columns}
        if not isinstance(key, dict) or not key:
            raise InputError("key is not a struct of primary-key columns", msg, "key")
        return {name: converters.get(name, identity)(value) for name, value in key.items()}

    def _json(self, schema: dict[str, Any]) -> list[Column]:
        if schema is not self._json_schema:
            self._json_schema = schema
            self._json_columns = self._cached(
                orjson.dumps(schema), lambda: columns_from_envelope(schema)
            )
        return self._json_columns

    def _avro(self, raw: bytes, msg: RawMessage) -> tuple[Any, list[Column]]:
        schema_id = schema_id_of(raw, msg, "value")
        document, parsed = self._schema(schema_id, msg)
        payload = read_avro(raw, HEADER.size, parsed, msg, "value")[0]
        return payload, self._cached(("value", schema_id), lambda: columns_from_avro(document))

    def _schema(self, schema_id: int, msg: RawMessage) -> tuple[dict[str, Any], Any]:
        if self._schemas is None:
            raise InputError("Avro event but no schema registry is configured", msg, "schema")
        try:
            return self._schemas.get(schema_id)
        except UnknownSchemaError as exc:
            raise InputError(str(exc), msg, "schema") from None

    def _cached(self, key: Any, make: Callable[[], list[Column]]) -> list[Column]:
        found = self._by_schema.get(key)
        if found is None:
            try:
                found = self._by_schema[key] = make()
            except (SchemaError, KeyError, StopIteration, TypeError) as exc:
                raise SchemaError(f"event schema cannot be mapped to columns: {exc}") from None
        return found


def _avro_key_columns(document: dict[str, Any]) -> list[Column]:
    return [column_from_connect(connect_field_from_avro(f)) for f in document.get("fields", [])]


def specs_of(decoded: Decoded) -> list[Spec]:
    """The column specs an event brings (none for a delete)."""
    deleted, row, columns = decoded
    if deleted:
        return []
    if columns is not None:
        return [c.spec for c in columns]
    return specs_from_values(row)


#: Where a schema's columns go in a planned row: ``(direct, converted)``, the columns
#: whose decoded value is the row's value apart from those that need a conversion.
Layout = tuple[list[tuple[int, str]], list[tuple[int, str, Callable[[Any], Any]]]]


class RowBuilder:
    """Rows ``(offset, deleted, time in ms, *planned columns)`` of decoded events."""

    def __init__(self, planned: list[Spec], key_names: list[str]) -> None:
        self.planned = planned
        self.index = {name: i for i, (name, _) in enumerate(planned)}
        self.key_names = key_names
        self._layouts: dict[int, Layout] = {}

    def row(self, offset: int, timestamp_ms: int, decoded: Decoded) -> tuple[Any, ...]:
        """The row of one decoded event; :class:`SchemaDrift` when it does not fit the plan."""
        deleted, row, columns = decoded
        values: list[Any] = [None] * len(self.planned)
        if deleted:
            for name in self.key_names:
                if name not in row:
                    raise TableStop(f"delete at offset {offset}: key has no column {name}")
                values[self.index[name]] = row[name]
        elif columns is not None:
            direct, converted = self._layout(columns)
            get = row.get
            for at, name in direct:
                values[at] = get(name)
            name = ""
            try:
                for at, name, convert in converted:
                    values[at] = convert(get(name))
            except (ArithmeticError, TypeError, ValueError) as exc:
                raise TableStop(
                    f"offset {offset}: column {name} ({self.planned[self.index[name]].sql_type}) "
                    f"cannot hold {get(name)!r:.100}: {exc}"
                ) from None
        else:
            self._schemaless(row, values)
        return (offset, deleted, timestamp_ms, *values)

    def _layout(self, columns: list[Column]) -> Layout:
        layout = self._layouts.get(id(columns))  # the decoder keeps every columns list alive
        if layout is None:
            layout = ([], [])
            for column in columns:
                at = self.index.get(column.name)
                if at is None:
                    raise SchemaDrift(f"column {column.name} is not in the batch's plan")
                planned = self.planned[at].sql_type
                if not widens(column.sql_type, planned):
                    raise SchemaDrift(f"column {column.name} is {column.sql_type}, not {planned}")
                if column.convert is identity:
                    layout[0].append((at, column.name))
                else:
                    layout[1].append((at, column.name, column.convert))
            self._layouts[id(columns)] = layout
        return layout

    def _schemaless(self, row: dict[str, Any], values: list[Any]) -> None:
        for name, value in row.items():
            if value is None:
                continue
            at = self.index.get(name)
            if at is None:
                raise SchemaDrift(f"column {name} is not in the batch's plan")
            convert = INFERRED_CONVERTERS.get(self.planned[at].sql_type)
            try:
                if convert is None:
                    raise ValueError(f"a schemaless value cannot fill a {self.planned[at]} column")
                values[at] = convert(value)
            except ValueError as exc:
                raise SchemaDrift(f"column {name}: {exc}") from None
