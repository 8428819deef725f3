"""JSON messages in Kafka Connect's JsonConverter envelope: ``{"schema": ..., "payload": ...}``.

With schemas enabled every message repeats its schema, often five times the
size of the row. :class:`EnvelopeSplitter` remembers the byte prefix of the
last schema it saw, so a message with the same schema has only its payload
parsed. Both the processor's codecs and the sink's decoder use it.
"""

from __future__ import annotations

from typing import Any

import orjson

from tidemark.core.errors import InputError
from tidemark.core.messages import RawMessage

SCHEMA_HEAD = b'{"schema":'
PAYLOAD_HEAD = b',"payload":'


class EnvelopeSplitter:
    """Splits JSON messages into payload and schema, parsing a repeated schema only once.

    The last schema prefix seen is kept with its parsed schema (the same object
    while it repeats).
    """

    __slots__ = ("prefix", "schema")

    def __init__(self) -> None:
        self.prefix = b""
        self.schema: dict[str, Any] | None = None

    def split(
        self, raw: bytes, msg: RawMessage, what: str
    ) -> tuple[Any, dict[str, Any] | None, bytes | None]:
        """``(payload, schema, payload bytes)`` of ``raw``; only the payload is parsed when the
        schema is known. The payload's own bytes are ``None`` when a new schema was parsed."""
        prefix = self.prefix
        if prefix and raw.startswith(prefix) and raw.endswith(b"}"):
            text = raw[len(prefix) : -1]
            return loads(text, msg, what), self.schema, text
        doc = loads(raw, msg, what)
        if not (isinstance(doc, dict) and len(doc) == 2 and "schema" in doc and "payload" in doc):
            return doc, None, raw
        schema = doc["schema"]
        if not isinstance(schema, dict):
            raise InputError(f"{what} schema is not a JSON object", msg, "schema")
        candidate = SCHEMA_HEAD + orjson.dumps(schema) + PAYLOAD_HEAD
        if raw.startswith(candidate):
            self.prefix, self.schema = candidate, schema
        return doc["payload"], schema, None


def loads(raw: bytes, msg: RawMessage, what: str) -> Any:
    """``raw`` parsed; an :class:`InputError` naming ``what`` when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{what} is not JSON: {exc}", msg, "malformed") from None
