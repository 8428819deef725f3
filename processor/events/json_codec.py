"""Debezium JSON in (JsonConverter, schemas enabled or not), reconciled JSON out.

With schemas enabled every message repeats its schema (often five times the
size of the row). A :class:`JsonCodec` remembers the byte prefix
``{"schema":...,"payload":`` of the last schema it saw, so a message with the
same schema has only its payload parsed, and the output schema is serialized
once per input schema. The rows of one incremental-snapshot chunk share even
more: every byte but the row's own (:class:`ChunkEnvelope`), so such a row has
only its ``after`` parsed. Rows stored in state are JSON bytes and are written
to the output as they are (``orjson.Fragment``), never parsed again.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from processor.events.change import (
    TOAST_PLACEHOLDER_BASE64_BYTES,
    TOAST_PLACEHOLDER_BYTES,
    Change,
    Emit,
    Row,
    chunk_version,
    debezium_change,
    flat_change,
    flat_delete,
)
from tidemark.core.errors import InputError
from tidemark.core.json_envelope import PAYLOAD_HEAD, SCHEMA_HEAD, EnvelopeSplitter
from tidemark.core.json_scan import (
    AFTER,
    AFTER_END,
    BEFORE,
    BEFORE_END,
    CLOSE,
    OPEN,
    TOAST,
    Scan,
    scan_bare_key,
    scan_change,
    scan_key,
)
from tidemark.core.messages import RawMessage

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

_READ_HEAD = b'{"before":null,"after":'
#: Where ``null`` of ``before`` starts in :data:`_READ_HEAD`, and a read event's op.
_BEFORE_AT = len(b'{"before":')
_READ = ord("r")

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


class ChunkEnvelope:
    """The bytes around ``after`` that the rows of one chunk share, and their parsed event.

    Tidemark's chunk reader writes each row of a chunk inside the same envelope
    bytes (:meth:`processor.snapshot.chunk_events.TableShape.encode_chunk`): schema, empty
    ``before``, then the row, then ``source`` and the rest. Learned from one fully
    decoded row, the envelope lets the next rows with the same bytes around
    theirs be decoded by parsing the row alone: the bytes between are one JSON
    value (or the message is decoded in full), so the event is the learned one
    with that ``after``. Where the event can be written by splicing (it has a
    ``ts_ms`` and no ``tidemark`` member, as :mod:`tidemark.core.json_scan` requires), each
    row's output is its own bytes with the emitted rows in place
    (:func:`splice_event`), as for a change the scanner took.
    """

    __slots__ = (
        "head",
        "tail",
        "event",
        "schema",
        "snapshot",
        "connector",
        "txid",
        "payload_at",
        "spliceable",
    )

    def __init__(self, head: bytes, tail: bytes, payload_at: int, change: Change) -> None:
        self.head, self.tail, self.payload_at = head, tail, payload_at
        self.event = dict(change.event, after=None)
        self.schema, self.snapshot, self.connector, self.txid = (
            change.schema,
            change.snapshot,
            change.connector,
            change.txid,
        )
        event = change.event
        closing = b"}}" if change.schema is not None else b"}"
        self.spliceable = (
            event.get("ts_ms") is not None and "tidemark" not in event and tail.endswith(closing)
        )

    @staticmethod
    def learn(value: bytes, payload_at: int, change: Change) -> ChunkEnvelope | None:
        """The envelope around ``change`` (a chunk row decoded in full from ``value``,
        whose payload starts at ``payload_at``), if its row can be found in it."""
        row_at = payload_at + len(_READ_HEAD)
        if change.before is not None or not value.startswith(_READ_HEAD, payload_at):
            return None
        row = orjson.dumps(change.after)
        if not value.startswith(row, row_at):
            return None  # written by another serializer: no byte-exact row to find
        return ChunkEnvelope(value[:row_at], value[row_at + len(row) :], payload_at, change)

    def scan(self, value: bytes) -> Scan:
        """Where the parts of ``value``, a row in this envelope, are (as
        :func:`~tidemark.core.json_scan.scan_change` says; the spans :func:`splice_event` uses)."""
        at = self.payload_at
        row_at, row_end = len(self.head), len(value) - len(self.tail)
        close = len(value) - (2 if self.schema is not None else 1)
        before = at + _BEFORE_AT
        return (before, before + 4, row_at, row_end, False, _READ, 0, 0, None, 2, 0, 0, at, close)

    def decode(self, msg: RawMessage, value: bytes, state_key: bytes) -> Change | None:
        """The chunk row in ``value`` if it has this envelope; ``None`` if not, or if
        the bytes between are not one JSON object (a full decode then tells why)."""
        head, tail = self.head, self.tail
        end = len(value) - len(tail)
        if end <= len(head) or not value.startswith(head) or not value.endswith(tail):
            return None
        raw = value[len(head) : end]
        try:
            after = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(after, dict):
            return None
        tag = msg.chunk
        assert tag is not None
        toast = (
            raw.find(TOAST_PLACEHOLDER_BYTES) >= 0 or raw.find(TOAST_PLACEHOLDER_BASE64_BYTES) >= 0
        )
        change = Change(
            state_key,
            "r",
            None,
            after,
            chunk_version(msg),
            self.snapshot,
            self.connector,
            toast,
            self.event,
            self.schema,
            txid=self.txid,
            chunk=tag.number,
            read_in=tag.read_in,
            raw_after=raw,
        )
        if self.spliceable:
            change.raw, change.scan = value, self.scan(value)
        return change


class JsonCodec:
    """Decodes the JSON messages of one input topic and encodes its reconciled events."""

    def __init__(self, envelope: str) -> None:
        self.envelope = envelope
        #: Values' schema envelope (shared with :mod:`processor.reconcile.upsert_fast_path`).
        self.values = EnvelopeSplitter()
        self._keys = EnvelopeSplitter()
        self._out: tuple[Any, bytes] = (None, b"")
        #: The last key schema seen and its columns (name, optional, JSON types).
        self._key_columns: tuple[Any, list[_KeyColumn]] = (None, [])
        #: The last key schema checked, and its columns' names and kinds for the scanner.
        self._key_spec: tuple[Any, tuple[bytes, ...], bytes] = (None, (), b"")
        #: The envelope of the last chunk row decoded in full.
        self._chunk: ChunkEnvelope | None = None

    @property
    def chunk_envelope(self) -> ChunkEnvelope | None:
        """The envelope of the last chunk row decoded in full (its chunk's other rows')."""
        return self._chunk

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

    def scanned_key(self, key: bytes) -> bytes | None:
        """:meth:`decode_key`'s answer for a Debezium key the scanner takes, found without
        decoding it: a bare key with a member, or a key in the envelope of the key schema
        :meth:`decode_key` checked last, holding its columns in its order and of its types
        (:func:`~tidemark.core.json_scan.scan_key`). ``None``: :meth:`decode_key` decides."""
        if scan_bare_key(key, 0, len(key)):
            return key
        prefix = self._keys.prefix
        checked, names, kinds = self._key_spec
        if (
            not prefix
            or checked is not self._keys.schema
            or not key.startswith(prefix)
            or not key.endswith(b"}")
            or not scan_key(key, len(prefix), len(key) - 1, names, kinds)
        ):
            return None
        return key[len(prefix) : -1]

    def decode_key(self, msg: RawMessage) -> bytes:
        """The key's bytes in state: the key's JSON payload (a schema is not part of it).

        A Debezium key is a struct of the primary-key columns; with a schema it
        must match it. An ``upsert`` key is taken as it is.
        """
        assert msg.key is not None
        if self.envelope == "upsert":
            return msg.key
        payload, schema, _text = self._keys.split(msg.key, msg, "key")
        if not isinstance(payload, dict) or not payload:
            raise InputError("key is not a struct of primary-key columns", msg, "key")
        if schema is not None:
            checked, columns = self._key_columns
            if checked is not schema:
                columns = _key_columns(schema, msg)
                self._key_columns = (schema, columns)
                self._key_spec = (schema, *_key_spec(columns))
            _check_key(payload, columns, msg)
            prefix = self._keys.prefix
            if prefix and msg.key.startswith(prefix):
                return msg.key[len(prefix) : -1]
            return orjson.dumps(payload)
        return msg.key

    def decode(self, msg: RawMessage, state_key: bytes) -> Change:
        """The change in ``msg``."""
        if self.envelope == "upsert":
            return self._decode_flat(msg, state_key)
        value = msg.value
        if value is None:
            raise InputError("null value where a Debezium event was expected", msg, "not-debezium")
        chunk = self._chunk
        if chunk is not None and msg.chunk is not None:
            change = chunk.decode(msg, value, state_key)
            if change is not None:
                return change
        payload, schema, text = self.values.split(value, msg, "value")
        # search the payload only: the schema before it is most of the bytes
        start = (
            len(self.values.prefix) if schema is not None and schema is self.values.schema else 0
        )
        scan = None
        if text is not None and msg.chunk is None:
            scan = scan_change(value, start, len(value) - 1 if schema is not None else len(value))
        if scan is not None:
            toast = bool(scan[TOAST])
        else:
            toast = (
                value.find(TOAST_PLACEHOLDER_BYTES, start) >= 0
                or value.find(TOAST_PLACEHOLDER_BASE64_BYTES, start) >= 0
            )
        change = debezium_change(state_key, payload, msg, toast)
        change.schema = schema
        if scan is not None:
            change.raw, change.scan = value, scan
            if change.after is not None:
                change.raw_after = value[scan[AFTER] : scan[AFTER_END]]
        if msg.chunk is not None and (schema is None or start):
            envelope = self._chunk = ChunkEnvelope.learn(value, start, change)
            if envelope is not None and envelope.spliceable:
                change.raw, change.scan = value, envelope.scan(value)
        return change

    def _decode_flat(self, msg: RawMessage, state_key: bytes) -> Change:
        if msg.value is None:
            return flat_delete(state_key, msg)
        row, schema, text = self.values.split(msg.value, msg, "value")
        if not isinstance(row, dict):
            raise InputError("upsert value is not a JSON object", msg, "malformed")
        return flat_change(state_key, row, msg, schema, text)

    # -- output ----------------------------------------------------------------

    def encode(self, change: Change, emit: Emit, msg: RawMessage) -> tuple[bytes | None, bytes]:
        """The output key and the reconciled event: Debezium's envelope plus ``tidemark``.

        Rows already held as JSON bytes (the state's, or the input's own) go in as
        they are; the ``tidemark`` block says where the event came from and why it
        is emitted.
        """
        if change.scan is not None and change.raw is not None and emit.op == change.op:
            body = spliced(change, emit, msg, self.envelope)
            if change.schema is None:
                return msg.key, body
            return msg.key, self.output_head(change.schema) + body + b"}"
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
        return msg.key, self.output_head(schema) + body + b"}"

    def output_head(self, schema: dict[str, Any]) -> bytes:
        """``{"schema":<output schema>,"payload":`` for events of an input with ``schema``."""
        cached_schema, head = self._out
        if cached_schema is not schema:
            head = SCHEMA_HEAD + orjson.dumps(output_schema(schema, self.envelope)) + PAYLOAD_HEAD
            self._out = (schema, head)
        return head


_TIDEMARK = (
    b',"tidemark":{"topic":%b,"partition":%%d,"offset":%%d,"position":"%%d,%%d",'
    b'"envelope":"%b","reason":"%%b"}}'
)


def tidemark_format(topic: bytes, envelope: bytes) -> bytes:
    """``,"tidemark":{...}}``, the member that ends a spliced event (and its payload), for
    the input topic ``topic`` (its name as JSON; Kafka's topic names hold no ``%``) and
    ``envelope``: a format of the partition, the offset, the version's two parts and the
    reason."""
    return _TIDEMARK % (topic, envelope)


def tidemark_block(
    topic: bytes, msg: RawMessage, version: tuple[int, int], envelope: bytes, reason: bytes
) -> bytes:
    """:func:`tidemark_format`'s member for ``msg``."""
    return tidemark_format(topic, envelope) % (
        msg.partition,
        msg.offset,
        version[0],
        version[1],
        reason,
    )


def splice_event(raw: bytes, scan: Scan, before: bytes, after: bytes, tail: bytes) -> bytes:
    """The payload scanned in ``raw`` with ``before`` and ``after`` in place of its own, and
    ``tail`` (:func:`tidemark_block`) in place of its closing brace: the input's bytes,
    re-serialized nowhere, so its numbers (64-bit or not) and strings pass exactly."""
    b0, b1, a0, a1 = scan[BEFORE], scan[BEFORE_END], scan[AFTER], scan[AFTER_END]
    open_, close = scan[OPEN], scan[CLOSE]
    if b0 < a0:
        return b"".join((raw[open_:b0], before, raw[b1:a0], after, raw[a1:close], tail))
    return b"".join((raw[open_:a0], after, raw[a1:b0], before, raw[b1:close], tail))


def spliced(change: Change, emit: Emit, msg: RawMessage, envelope: str) -> bytes:
    """:meth:`JsonCodec.encode`'s event for a change the scanner took: its payload's bytes
    with the emitted ``before`` and ``after``."""
    raw, scan = change.raw, change.scan
    assert raw is not None and scan is not None
    previous = emit.before
    if previous is None:
        before = b"null"
    elif isinstance(previous, bytes):
        before = previous
    elif previous is change.before:
        before = raw[scan[BEFORE] : scan[BEFORE_END]]
    else:
        before = orjson.dumps(previous)
    stored = emit.after_stored
    if stored is not None and stored[:1] != b"\x00":
        after = stored
    elif emit.after is None:
        after = b"null"
    elif emit.after is change.after and not change.toast:
        after = raw[scan[AFTER] : scan[AFTER_END]]
    else:
        after = orjson.dumps(emit.after)
    topic = orjson.dumps(msg.topic)
    tail = tidemark_block(topic, msg, change.version, envelope.encode(), emit.reason.encode())
    return splice_event(raw, scan, before, after, tail)


_KeyColumn = tuple[str, bool, str, tuple[type, ...]]


def _key_columns(schema: dict[str, Any], msg: RawMessage) -> list[_KeyColumn]:
    """Each column of a key schema: its name, whether it may be null, its type and the
    JSON types its value may have (none: not checked)."""
    fields = schema.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, dict) for f in fields):
        raise InputError("key schema is not a struct", msg, "key")
    columns = []
    for spec in fields:
        name, kind = spec.get("field"), spec.get("type")
        if not isinstance(name, str):
            raise InputError("key schema has a field without a name", msg, "key")
        allowed = _JSON_TYPES.get(kind, ()) if isinstance(kind, str) else ()
        columns.append((name, bool(spec.get("optional")), str(kind), allowed))
    return columns


#: The scanner's kind of a key column's value (:func:`~tidemark.core.json_scan.scan_key`), by the
#: JSON types the column allows.
_SCAN_KINDS: dict[tuple[type, ...], bytes] = {
    (int,): b"i",
    (int, float): b"n",
    (bool,): b"b",
    (str,): b"s",
    (): b"a",
}


def _key_spec(columns: list[_KeyColumn]) -> tuple[tuple[bytes, ...], bytes]:
    """The names and kinds :func:`~tidemark.core.json_scan.scan_key` checks a key by (none, so that
    no key is taken, for columns named twice)."""
    names = tuple(name.encode() for name, _optional, _kind, _allowed in columns)
    kinds = b"".join(
        _SCAN_KINDS[allowed].upper() if optional else _SCAN_KINDS[allowed]
        for _name, optional, _kind, allowed in columns
    )
    if len(set(names)) != len(names):
        return (), b""
    return names, kinds


def _check_key(payload: dict[str, Any], columns: list[_KeyColumn], msg: RawMessage) -> None:
    if len(columns) != len(payload):
        raise InputError("key does not match its schema: columns differ", msg, "key")
    for name, optional, kind, allowed in columns:
        if name not in payload:
            raise InputError(f"key does not match its schema: no column {name!r}", msg, "key")
        value = payload[name]
        if value is None:
            if not optional:
                raise InputError(f"key does not match its schema: {name!r} is null", msg, "key")
            continue
        if allowed and (
            not isinstance(value, allowed) or (bool not in allowed and isinstance(value, bool))
        ):
            raise InputError(f"key does not match its schema: {name!r} is not {kind}", msg, "key")


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
