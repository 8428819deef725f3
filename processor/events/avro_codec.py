"""Debezium Avro in the Confluent wire format in, reconciled Avro out.

A message is ``0x00``, a big-endian 4-byte schema id, then the Avro body.
Schemas come from the registry through a :class:`~tidemark.core.schema_registry.SchemaCache`
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

import contextlib
import io
import typing
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from processor.errors import PositionError
from processor.events.avro_schemas import (
    Layout,
    avro_long,
    avro_string,
    envelope_layout,
    row_schema,
    upsert_layout,
)
from processor.events.change import (
    DECIDING_FIELDS,
    FLAT_DELETED,
    FLAT_TXID,
    OPS,
    TOAST_PLACEHOLDER_BYTES,
    Change,
    Emit,
    Row,
    Snapshot,
    Version,
    debezium_change,
    flat_change,
    flat_delete,
    snapshot_kind,
    source_version,
)
from tidemark.core.avro_read import (
    Keep,
    Program,
    compile_schema,
    program_of,
    read,
    read_compiled,
    skip,
    write_offset_position,
)
from tidemark.core.avro_wire import HEADER, MAGIC, at_end, read_avro, schema_id_of
from tidemark.core.errors import InputError, UnknownSchemaError
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache

#: What reading a row from state into a schema, or writing it in one, raises when the row
#: does not fit: its schema is gone from the registry, or cannot be resolved into the
#: newer one (a column added ``NOT NULL`` without a default), or a value has another type.
UNREADABLE_ROW = (InputError, UnknownSchemaError, SchemaResolutionError, ValueError, TypeError)


class _Deletion(typing.NamedTuple):
    """An ``upsert`` delete (a null value, which names no schema): the last schema met
    when it was decoded, in which its event goes when the key has no row to retract."""

    fallback: Layout | None


class _Decoded:
    """Where a decoded value's parts lie in its bytes.

    The ``after`` row's body is ``raw[row:rest]`` (after its one union byte); the
    envelope's ``before`` ends where that byte starts, and the fields after
    ``after`` are ``raw[rest:]``.
    """

    __slots__ = ("layout", "raw", "row", "rest")

    def __init__(self, layout: Layout, raw: bytes, row: int, rest: int) -> None:
        self.layout, self.raw, self.row, self.rest = layout, raw, row, rest


#: What :meth:`AvroCodec.scan` finds in a Debezium value: its layout, where ``after``'s
#: union starts and where the fields after it start (``before`` is ``raw[5:after_at]``,
#: ``after`` ``raw[after_at:rest_at]``), whether ``before`` is a row, the op, the version,
#: ``txId`` (or ``None``), the snapshot kind and ``source.connector``.
AvroScan = tuple[Layout, int, int, bool, str, Version, int | None, Snapshot, str | None]

#: What :meth:`AvroCodec.scan` reads of the fields after ``after``: the op, and of
#: ``source`` the fields a change is decided by. The rest is checked, not decoded.
SCANNED: Keep = {"op": None, "source": dict.fromkeys(DECIDING_FIELDS)}


class AvroCodec:
    """Decodes the Avro messages of one input topic and encodes its reconciled events."""

    def __init__(self, envelope: str, output_topic: str, schemas: SchemaCache | None) -> None:
        self.envelope = envelope
        self.output_topic = output_topic
        self._cache = schemas
        self._layouts: dict[int, Layout] = {}
        self._rows: dict[int, Any] = {}
        #: A key's header (its schema's id) to its output's (the id registered for the output).
        self._key_headers: dict[bytes, bytes] = {}
        self._metadata: dict[tuple[str, int], bytes] = {}
        #: The ``tidemark`` block's last two fields (the envelope, the reason) by reason.
        self._reasons: dict[str, bytes] = {}
        #: The last truncate event deleting keys, and its fields after ``after`` as a delete's.
        self._truncate_rest: tuple[bytes, bytes] = (b"", b"")
        #: For :meth:`scan`, by a value schema's id bytes: its layout and the compiled
        #: programs of its ``before``, ``after``, the rest's :data:`SCANNED` fields and
        #: the whole rest (``None``: one declined).
        self._scans: dict[bytes, tuple[Layout, Program, Program, Program, Program] | None] = {}
        #: For :meth:`scan_row`, by a row schema's id bytes: its layout, its compiled
        #: program and whether it has ``__txId`` or ``__deleted`` (``None``: declined).
        self._row_scans: dict[bytes, tuple[Layout, Program, bool] | None] = {}
        #: For :meth:`scan_key`, by a key schema's id bytes: its compiled program
        #: (``None``: a key the general path refuses, or a schema not compiled).
        self._key_programs: dict[bytes, Program | None] = {}

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
        parsed = self._parsed(schema_id, msg, "key")[1]
        datum = read_avro(key, HEADER.size, parsed, msg, "key")[0]
        if self.envelope != "upsert" and (not isinstance(datum, dict) or not datum):
            raise InputError("key is not a struct of primary-key columns", msg, "key")
        if key[1:5] not in self._key_programs:
            struct = isinstance(parsed, dict) and parsed.get("type") == "record"
            self._key_programs[key[1:5]] = (
                program_of(parsed) if struct and parsed.get("fields") else None
            )
        return key[HEADER.size :]

    def scan_key(self, key: bytes) -> bytes | None:
        """The state key of a Debezium key :meth:`decode_key` takes, if its schema is one
        :meth:`decode_key` has met, else ``None`` (decode it)."""
        program = self._key_programs.get(key[1:5]) if key[:1] == MAGIC else None
        if program is None or skip(program, key, HEADER.size) is None:
            return None
        return key[HEADER.size :]

    def scan(self, raw: bytes) -> AvroScan | None:
        """What :meth:`decode` would make a :class:`Change` of, for a Debezium value of a
        schema :meth:`decode` has met, with no unchanged-TOAST placeholder; else ``None``
        (the general path decodes it, and raises what it raises)."""
        programs = self._scans.get(raw[1:5]) if raw[:1] == MAGIC else None
        if programs is None:
            programs = self._scan_programs(raw[1:5])
            if programs is None:
                return None
        layout, before, after, scanned, _rest = programs
        after_at = skip(before, raw, HEADER.size)
        rest_at = None if after_at is None else skip(after, raw, after_at)
        found = None if rest_at is None else read_compiled(scanned, raw, rest_at)
        if found is None or found[1] != len(raw) or TOAST_PLACEHOLDER_BYTES in raw:
            return None
        payload = found[0]
        op, source = payload.get("op"), payload.get("source")
        if type(op) is not str or op not in OPS or type(source) is not dict:
            return None
        assert after_at is not None and rest_at is not None
        if (op == "d") != (raw[after_at : after_at + len(layout.null_byte)] == layout.null_byte):
            return None  # a delete with a row, or a change without one
        try:
            version = source_version(source)
        except PositionError:
            return None
        txid, connector = source.get("txId"), source.get("connector")
        if connector is not None and type(connector) is not str:
            return None
        before_row = raw[HEADER.size : HEADER.size + len(layout.row_byte)] == layout.row_byte
        return (
            layout,
            after_at,
            rest_at,
            before_row,
            op,
            version,
            txid if type(txid) is int else None,
            snapshot_kind(source),
            connector,
        )

    def rest(self, raw: bytes, rest_at: int) -> dict[str, Any]:
        """The fields after ``after`` of a value :meth:`scan` took (``rest_at``: where
        they start), decoded whole (a change's ``source``, for its source position)."""
        rest = self._scans[raw[1:5]]
        assert rest is not None
        found = read_compiled(rest[4], raw, rest_at)
        assert found is not None and type(found[0]) is dict  # the scan read it, in part
        return found[0]

    def scan_row(self, raw: bytes) -> tuple[Layout, int | None, bool] | None:
        """For ``upsert``: what :meth:`decode` would make a :class:`Change` of, for a flat
        row of a schema :meth:`decode` has met: its layout, its ``__txId`` (or ``None``)
        and whether its ``__deleted`` is ``"true"`` (:func:`flat_change`); else ``None``.
        A row is decoded only when its schema has either field; otherwise it is skipped."""
        found = self._row_scans.get(raw[1:5]) if raw[:1] == MAGIC else None
        if found is None:
            found = self._row_programs(raw[1:5])
            if found is None:
                return None
        layout, program, flattened = found
        if not flattened:
            end = skip(program, raw, HEADER.size)
            return (layout, None, False) if end == len(raw) else None
        read_row = read_compiled(program, raw, HEADER.size)
        if read_row is None or read_row[1] != len(raw) or type(read_row[0]) is not dict:
            return None
        row = read_row[0]
        txid = row.get(FLAT_TXID)  # an Avro int or long: within 64 bits
        return layout, txid if type(txid) is int else None, row.get(FLAT_DELETED) == "true"

    def _row_programs(self, id_bytes: bytes) -> tuple[Layout, Program, bool] | None:
        """The layout and program :meth:`scan_row` reads a row schema with, and whether
        the schema has ``__txId`` or ``__deleted``, once :meth:`decode` has met it."""
        layout = self._layouts.get(int.from_bytes(id_bytes, "big")) if len(id_bytes) == 4 else None
        if layout is None or self.envelope != "upsert":
            return None
        program = program_of(layout.row)
        found = None
        if program is not None:
            names = {field.get("name") for field in layout.row.get("fields", [])}
            found = (layout, program, bool(names & {FLAT_TXID, FLAT_DELETED}))
        self._row_scans[id_bytes] = found
        return found

    def _scan_programs(
        self, id_bytes: bytes
    ) -> tuple[Layout, Program, Program, Program, Program] | None:
        """The layout and programs :meth:`scan` reads a value schema with, once
        :meth:`decode` has met the schema (made its layout, registered its output)."""
        layout = self._layouts.get(int.from_bytes(id_bytes, "big")) if len(id_bytes) == 4 else None
        if layout is None or self.envelope == "upsert":
            return None
        before, after, rest = (program_of(p) for p in (layout.before, layout.after, layout.rest))
        scanned = compile_schema(layout.rest, SCANNED)
        programs = None
        if before is not None and after is not None and rest is not None and scanned is not None:
            programs = (layout, before, after, scanned, rest)
        self._scans[id_bytes] = programs
        return programs

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
                change = flat_delete(state_key, msg)
                # As met by then, not by the messages after it in the batch.
                change.schema = _Deletion(next(reversed(self._layouts.values()), None))
                return change
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

    def encode(
        self, change: Change, emit: Emit, msg: RawMessage
    ) -> tuple[bytes | None, bytes | None]:
        """The output key (registered for the output topic) and the reconciled event
        (``None``: an ``upsert`` delete with no schema to write it in, whose tombstone
        alone deletes the key)."""
        decoded: _Decoded | _Deletion = change.schema
        if type(decoded) is _Deletion:  # a null value (an upsert's delete) names no schema
            return self.output_key(msg), self._delete_event(change, emit, msg, decoded.fallback)
        assert type(decoded) is _Decoded
        layout, raw = decoded.layout, decoded.raw
        parts = [HEADER.pack(0, layout.output_id)]
        if change.op == "t":  # a key a truncate deletes: its row, then the truncate's source
            parts += (self._retraction(layout, emit.before) or layout.null_byte, layout.null_byte)
            parts += (
                self._deletion_rest(decoded, msg),
                self.tidemark_block(msg, change.version, emit.reason),
            )
            return self.output_key(msg), b"".join(parts)
        before = emit.before
        if before is not None and before is change.before and self.envelope != "upsert":
            parts.append(raw[HEADER.size : decoded.row - len(layout.row_byte)])  # the input's
        else:  # a retraction the layout cannot hold goes as null: the key's change is not lost
            parts.append(self._retraction(layout, before) or layout.null_byte)
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
        parts.append(self.tidemark_block(msg, change.version, emit.reason))
        return self.output_key(msg), b"".join(parts)

    def _deletion_rest(self, decoded: _Decoded, msg: RawMessage) -> bytes:
        """The fields after ``after`` of a truncate event, ``op`` a delete's: those of each
        key the truncate deletes (the same for all of them, so written once)."""
        cached_raw, rest = self._truncate_rest
        if cached_raw is not decoded.raw:
            fields, _end = read_avro(decoded.raw, decoded.rest, decoded.layout.rest, msg, "value")
            rest = _write(decoded.layout.rest, {**fields, "op": "d"})
            self._truncate_rest = (decoded.raw, rest)
        return rest

    def _delete_event(
        self, change: Change, emit: Emit, msg: RawMessage, fallback: Layout | None
    ) -> bytes | None:
        """The event of an ``upsert`` topic's null value, in the schema of the row it
        retracts (the row stored for the key), else in ``fallback`` (the last schema met
        before it); ``None`` when there is neither, or the retracted row does not fit it."""
        before = emit.before
        layout = None
        if isinstance(before, bytes):
            with contextlib.suppress(InputError):
                layout = self._layout(HEADER.unpack_from(before)[1], msg)
        if layout is None:
            layout = fallback
            if layout is None:
                return None
        retraction = self._retraction(layout, before)
        if retraction is None:  # a row that does not fit the schema: the tombstone alone
            return None
        parts = [HEADER.pack(0, layout.output_id), retraction]
        parts += (layout.null_byte, avro_string("d"), b"\x00")  # after, op, a null ts_ms
        parts.append(self.tidemark_block(msg, change.version, emit.reason))
        return b"".join(parts)

    def _retraction(self, layout: Layout, before: Row | bytes | None) -> bytes | None:
        """An event's ``before`` in ``layout``: its union branch and row (``None``: the row
        does not fit, such as a row stored before a column was added ``NOT NULL`` without a
        default, which schema resolution cannot fill)."""
        if before is None:
            return layout.null_byte
        if isinstance(before, bytes) and HEADER.unpack_from(before)[1] == layout.schema_id:
            return layout.row_byte + before[HEADER.size :]
        try:
            if isinstance(before, bytes):
                before = self.load(before, layout.schema_id)
            return layout.row_byte + _write(layout.row, before)
        except UNREADABLE_ROW:
            return None

    def tidemark_block(self, msg: RawMessage, version: Version, reason: str) -> bytes:
        """The output's ``tidemark`` field (its union branch, then the record)."""
        head = self.block_head(msg.topic, msg.partition)
        return b"".join(
            (
                head,
                write_offset_position(msg.offset, version[0], version[1]),
                self.block_tail(reason),
            )
        )

    def block_head(self, topic: str, partition: int) -> bytes:
        """:meth:`tidemark_block` up to its offset, for a message of ``topic[partition]``."""
        head = self._metadata.get((topic, partition))
        if head is None:
            head = self._metadata[(topic, partition)] = (
                b"\x02" + avro_string(topic) + avro_long(partition)
            )
        return head

    def block_tail(self, reason: str) -> bytes:
        """:meth:`tidemark_block` after its position, for ``reason``."""
        tail = self._reasons.get(reason)
        if tail is None:
            tail = self._reasons[reason] = avro_string(self.envelope) + avro_string(reason)
        return tail

    def output_key(self, msg: RawMessage) -> bytes | None:
        """``msg``'s key, framed with the id of its schema registered for the output topic
        (a key in JSON, whose converter is not the value's, as it is)."""
        key = msg.key
        if key is None or len(key) < HEADER.size or key[:1] != MAGIC:
            return key
        header = key[: HEADER.size]
        output = self.output_key_header(header)
        return key if output == header else output + key[HEADER.size :]

    def output_key_header(self, header: bytes) -> bytes:
        """The header of the output key of a key with ``header`` (its schema's id): the id
        of that schema registered for the output topic."""
        output = self._key_headers.get(header)
        if output is None:
            assert self._cache is not None
            schema_id = HEADER.unpack_from(header)[1]
            document = self._cache.get(schema_id)[0]
            output_id = self._cache.register(self.output_topic + "-key", document)
            output = self._key_headers[header] = HEADER.pack(0, output_id)
        return output


def _write(parsed: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, datum)
    return out.getvalue()
