"""Debezium Avro in the Confluent wire format in, reconciled Avro out.

A message is ``0x00``, a big-endian 4-byte schema id, then the Avro body.
Schemas come from the registry through a :class:`~tidemark.schema_registry.SchemaCache`
(each id fetched and parsed once). The output schema is the input's envelope
with a ``tidemark`` field added last (an ``upsert`` row is wrapped in an
envelope); it is registered under ``<output topic>-value`` (the key schema under
``<output topic>-key``), so any Avro consumer of the output can read it.

Writing Avro costs more than reading it, so events are spliced, not re-encoded:
a Debezium value is read in three parts (``before``, ``after``, the rest) to
learn where each ends, and the output is the new header, the retraction's
bytes, the input's own bytes from ``after`` on, and the ``tidemark`` block
encoded by hand. A row is encoded only when it changed (a filled TOAST
placeholder) or was stored under another schema.

Rows in state use the message framing: ``0x00``, the id of the value schema
they were decoded with, then the row's Avro body. A row stored under an older
schema is read with Avro schema resolution into the current one.
"""

from __future__ import annotations

import io
import typing
from typing import Any

import fastavro

from processor.events.avro_schemas import (
    Layout,
    avro_long,
    avro_string,
    envelope_layout,
    row_schema,
    upsert_layout,
)
from processor.events.change import (
    TOAST_PLACEHOLDER_BYTES,
    Change,
    Emit,
    Row,
    debezium_change,
    flat_change,
    flat_delete,
)
from tidemark.avro_read import read
from tidemark.avro_wire import HEADER, MAGIC, at_end, read_avro, schema_id_of
from tidemark.errors import InputError, UnknownSchemaError
from tidemark.messages import RawMessage
from tidemark.schema_registry import SchemaCache


class _Decoded:
    """Where a decoded value's parts lie in its bytes.

    The ``after`` row's body is ``raw[row:rest]`` (after its one union byte); the
    envelope's ``before`` ends where that byte starts, and the fields after
    ``after`` are ``raw[rest:]``.
    """

    __slots__ = ("layout", "raw", "row", "rest")

    def __init__(self, layout: Layout, raw: bytes, row: int, rest: int) -> None:
        self.layout, self.raw, self.row, self.rest = layout, raw, row, rest


class AvroCodec:
    """Decodes the Avro messages of one input topic and encodes its reconciled events."""

    def __init__(self, envelope: str, output_topic: str, schemas: SchemaCache | None) -> None:
        self.envelope = envelope
        self.output_topic = output_topic
        self._cache = schemas
        self._layouts: dict[int, Layout] = {}
        self._rows: dict[int, Any] = {}
        self._key_ids: dict[int, int] = {}
        self._metadata: dict[tuple[str, int], bytes] = {}
        #: The ``tidemark`` block's last two fields (the envelope, the reason) by reason.
        self._reasons: dict[str, bytes] = {}

    # -- schemas ---------------------------------------------------------------

    def _parsed(self, schema_id: int, msg: RawMessage, what: str) -> tuple[dict[str, Any], Any]:
        if self._cache is None:
            raise InputError(
                f"{what} is Avro but no schema registry is configured (kafka.schema_registry_url)",
                msg,
                "schema",
            )
        try:
            return self._cache.get(schema_id)
        except UnknownSchemaError as exc:
            raise InputError(f"{what}: {exc}", msg, "schema") from None

    def _layout(self, schema_id: int, msg: RawMessage) -> Layout:
        layout = self._layouts.get(schema_id)
        if layout is None:
            document, parsed = self._parsed(schema_id, msg, "value")
            assert self._cache is not None
            try:
                if self.envelope == "upsert":
                    layout = upsert_layout(schema_id, document, parsed)
                else:
                    layout = envelope_layout(schema_id, document)
            except ValueError as exc:
                raise InputError(f"value schema {schema_id}: {exc}", msg, "schema") from None
            layout.output_id = self._cache.register(self.output_topic + "-value", layout.output_doc)
            self._layouts[schema_id] = layout
            self._rows[schema_id] = layout.row
        return layout

    def _row(self, schema_id: int) -> Any:
        """The parsed row schema of value schema ``schema_id`` (for rows in state)."""
        row = self._rows.get(schema_id)
        if row is None:
            assert self._cache is not None
            document = self._cache.get(schema_id)[0]
            if self.envelope != "upsert":
                document = row_schema(document)
            row = self._rows[schema_id] = fastavro.parse_schema(document, {})
        return row

    # -- rows in state ---------------------------------------------------------

    @staticmethod
    def owns(raw: bytes) -> bool:
        """True for a row this codec stored."""
        return raw[:1] == MAGIC

    def dump(self, change: Change) -> bytes:
        """``change.after`` framed with the id of the value schema it was decoded with."""
        decoded: _Decoded = change.schema
        layout = decoded.layout
        header = HEADER.pack(0, layout.schema_id)
        if not change.toast:  # unchanged: the row's bytes are in the message
            return header + decoded.raw[decoded.row : decoded.rest]
        return header + _write(layout.row, change.after)

    def load(self, raw: bytes, into: int | None = None) -> Row:
        """A row from state, resolved into value schema ``into``'s row when given."""
        schema_id = HEADER.unpack_from(raw)[1]
        writer = self._row(schema_id)
        reader = None if into is None or into == schema_id else self._row(into)
        if reader is None:
            row = read(writer, raw, HEADER.size)[0]
        else:  # schema resolution: fastavro's
            row = fastavro.schemaless_reader(io.BytesIO(raw[HEADER.size :]), writer, reader)
        return typing.cast(Row, row)

    # -- input -----------------------------------------------------------------

    def decode_key(self, msg: RawMessage) -> bytes:
        """The key's bytes in state: its Avro body (the schema id is not part of it)."""
        key = msg.key
        assert key is not None
        schema_id = schema_id_of(key, msg, "key")
        datum = read_avro(key, HEADER.size, self._parsed(schema_id, msg, "key")[1], msg, "key")[0]
        if self.envelope != "upsert" and (not isinstance(datum, dict) or not datum):
            raise InputError("key is not a struct of primary-key columns", msg, "key")
        return key[HEADER.size :]

    def key_fields(self, msg: RawMessage) -> dict[str, object]:
        """The fields of ``msg``'s key struct, decoded."""
        key = msg.key
        assert key is not None
        schema = self._parsed(schema_id_of(key, msg, "key"), msg, "key")[1]
        datum = read_avro(key, HEADER.size, schema, msg, "key")[0]
        assert isinstance(datum, dict)
        return datum

    def decode(self, msg: RawMessage, state_key: bytes) -> Change:
        """The change in ``msg``."""
        raw = msg.value
        if raw is None:
            if self.envelope == "upsert":
                return flat_delete(state_key, msg)
            raise InputError("null value where a Debezium event was expected", msg, "not-debezium")
        layout = self._layout(schema_id_of(raw, msg, "value"), msg)
        if self.envelope == "upsert":
            row, end = read_avro(raw, HEADER.size, layout.row, msg, "value")
            at_end(end, raw, msg)
            if not isinstance(row, dict):
                raise InputError("upsert value is not an Avro record", msg, "malformed")
            return flat_change(state_key, row, msg, _Decoded(layout, raw, HEADER.size, len(raw)))
        if raw[HEADER.size : HEADER.size + 1] == layout.null_byte:
            before, after_at = None, HEADER.size + 1  # no old row (no REPLICA IDENTITY FULL)
        else:
            wrapped, after_at = read_avro(raw, HEADER.size, layout.before, msg, "value")
            before = wrapped["before"]
        wrapped, rest_at = read_avro(raw, after_at, layout.after, msg, "value")
        after = wrapped["after"]
        payload, end = read_avro(raw, rest_at, layout.rest, msg, "value")
        at_end(end, raw, msg)
        payload["before"], payload["after"] = before, after
        change = debezium_change(state_key, payload, msg, TOAST_PLACEHOLDER_BYTES in raw)
        change.schema = _Decoded(layout, raw, after_at + len(layout.row_byte), rest_at)
        return change

    # -- output ----------------------------------------------------------------

    def encode(self, change: Change, emit: Emit, msg: RawMessage) -> tuple[bytes | None, bytes]:
        """The output key (registered for the output topic) and the reconciled event."""
        decoded: _Decoded = change.schema
        layout, raw = decoded.layout, decoded.raw
        parts = [HEADER.pack(0, layout.output_id)]
        before = emit.before
        if before is None:
            parts.append(layout.null_byte)
        elif isinstance(before, bytes) and HEADER.unpack_from(before)[1] == layout.schema_id:
            parts += (layout.row_byte, before[HEADER.size :])
        elif before is change.before and self.envelope != "upsert":
            parts.append(raw[HEADER.size : decoded.row - len(layout.row_byte)])  # the input's
        else:
            if isinstance(before, bytes):
                before = self.load(before, layout.schema_id)
            parts += (layout.row_byte, _write(layout.row, before))
        if emit.after is None:
            parts.append(layout.null_byte)
        elif change.toast:
            parts += (layout.row_byte, _write(layout.row, emit.after))
        else:
            parts += (layout.row_byte, raw[decoded.row : decoded.rest])
        if self.envelope == "upsert":
            parts += (avro_string(emit.op), b"\x00")  # op, and ts_ms null
        else:
            parts.append(raw[decoded.rest :])
        head = self._metadata.get((msg.topic, msg.partition))
        if head is None:
            head = b"\x02" + avro_string(msg.topic) + avro_long(msg.partition)
            self._metadata[(msg.topic, msg.partition)] = head
        version = f"{change.version[0]},{change.version[1]}"
        reason = self._reasons.get(emit.reason)
        if reason is None:
            reason = self._reasons[emit.reason] = avro_string(self.envelope) + avro_string(
                emit.reason
            )
        parts += (head, avro_long(msg.offset), avro_string(version), reason)
        return self._output_key(msg), b"".join(parts)

    def _output_key(self, msg: RawMessage) -> bytes | None:
        key = msg.key
        if key is None or len(key) < HEADER.size:
            return key
        schema_id = HEADER.unpack_from(key)[1]
        output_id = self._key_ids.get(schema_id)
        if output_id is None:
            assert self._cache is not None
            document = self._cache.get(schema_id)[0]
            output_id = self._cache.register(self.output_topic + "-key", document)
            self._key_ids[schema_id] = output_id
        if output_id == schema_id:
            return key
        return HEADER.pack(0, output_id) + key[HEADER.size :]


def _write(parsed: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, datum)
    return out.getvalue()
