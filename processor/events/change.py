"""The format-independent form of one input change, and where it sits in the source's order.

Codecs (:mod:`processor.events.json_codec`, :mod:`processor.events.avro_codec`) turn input
bytes into a :class:`Change`; the envelopes (:mod:`processor.reconcile.envelopes`) decide
on changes without knowing the bytes they came from.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import orjson

from processor.errors import PositionError
from processor.events.visibility import Window
from tidemark.core.errors import InputError
from tidemark.core.json_scan import sequence_version
from tidemark.core.messages import RawMessage

Version = tuple[int, int]
Row = dict[str, Any]

#: What Debezium writes for a PostgreSQL column whose unchanged TOASTed value
#: was not sent by logical decoding (text form; bytea carries it base64-encoded).
TOAST_PLACEHOLDER = "__debezium_unavailable_value"
TOAST_PLACEHOLDER_BYTES = TOAST_PLACEHOLDER.encode()
TOAST_PLACEHOLDER_BASE64 = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="
TOAST_PLACEHOLDER_BASE64_BYTES = TOAST_PLACEHOLDER_BASE64.encode()

OPS = frozenset({"c", "u", "d", "r"})
#: Fields of a row flattened by Debezium's ``ExtractNewRecordState`` (its default prefix):
#: the transaction id (``add.fields`` with ``txId``), and the delete marker written under
#: ``delete.tombstone.handling.mode`` ``rewrite``.
FLAT_PREFIX = "__"
FLAT_TXID, FLAT_DELETED = FLAT_PREFIX + "txId", FLAT_PREFIX + "deleted"
#: Connectors whose positions the classic ``debezium`` envelope knows how to order.
ORDERED_CONNECTORS = frozenset({"postgresql", "mysql"})


class Snapshot(enum.Enum):
    """Whether a change was read by a snapshot, and by which kind."""

    NONE = "none"
    #: Debezium's initial snapshot (``source.snapshot`` true, first, ..., last).
    INITIAL = "initial"
    #: A chunk row of an incremental snapshot (``source.snapshot`` incremental).
    INCREMENTAL = "incremental"


_SNAPSHOT_VALUES = {
    None: Snapshot.NONE,
    "false": Snapshot.NONE,
    "true": Snapshot.INITIAL,
    "first": Snapshot.INITIAL,
    "first_in_data_collection": Snapshot.INITIAL,
    "last_in_data_collection": Snapshot.INITIAL,
    "last": Snapshot.INITIAL,
    "incremental": Snapshot.INCREMENTAL,
}


@dataclass(slots=True)
class Change:
    """One decoded input change: ``before``/``after`` are rows as dicts (``None`` where absent)."""

    key: bytes
    op: str
    before: Row | None
    after: Row | None
    version: Version
    snapshot: Snapshot = Snapshot.NONE
    #: ``source.connector`` (``postgresql``, ``mysql``, ...); ``None`` for flat upserts.
    connector: str | None = None
    #: True when ``after`` holds the unchanged-TOAST placeholder somewhere.
    toast: bool = False
    #: The codec's parsed event and its schema: the template of the output event.
    event: Any = None
    schema: Any = None
    #: The codec that decoded the change; it encodes the output and stores the row.
    codec: Any = None
    #: Debezium's ``source.txId`` (PostgreSQL's 32-bit transaction id), when given.
    txid: int | None = None
    #: For a chunk row of Tidemark's incremental snapshot: its chunk number and the
    #: ``pg_snapshot`` it was read in or its signal-table window
    #: (:mod:`processor.events.visibility`).
    chunk: int | None = None
    read_in: Any = None
    #: ``after`` exactly as the input holds it (JSON text), when it could be taken
    #: from the message without serializing it again.
    raw_after: bytes | None = None
    #: For a JSON Debezium event the compiled scanner took (:mod:`tidemark.core.json_scan`):
    #: the message's value and the scan of its payload, so the output is spliced from
    #: the input's bytes (:func:`processor.events.json_codec.splice_event`).
    raw: bytes | None = None
    scan: Any = None


@dataclass(slots=True)
class Emit:
    """A reconciled event to produce."""

    op: str
    #: The retraction: a row, the state's stored bytes of it, or ``None``.
    before: Row | bytes | None
    after: Row | None
    #: Why it is emitted: ``applied``, ``replayed`` (equal version after a crash) or ``snapshot``.
    reason: str
    #: ``after`` as stored in state, when the rules serialized it anyway.
    after_stored: bytes | None = None


#: The ``source`` fields a change is decided by: those :func:`source_version` and
#: :func:`snapshot_kind` read, the transaction id and the connector.
DECIDING_FIELDS = ("sequence", "lsn", "file", "pos", "row", "snapshot", "txId", "connector")


def snapshot_kind(source: dict[str, Any]) -> Snapshot:
    """The snapshot kind of a Debezium ``source`` block (unknown values count as none)."""
    value = source.get("snapshot")
    if value is not None and not isinstance(value, str):
        return Snapshot.NONE
    return _SNAPSHOT_VALUES.get(value, Snapshot.NONE)


#: Versions and transaction ids are kept as signed 64-bit integers (in state, in outputs).
_LOWEST, _HIGHEST = -(2**63), 2**63 - 1


def in_64_bits(number: int) -> bool:
    """Whether ``number`` fits a signed 64-bit integer."""
    return _LOWEST <= number <= _HIGHEST


def source_version(source: Any) -> Version:
    """The change's position in the source's commit order.

    PostgreSQL: ``source.sequence`` is ``[last commit LSN, change LSN]`` as a JSON
    string; the pair follows commit order even where plain LSNs interleave. Debezium's own
    snapshot rows carry ``[null, X]``, X the position the snapshot was read at: they are
    ``(X, X)``, after every change committed before X and before every change streamed
    after it (a re-snapshot after a lost slot repairs the keys that changed meanwhile; as
    ``(0, X)`` they were older than any state). A null change LSN counts as 0. Without
    ``sequence``, the LSN. MySQL: binlog file number and position, then the row within
    the event.
    """
    if not isinstance(source, dict):
        raise PositionError("Debezium event without a 'source' block")
    sequence = source.get("sequence")
    if type(sequence) is str:
        found = sequence_version(sequence)  # PostgreSQL's own form, read in C
        if found is not None:
            return found
    try:
        if sequence:
            commit, change = orjson.loads(sequence)
            position = int(change or 0)
            version = (position if commit is None else int(commit)), position
        elif source.get("lsn") is not None:
            lsn = int(source["lsn"])
            version = lsn, lsn
        elif source.get("file") and source.get("pos") is not None:
            number = int(str(source["file"]).rsplit(".", 1)[-1])
            version = (number << 40) | int(source["pos"]), int(source.get("row") or 0)
        else:
            raise PositionError(
                "Debezium event without a source position (sequence, lsn or binlog)"
            )
    except (orjson.JSONDecodeError, TypeError, ValueError, OverflowError):
        raise PositionError(
            f"unreadable source position {sequence or source.get('lsn')!r}"
        ) from None
    if not (in_64_bits(version[0]) and in_64_bits(version[1])):
        raise PositionError(f"source position {version} is beyond 64-bit integers")
    return version


def is_placeholder(value: Any) -> bool:
    """True for the unchanged-TOAST placeholder in any of the forms Debezium writes."""
    if isinstance(value, list):
        return bool(value) and is_placeholder(value[0])
    return value in _PLACEHOLDERS


_PLACEHOLDERS = (TOAST_PLACEHOLDER, TOAST_PLACEHOLDER_BASE64, TOAST_PLACEHOLDER_BYTES)


def fill_placeholders(after: Row, previous: Row | None) -> list[str]:
    """Fill ``after``'s placeholders from ``previous``; return the columns left unfilled."""
    missing = []
    for column, value in after.items():
        if not is_placeholder(value):
            continue
        old = previous.get(column, TOAST_PLACEHOLDER) if previous is not None else TOAST_PLACEHOLDER
        if is_placeholder(old):
            missing.append(column)
        else:
            after[column] = old
    return missing


def debezium_change(state_key: bytes, payload: Any, msg: RawMessage, toast: bool) -> Change:
    """Validate a decoded Debezium envelope (any format) and make it a :class:`Change`."""
    if not isinstance(payload, dict) or "op" not in payload:
        raise InputError("not a Debezium change event (no 'op' field)", msg, "not-debezium")
    op = payload["op"]
    if op == "t":
        return _truncate(payload, msg)
    if not isinstance(op, str) or op not in OPS:
        raise InputError(f"unknown op {op!r} (expected one of c, u, d, r)", msg, "unknown-op")
    before, after, source = payload.get("before"), payload.get("after"), payload.get("source")
    if op == "d":
        if after is not None:
            raise InputError("a delete with an 'after' row", msg, "not-debezium")
    elif not isinstance(after, dict):
        raise InputError(f"op {op!r} without an 'after' row", msg, "not-debezium")
    if before is not None and not isinstance(before, dict):
        raise InputError("'before' is not a row", msg, "not-debezium")
    tag = msg.chunk
    if tag is not None:
        if op != "r" or not isinstance(source, dict):
            raise InputError("a backfill record that is not a read event", msg, "not-debezium")
        version = chunk_version(msg)
    else:
        try:
            version = source_version(source)
        except PositionError as exc:
            raise InputError(str(exc), msg, "position") from None
    assert isinstance(source, dict)
    txid = source.get("txId")
    if not isinstance(txid, int) or isinstance(txid, bool):
        txid = None
    elif not in_64_bits(txid):
        raise InputError(f"transaction id {txid} is beyond 64-bit integers", msg, "position")
    connector = source.get("connector")
    if connector is not None and not isinstance(connector, str):
        raise InputError(f"source.connector {connector!r} is not a name", msg, "not-debezium")
    change = Change(
        state_key,
        op,
        before,
        after,
        version,
        snapshot_kind(source),
        connector,
        toast and after is not None,
        payload,
        txid=txid,
    )
    if tag is not None:
        change.chunk, change.read_in = tag.number, tag.read_in
    return change


def _truncate(payload: dict[str, Any], msg: RawMessage) -> Change:
    """A truncate event (``op: t``): a change of no key and no rows, at its position."""
    source = payload.get("source")
    if payload.get("before") is not None or payload.get("after") is not None:
        raise InputError("a truncate event with a row", msg, "not-debezium")
    if msg.chunk is not None or not isinstance(source, dict):
        raise InputError("a truncate event without a source, or in a backfill", msg, "not-debezium")
    try:
        version = source_version(source)
    except PositionError as exc:
        raise InputError(str(exc), msg, "position") from None
    txid = source.get("txId")
    if not isinstance(txid, int) or isinstance(txid, bool) or not in_64_bits(txid):
        txid = None
    connector = source.get("connector")
    return Change(
        b"",
        "t",
        None,
        None,
        version,
        connector=connector if isinstance(connector, str) else None,
        event=payload,
        txid=txid,
    )


def flat_change(
    state_key: bytes,
    row: Row,
    msg: RawMessage,
    schema: Any = None,
    raw_after: bytes | None = None,
) -> Change:
    """An ``upsert`` topic's row as a change, versioned by its input offset.

    Rows flattened by Debezium's ``ExtractNewRecordState`` may say more, in fields of
    its default prefix: ``__txId`` (``add.fields`` with ``txId``) is the change's
    transaction id, and ``__deleted`` ``"true"`` (``delete.tombstone.handling.mode``
    ``rewrite``) makes the row a delete of its key, whose values are the old row. A
    record of a backfill topic is a chunk row (``op`` ``r``).
    """
    txid = row.get(FLAT_TXID)
    if type(txid) is not int:
        txid = None
    elif not in_64_bits(txid):
        raise InputError(f"transaction id {txid} is beyond 64-bit integers", msg, "position")
    deleted = row.get(FLAT_DELETED) == "true"
    tag = msg.chunk
    if tag is not None:
        if isinstance(tag.read_in, Window):
            raise InputError(
                "a signal-table window's row for an upsert topic (its changes are placed by "
                "offset, not by a position a window can bound)",
                msg,
                "backfill-headers",
            )
        if deleted:
            raise InputError("a backfill record that is not a read event", msg, "not-debezium")
        change = Change(state_key, "r", None, row, chunk_version(msg), schema=schema)
        change.raw_after, change.chunk, change.read_in = raw_after, tag.number, tag.read_in
        return change
    version = (0, msg.offset)
    if deleted:
        return Change(state_key, "d", row, None, version, schema=schema, txid=txid)
    return Change(state_key, "u", None, row, version, schema=schema, txid=txid, raw_after=raw_after)


def flat_delete(state_key: bytes, msg: RawMessage) -> Change:
    """The null value of an ``upsert`` topic: a delete of the key."""
    if msg.chunk is not None:
        raise InputError("a backfill record without a value", msg, "not-debezium")
    return Change(state_key, "d", None, None, (0, msg.offset))


def chunk_version(msg: RawMessage) -> Version:
    """The version of a chunk row of Tidemark's own snapshot (``msg.chunk`` set).

    A chunk row is placed by its chunk and what it saw, not by a position; a
    signal-table window's row sits at the window's close, so later changes win.
    """
    tag = msg.chunk
    assert tag is not None
    read_in = tag.read_in
    return read_in.high if isinstance(read_in, Window) else (0, tag.number)
