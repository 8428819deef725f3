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
    TOAST_PLACEHOLDER,
    TOAST_PLACEHOLDER_BASE64,
    Change,
    Row,
    debezium_change,
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
_TOAST_TEXT = TOAST_PLACEHOLDER.encode()
_TOAST_BASE64 = TOAST_PLACEHOLDER_BASE64.encode()

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


class EnvelopeSplitter:
    """Splits JSON messages into payload and schema, parsing a repeated schema only once.

    The last schema prefix seen is kept with its parsed schema (the same object
    while it repeats).
    """

    __slots__ = ("prefix", "schema")

    def __init__(self) -> None:
        self.prefix = b""
        self.schema: dict[str, Any] | None = None

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
            self.prefix, self.schema = candidate, schema
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
        self._values = EnvelopeSplitter()
        self._keys = EnvelopeSplitter()
        self._out: tuple[Any, bytes] = (None, b"")

    # -- rows in state ---------------------------------------------------------

    @staticmethod
    def owns(raw: bytes) -> bool:
        """True for a row this codec stored (JSON text, never the Avro magic byte)."""
        return raw[:1] != b"\x00"

    @staticmethod
    def dump(change: Change) -> bytes:
        """``change.after``'s bytes in state (the input's own bytes when unchanged)."""
        if change.raw_after is not None and not change.toast:
            return change.raw_after
        return orjson.dumps(change.after)

    @staticmethod
    def load(raw: bytes) -> Row:
        """A row from state."""
        row: Row = orjson.loads(raw)
        return row

    # -- input -----------------------------------------------------------------

    def decode_key(self, msg: RawMessage) -> bytes:
        """The key's bytes in state: the key's JSON payload (a schema is not part of it).

        A Debezium key is a struct of the primary-key columns; with a schema it
        must match it. An ``upsert`` key is taken as it is.
        """
        assert msg.key is not None
        if self.envelope == "upsert":
            return msg.key
        payload, schema = self._keys.split(msg.key, msg, "key")
        if not isinstance(payload, dict) or not payload:
            raise InputError("key is not a struct of primary-key columns", msg, "key")
        if schema is not None:
            _check_key(payload, schema, msg)
            prefix = self._keys.prefix
            if prefix and msg.key.startswith(prefix):
                return msg.key[len(prefix) : -1]
            return orjson.dumps(payload)
        return msg.key

    def decode(self, msg: RawMessage, state_key: bytes) -> Change:
        """The change in ``msg``."""
        if self.envelope == "upsert":
            return self._decode_flat(msg, state_key)
        if msg.value is None:
            raise InputError("null value where a Debezium event was expected", msg, "not-debezium")
        payload, schema = self._values.split(msg.value, msg, "value")
        value = msg.value
        # search the payload only: the schema before it is most of the bytes
        start = (
            len(self._values.prefix) if schema is not None and schema is self._values.schema else 0
        )
        toast = value.find(_TOAST_TEXT, start) >= 0 or value.find(_TOAST_BASE64, start) >= 0
        change = debezium_change(state_key, payload, msg, toast)
        change.schema = schema
        return change

    def _decode_flat(self, msg: RawMessage, state_key: bytes) -> Change:
        version = (0, msg.offset)
        if msg.value is None:
            return Change(state_key, "d", None, None, version)
        row, schema = self._values.split(msg.value, msg, "value")
        if not isinstance(row, dict):
            raise InputError("upsert value is not a JSON object", msg, "malformed")
        raw = msg.value if schema is None else None
        return Change(state_key, "u", None, row, version, schema=schema, raw_after=raw)

    # -- output ----------------------------------------------------------------

    def encode(self, change: Change, emit: Emit, msg: RawMessage) -> tuple[bytes | None, bytes]:
        """The output key and the reconciled event: Debezium's envelope plus ``tidemark``.

        Rows already held as JSON bytes (the state's, or the input's own) go in as
        they are; the ``tidemark`` block says where the event came from and why it
        is emitted.
        """
        event = change.event
        payload: dict[str, Any] = dict(event) if event else {}
        before = emit.before
        payload["before"] = orjson.Fragment(before) if isinstance(before, bytes) else before
        stored = emit.after_stored
        if stored is not None and stored[:1] != b"\x00":
            payload["after"] = orjson.Fragment(stored)
        else:
            payload["after"] = emit.after
        payload["op"] = emit.op
        if "source" not in payload:
            payload["source"] = None
        if payload.get("ts_ms") is None:
            payload["ts_ms"] = int(time.time() * 1000)
        version = change.version
        payload["tidemark"] = {
            "topic": msg.topic,
            "partition": msg.partition,
            "offset": msg.offset,
            "position": f"{version[0]},{version[1]}",
            "envelope": self.envelope,
            "reason": emit.reason,
        }
        body = orjson.dumps(payload)
        schema = change.schema
        if schema is None:
            return msg.key, body
        cached_schema, head = self._out
        if cached_schema is not schema:
            head = _SCHEMA_HEAD + orjson.dumps(output_schema(schema, self.envelope)) + _PAYLOAD_HEAD
            self._out = (schema, head)
        return msg.key, head + body + b"}"


def _check_key(payload: dict[str, Any], schema: dict[str, Any], msg: RawMessage) -> None:
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
    return EnvelopeSplitter().split(raw, msg, "value")
