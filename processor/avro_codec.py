"""Debezium Avro in the Confluent wire format in, reconciled Avro out.

A message is ``0x00``, a big-endian 4-byte schema id, then the Avro body.
Schemas come from the registry through a :class:`~processor.registry.SchemaCache`
(each id fetched and parsed once). The output schema is the input's envelope
with a ``tidemark`` field added (an ``upsert`` row is wrapped in an envelope);
it is registered under ``<output topic>-value`` (the key schema under
``<output topic>-key``), so any Avro consumer of the output can read it.

Rows in state use the same framing: ``0x00``, the id of the value schema they
were decoded with, then the row's Avro body. A row stored under an older
schema is read with Avro schema resolution into the current one.
"""

from __future__ import annotations

import io
import struct
import time
import typing
from typing import Any

import fastavro

from processor.change import TOAST_PLACEHOLDER_BYTES, Change, Row, debezium_change
from processor.envelopes import Emit
from processor.errors import InputError, RawMessage
from processor.json_codec import metadata
from processor.registry import SchemaCache, UnknownSchemaError

MAGIC = b"\x00"
_HEADER = struct.Struct(">bI")

TIDEMARK_RECORD: dict[str, Any] = {
    "type": "record",
    "name": "Metadata",
    "namespace": "io.tidemark",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "position", "type": "string"},
        {"name": "envelope", "type": "string"},
        {"name": "reason", "type": "string"},
    ],
}


class _Schemas:
    """What one input value schema id gives: the input, row and output schemas."""

    __slots__ = ("input", "row", "output", "output_id")

    def __init__(self, input_schema: Any, row: Any, output: Any, output_id: int) -> None:
        self.input = input_schema
        self.row = row
        self.output = output
        self.output_id = output_id


class AvroCodec:
    """Decodes the Avro messages of one input topic and encodes its reconciled events."""

    def __init__(self, envelope: str, output_topic: str, schemas: SchemaCache | None) -> None:
        self.envelope = envelope
        self.output_topic = output_topic
        self._cache = schemas
        self._by_id: dict[int, _Schemas] = {}
        self._rows: dict[int, Any] = {}
        self._key_ids: dict[int, int] = {}

    # -- framing ---------------------------------------------------------------

    def _read(self, raw: bytes, msg: RawMessage, what: str) -> tuple[int, Any]:
        """``(schema id, decoded datum)`` of a wire-format ``raw``."""
        if len(raw) < _HEADER.size or raw[0] != 0:
            raise InputError(f"{what} is not in the Confluent Avro wire format", msg, "malformed")
        schema_id = _HEADER.unpack_from(raw)[1]
        parsed = self._parsed(schema_id, msg, what)
        return schema_id, _decode(raw, _HEADER.size, parsed, msg, what)

    def _parsed(self, schema_id: int, msg: RawMessage, what: str) -> Any:
        if self._cache is None:
            raise InputError(
                f"{what} is Avro but no schema registry is configured (kafka.schema_registry_url)",
                msg,
                "schema",
            )
        try:
            return self._cache.get(schema_id)[1]
        except UnknownSchemaError as exc:
            raise InputError(f"{what}: {exc}", msg, "schema") from None

    # -- rows in state ---------------------------------------------------------

    @staticmethod
    def owns(raw: bytes) -> bool:
        """True for a row this codec stored."""
        return raw[:1] == MAGIC

    def dump(self, change: Change) -> bytes:
        """``change.after`` framed with the id of the value schema it was decoded with."""
        schema_id: int = change.schema
        out = io.BytesIO()
        out.write(_HEADER.pack(0, schema_id))
        fastavro.schemaless_writer(out, self._by_id[schema_id].row, change.after)
        return out.getvalue()

    def load(self, raw: bytes, into: int | None = None) -> Row:
        """A row from state, resolved into value schema ``into``'s row when given."""
        schema_id = _HEADER.unpack_from(raw)[1]
        writer = self._row(schema_id)
        reader = None if into is None or into == schema_id else self._row(into)
        row = fastavro.schemaless_reader(io.BytesIO(raw[_HEADER.size :]), writer, reader)
        return typing.cast(Row, row)

    # -- input -----------------------------------------------------------------

    def decode_key(self, msg: RawMessage) -> bytes:
        """The key's bytes in state: its Avro body (the schema id is not part of it)."""
        assert msg.key is not None
        _schema_id, key = self._read(msg.key, msg, "key")
        if self.envelope != "upsert" and (not isinstance(key, dict) or not key):
            raise InputError("key is not a struct of primary-key columns", msg, "key")
        return msg.key[_HEADER.size :]

    def decode(self, msg: RawMessage, state_key: bytes) -> Change:
        """The change in ``msg``."""
        if msg.value is None:
            if self.envelope == "upsert":
                return Change(state_key, "d", None, None, (0, msg.offset), codec=self)
            raise InputError("null value where a Debezium event was expected", msg, "not-debezium")
        schema_id, payload = self._read(msg.value, msg, "value")
        try:
            self._schemas(schema_id)
        except ValueError as exc:
            raise InputError(f"value schema {schema_id}: {exc}", msg, "schema") from None
        if self.envelope == "upsert":
            if not isinstance(payload, dict):
                raise InputError("upsert value is not an Avro record", msg, "malformed")
            return Change(state_key, "u", None, payload, (0, msg.offset), schema=schema_id)
        change = debezium_change(state_key, payload, msg, TOAST_PLACEHOLDER_BYTES in msg.value)
        change.schema = schema_id
        return change

    def _row(self, schema_id: int) -> Any:
        """The parsed row schema of value schema ``schema_id``."""
        row = self._rows.get(schema_id)
        if row is None:
            assert self._cache is not None
            document = self._cache.get(schema_id)[0]
            row = fastavro.parse_schema(
                document if self.envelope == "upsert" else row_schema(document), {}
            )
            self._rows[schema_id] = row
        return row

    def _schemas(self, schema_id: int) -> _Schemas:
        found = self._by_id.get(schema_id)
        if found is None:
            assert self._cache is not None
            document, parsed = self._cache.get(schema_id)
            if self.envelope == "upsert":
                output = envelope_schema(document)
            else:
                output = dict(document, fields=_with_tidemark(document.get("fields", [])))
            output_id = self._cache.register(self.output_topic + "-value", output)
            found = self._by_id[schema_id] = _Schemas(
                parsed, self._row(schema_id), fastavro.parse_schema(output, {}), output_id
            )
        return found

    # -- output ----------------------------------------------------------------

    def encode(self, change: Change, emit: Emit, msg: RawMessage) -> tuple[bytes | None, bytes]:
        """The output key (registered for the output topic) and the reconciled event."""
        schemas = self._by_id[change.schema]
        payload: dict[str, Any] = dict(change.event or {})
        before = emit.before
        payload["before"] = (
            self.load(before, change.schema) if isinstance(before, bytes) else before
        )
        payload["after"] = emit.after
        payload["op"] = emit.op
        if payload.get("ts_ms") is None:
            payload["ts_ms"] = int(time.time() * 1000)
        payload["tidemark"] = metadata(change, emit, msg, self.envelope)
        out = io.BytesIO()
        out.write(_HEADER.pack(0, schemas.output_id))
        fastavro.schemaless_writer(out, schemas.output, payload)
        return self._output_key(msg), out.getvalue()

    def _output_key(self, msg: RawMessage) -> bytes | None:
        key = msg.key
        if key is None or len(key) < _HEADER.size:
            return key
        schema_id = _HEADER.unpack_from(key)[1]
        output_id = self._key_ids.get(schema_id)
        if output_id is None:
            assert self._cache is not None
            document = self._cache.get(schema_id)[0]
            output_id = self._cache.register(self.output_topic + "-key", document)
            self._key_ids[schema_id] = output_id
        if output_id == schema_id:
            return key
        return _HEADER.pack(0, output_id) + key[_HEADER.size :]


def _decode(raw: bytes, start: int, parsed: Any, msg: RawMessage, what: str) -> Any:
    stream = io.BytesIO(raw)
    stream.seek(start)
    try:
        datum = fastavro.schemaless_reader(stream, parsed, None)
    except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, ...
        reason = f"{what} is not valid Avro for its schema: {type(exc).__name__}: {exc}"
        raise InputError(reason, msg, "malformed") from None
    if stream.tell() != len(raw):
        extra = len(raw) - stream.tell()
        raise InputError(f"{what} has {extra} bytes after its Avro body", msg, "malformed")
    return datum


def row_schema(envelope: dict[str, Any]) -> dict[str, Any]:
    """The row record of a Debezium envelope schema (defined in ``before`` or ``after``)."""
    for field in envelope.get("fields", []):
        if field.get("name") in ("before", "after"):
            kind = field.get("type")
            branches = kind if isinstance(kind, list) else [kind]
            for branch in branches:
                if isinstance(branch, dict) and branch.get("type") == "record":
                    # The row's name lives in the envelope's namespace unless it has its own.
                    if "namespace" in branch or "." in branch.get("name", ""):
                        return branch
                    return dict(branch, namespace=envelope.get("namespace", ""))
    raise ValueError(f"schema {envelope.get('name')!r} is not a Debezium envelope (no row record)")


def _with_tidemark(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = [f for f in fields if f.get("name") != "tidemark"]
    return [*kept, {"name": "tidemark", "type": ["null", TIDEMARK_RECORD], "default": None}]


def envelope_schema(row: dict[str, Any]) -> dict[str, Any]:
    """The output envelope of an ``upsert`` row schema."""
    name = row.get("name", "Row")
    namespace = row.get("namespace")
    full = f"{namespace}.{name}" if namespace and "." not in name else name
    return {
        "type": "record",
        "name": full + "Envelope",
        "fields": _with_tidemark(
            [
                {"name": "before", "type": ["null", row], "default": None},
                {"name": "after", "type": ["null", full], "default": None},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
            ]
        ),
    }
