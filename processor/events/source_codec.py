"""The formats of one input topic: Confluent Avro or JSON, told apart per message.

A Confluent wire-format message starts with the magic byte ``0x00``, which no
JSON text does, so each key and value is decoded by the codec its first byte
names, and its reconciled event is written in the same format. Rows in state
are told apart the same way (an Avro row is framed like a message).
"""

from __future__ import annotations

import contextlib

import orjson

from processor.events.avro_codec import UNREADABLE_ROW, AvroCodec
from processor.events.change import Change, Emit, Row
from processor.events.json_codec import JsonCodec
from tidemark.core.avro_wire import MAGIC
from tidemark.core.errors import InputError
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache


class SourceCodec:
    """Decodes one topic's messages and encodes its output; the rules' row codec."""

    def __init__(self, envelope: str, output_topic: str, schemas: SchemaCache | None) -> None:
        self.json = JsonCodec(envelope)
        self.avro = AvroCodec(envelope, output_topic, schemas)

    def state_key(self, msg: RawMessage) -> bytes:
        """The bytes in state of ``msg``'s key (:class:`InputError`: none, or unreadable)."""
        key = msg.key
        if key is None:
            raise InputError("message without a key (the primary key is required)", msg, "no-key")
        return (self.avro if key[:1] == MAGIC else self.json).decode_key(msg)

    def decode(self, msg: RawMessage) -> Change:
        """The change in ``msg`` (its key present), keyed by the key's bytes in state. A
        message without a key is a truncate event (``op`` ``t``, Debezium writes them
        without one, its key ``b""``) or no change (an :class:`InputError` says why)."""
        if msg.key is None and msg.value is not None:
            with contextlib.suppress(InputError):
                truncate = self.decode_truncate(msg)
                if truncate is not None:
                    return truncate
        state_key = self.state_key(msg)
        key = msg.key
        assert key is not None
        value = msg.value
        codec = self._codec(value if value is not None else key)
        change = codec.decode(msg, state_key)
        change.codec = codec
        return change

    def decode_truncate(self, msg: RawMessage) -> Change | None:
        """The truncate event in ``msg``'s value, whatever its key (``None``: a change of
        another kind; :class:`InputError`: not a change)."""
        if msg.value is None or self.json.envelope == "upsert":
            return None
        codec = self._codec(msg.value)
        change = codec.decode(msg, b"")
        if change.op != "t":
            return None
        change.codec = codec
        return change

    def _codec(self, data: bytes) -> JsonCodec | AvroCodec:
        """The codec of a key or value, by its first byte."""
        return self.avro if data[:1] == MAGIC else self.json

    def key_fields(self, msg: RawMessage) -> dict[str, object]:
        """The columns and values of ``msg``'s key (a Debezium key struct), as decoded,
        whatever its value holds (:class:`InputError`: no key, or unreadable)."""
        if msg.key is not None and msg.key[:1] == MAGIC:
            return self.avro.key_fields(msg)
        fields = orjson.loads(self.state_key(msg))  # a JSON key's bytes in state: its payload
        if not isinstance(fields, dict):
            raise InputError("a key that is not a struct of columns", msg, "no-key")
        return fields

    def encode(
        self, change: Change, emit: Emit, msg: RawMessage
    ) -> tuple[bytes | None, bytes | None]:
        """The output key and value, in the format of the input (no value: a delete written
        as its tombstone alone, :meth:`AvroCodec.encode`)."""
        codec: JsonCodec | AvroCodec = change.codec
        before = emit.before
        if isinstance(before, bytes) and not codec.owns(before):
            emit.before = self.load(before)  # unreadable: a null retraction, the change goes out
        return codec.encode(change, emit, msg)

    def dump(self, change: Change) -> bytes:
        """``change.after``'s bytes in state."""
        codec: JsonCodec | AvroCodec = change.codec
        return codec.dump(change)

    def load(self, raw: bytes) -> Row | None:
        """A row from state, in whichever format it was stored (``None``: it can no longer
        be read, such as an Avro row whose schema the registry no longer has)."""
        if not self.avro.owns(raw):
            return self.json.load(raw)
        try:
            return self.avro.load(raw)
        except UNREADABLE_ROW:
            return None
