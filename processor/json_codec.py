"""Debezium JSON in (JsonConverter, schemas enabled or not), reconciled JSON out.

With schemas enabled every message repeats its schema (often five times the
size of the row). A :class:`JsonCodec` remembers the byte prefix
``{"schema":...,"payload":`` of the last schema it saw, so a message with the
same schema has only its payload parsed, and the output schema is serialized
once per input schema. Rows stored in state are JSON bytes and are written to
the output as they are (``orjson.Fragment``), never parsed again.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from processor.change import (
    OPS,
    TOAST_PLACEHOLDER,
    TOAST_PLACEHOLDER_BASE64,
    Change,
    PositionError,
    Row,
    snapshot_kind,
    source_version,
)
from processor.envelopes import Emit
from processor.errors import InputError, RawMessage

TIDEMARK_FIELD: dict[str, Any] = {
    "type": "struct",
    "optional": True,
    "field": "tidemark",
    "name": "io.tidemark.Metadata",
    "fields": [
        {"type": "string", "optional": False, "field": "topic"},
        {"type": "int32", "optional": False, "field": "partition"},
        {"type": "int64", "optional": False, "field": "offset"},
        {"type": "string", "optional": False, "field": "position"},
        {"type": "string", "optional": False, "field": "envelope"},
        {"type": "string", "optional": False, "field": "reason"},
    ],
}

_SCHEMA_HEAD = b'{"schema":'
_PAYLOAD_HEAD = b',"payload":'
_TOAST_MARKS = (TOAST_PLACEHOLDER.encode(), TOAST_PLACEHOLDER_BASE64.encode())

# Connect schema types and the JSON values they allow (keys are validated against them).
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "int8": (int,),
    "int16": (int,),
    "int32": (int,),
    "int64": (int,),
    "float": (int, float),
    "float32": (int, float),
    "double": (int, float),
    "float64": (int, float),
    "boolean": (bool,),
    "string": (str,),
    "bytes": (str,),
}


class _SchemaCache:
    """The last schema prefix seen, its parsed schema and what was derived from it."""

    __slots__ = ("prefix", "schema", "derived")

    def __init__(self) -> None:
        self.prefix = b""
        self.schema: dict[str, Any] | None = None
        self.derived: Any = None

    def split(self, raw: bytes, msg: RawMessage, what: str) -> tuple[Any, dict[str, Any] | None]:
        """``(payload, schema)`` of ``raw``; only the payload is parsed when the schema is known."""
        prefix = self.prefix
        if prefix and raw.startswith(prefix) and raw.endswith(b"}"):
            return _loads(raw[len(prefix) : -1], msg, what), self.schema
        doc = _loads(raw, msg, what)
        if not (isinstance(doc, dict) and len(doc) == 2 and "schema" in doc and "payload" in doc):
            return doc, None
        schema = doc["schema"]
        if not isinstance(schema, dict):
            raise InputError(f"{what} schema is not a JSON object", msg, "schema")
        candidate = _SCHEMA_HEAD + orjson.dumps(schema) + _PAYLOAD_HEAD
        if raw.startswith(candidate):
            self.prefix, self.schema, self.derived = candidate, schema, None
        return doc["payload"], schema


def _loads(raw: bytes, msg: RawMessage, what: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{what} is not JSON: {exc}", msg, "malformed") from None


class JsonCodec:
    """Decodes the JSON messages of one input topic and encodes its reconciled events."""

    def __init__(self, envelope: str) -> None:
        self.envelope = envelope
        self._values = _SchemaCache()
        self._keys = _SchemaCache()
        self._out: tuple[Any, bytes] = (None, b"")

    # -- rows in state ---------------------------------------------------------

    @staticmethod
    def dump(row: Row) -> bytes:
        """A row's bytes in state."""
        return orjson.dumps(row)

    @staticmethod
    def load(raw: bytes) -> Row:
        """A row from state."""
        row: Row = orjson.loads(raw)
        return row

    # -- input -----------------------------------------------------------------

    def decode(self, msg: RawMessage) -> Change:
        """The change in ``msg`` (key already checked to be present)."""
        assert msg.key is not None
        if self.envelope == "upsert":
            return self._decode_flat(msg)
        self._check_key(msg)
        if msg.value is None:
            raise InputError("null value where a Debezium event was expected", msg, "not-debezium")
        payload, schema = self._values.split(msg.value, msg, "value")
        if not isinstance(payload, dict) or "op" not in payload:
            raise InputError("not a Debezium change event (no 'op' field)", msg, "not-debezium")
        op = payload["op"]
        if op not in OPS:
            raise InputError(f"unknown op {op!r} (expected one of c, u, d, r)", msg, "unknown-op")
        before, after, source = payload.get("before"), payload.get("after"), payload.get("source")
        if op == "d":
            if after is not None:
                raise InputError("a delete with an 'after' row", msg, "not-debezium")
        elif not isinstance(after, dict):
            raise InputError(f"op {op!r} without an 'after' row", msg, "not-debezium")
        if before is not None and not isinstance(before, dict):
            raise InputError("'before' is not a row", msg, "not-debezium")
        try:
            version = source_version(source)
        except PositionError as exc:
            raise InputError(str(exc), msg, "position") from None
        assert isinstance(source, dict)
        toast = after is not None and any(mark in msg.value for mark in _TOAST_MARKS)
        return Change(
            msg.key,
            op,
            before,
            after,
            version,
            snapshot_kind(source),
            source.get("connector"),
            toast,
            payload,
            schema,
        )

    def _decode_flat(self, msg: RawMessage) -> Change:
        version = (0, msg.offset)
        if msg.value is None:
            return Change(msg.key or b"", "d", None, None, version)
        row, schema = self._values.split(msg.value, msg, "value")
        if not isinstance(row, dict):
            raise InputError("upsert value is not a JSON object", msg, "malformed")
        return Change(msg.key or b"", "u", None, row, version, schema=schema)

    def _check_key(self, msg: RawMessage) -> None:
        """A Debezium key is a struct of the primary-key columns; with a schema, it must match."""
        assert msg.key is not None
        payload, schema = self._keys.split(msg.key, msg, "key")
        if not isinstance(payload, dict) or not payload:
            raise InputError("key is not a struct of primary-key columns", msg, "key")
        if schema is None:
            return
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise InputError("key schema is not a struct", msg, "key")
        if len(fields) != len(payload):
            raise InputError("key does not match its schema: columns differ", msg, "key")
        for spec in fields:
            name = spec.get("field")
            if name not in payload:
                raise InputError(f"key does not match its schema: no column {name!r}", msg, "key")
            value = payload[name]
            if value is None:
                if not spec.get("optional"):
                    raise InputError(f"key does not match its schema: {name!r} is null", msg, "key")
                continue
            allowed = _JSON_TYPES.get(spec.get("type", ""))
            if allowed and (
                not isinstance(value, allowed) or (bool not in allowed and isinstance(value, bool))
            ):
                raise InputError(
                    f"key does not match its schema: {name!r} is not {spec.get('type')}", msg, "key"
                )

    # -- output ----------------------------------------------------------------

    def encode(self, change: Change, emit: Emit, msg: RawMessage) -> bytes:
        """The reconciled event: Debezium's envelope plus the ``tidemark`` block."""
        payload: dict[str, Any] = dict(change.event or {})
        before = emit.before
        payload["before"] = orjson.Fragment(before) if isinstance(before, bytes) else before
        if emit.after_stored is not None:
            payload["after"] = orjson.Fragment(emit.after_stored)
        else:
            payload["after"] = emit.after
        payload["op"] = emit.op
        payload.setdefault("source", None)
        if payload.get("ts_ms") is None:
            payload["ts_ms"] = int(time.time() * 1000)
        payload["tidemark"] = {
            "topic": msg.topic,
            "partition": msg.partition,
            "offset": msg.offset,
            "position": f"{change.version[0]},{change.version[1]}",
            "envelope": self.envelope,
            "reason": emit.reason,
        }
        body = orjson.dumps(payload)
        schema = change.schema
        if schema is None:
            return body
        cached_schema, head = self._out
        if cached_schema is not schema:
            head = _SCHEMA_HEAD + orjson.dumps(output_schema(schema, self.envelope)) + _PAYLOAD_HEAD
            self._out = (schema, head)
        return head + body + b"}"


def output_schema(schema: dict[str, Any], envelope: str) -> dict[str, Any]:
    """The input schema with the ``tidemark`` field (an upsert row wrapped in an envelope)."""
    if envelope == "upsert":
        row = dict(schema, optional=True)
        fields = [
            dict(row, field="before"),
            dict(row, field="after"),
            {"type": "string", "optional": False, "field": "op"},
            {"type": "struct", "optional": True, "field": "source", "fields": []},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ]
        return {
            "type": "struct",
            "optional": False,
            "fields": fields + [TIDEMARK_FIELD],
            "name": f"{schema.get('name', 'row')}.Envelope",
        }
    fields = [f for f in schema.get("fields", []) if f.get("field") != "tidemark"]
    return dict(schema, fields=fields + [TIDEMARK_FIELD])


def split_envelope(raw: bytes, msg: RawMessage) -> tuple[Any, dict[str, Any] | None]:
    """``(payload, schema)`` of one JSON message, with (``{schema, payload}``) or without schema."""
    return _SchemaCache().split(raw, msg, "value")
