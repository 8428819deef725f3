"""The three envelopes: ``upsert``, ``debezium-upsert`` and ``debezium``, as pure rules.

Each envelope decides, for one change and the state of its input partition,
whether to emit a reconciled event and how the state changes. The rules touch
state only through :class:`KeyState`, so they run the same over RocksDB in the
data plane and over a dict in the unit and property tests.

State layout (one keyspace per input partition):

- ``b"k" + key``: an :class:`~processor.reconcile.versions.Entry` (version and last row)
  for ``upsert`` and ``debezium-upsert``;
- ``HIGH_WATER``: the classic ``debezium`` envelope's high-water mark;
- ``b"s" + group + key``: keys already emitted in a snapshot group (rows sharing
  one position, ``group`` its 16 bytes) while it is read; once the position moves
  on they are garbage, marked by ``SEEN_STALE`` and deleted a page per batch
  (:func:`prune_seen`), never all at once (a group can hold a whole table);
- ``WINDOW_BUFFER + key``: a chunk row of a signal-table window waiting until
  its partition has passed the window, and ``WINDOW_DUE + end + key`` its entry
  in the order they are due (:mod:`processor.reconcile.window_buffer`).

Guarantees, given the commit protocol of :mod:`processor.dataplane.loop`:

- ``upsert`` / ``debezium-upsert``: the output's ``before`` is the state's
  previous row (a correct retraction even when the input's ``before`` is empty);
  a change older than the state's version is dropped, an equal one re-emitted
  (a replay after a crash), so at-least-once never loses an event.
- ``debezium``: O(1) state per partition outside snapshots (the highest
  position emitted), O(keys) only while a snapshot group is read; a contiguous
  replayed range (Debezium's duplicates after a connector restart) is dropped.
  The retraction is the input's own ``before``, so the source must send it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol

from processor.errors import SourceRefusedError, UnfillableError
from processor.events.change import (
    ORDERED_CONNECTORS,
    Change,
    Emit,
    Row,
    Snapshot,
    Version,
    fill_placeholders,
)
from processor.events.visibility import PgSnapshot
from processor.reconcile.versions import Action, Entry, decide_change, decide_row

ENTRY = b"k"
SEEN = b"s"
WINDOW_BUFFER = b"w"
WINDOW_DUE = b"e"
#: Present once every buffered row of the partition has its ``WINDOW_DUE`` entry.
WINDOW_INDEXED = b"\x00tidemark:window-indexed"
HIGH_WATER = b"\x00tidemark:high-water"
#: Present while keys of a snapshot group that ended are left to delete.
SEEN_STALE = b"\x00tidemark:seen-stale"
#: The high-water mark: the highest position emitted, and whether a snapshot group is open.
HIGH_WATER_MARK = struct.Struct(">qqB")
#: A group's position in keys, ordered as positions are (offset to unsigned).
_GROUP = struct.Struct(">QQ")
_OFFSET = 1 << 63


class KeyState(Protocol):
    """The state of one input partition as the rules see it."""

    def get(self, key: bytes) -> bytes | None:
        """The stored value, or ``None``."""

    def put(self, key: bytes, value: bytes | None) -> None:
        """Set (``None``: delete) a value."""

    def keys(
        self,
        prefix: bytes,
        *,
        after: bytes | None = None,
        before: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes]:
        """The keys that start with ``prefix`` (above ``after``, below ``before``), in order,
        the first ``limit``: fewer than ``limit`` means no more."""


class RowCodec(Protocol):
    """How a format stores rows in state."""

    def dump(self, change: Change) -> bytes:
        """Bytes of ``change.after``."""

    def load(self, raw: bytes) -> Row | None:
        """A row from bytes :meth:`dump` wrote (``None``: it can no longer be read; the
        rules then treat the key as holding no row to fill from)."""


Step = Callable[[Change, KeyState, RowCodec], Emit | None]
#: The reason of an :class:`Emit` that is no output: the key's row must be read again
#: from the source (:func:`debezium_upsert`).
READ_AGAIN = "read-again"


def upsert(change: Change, state: KeyState, rows: RowCodec) -> Emit | None:
    """``upsert``: a flat value replaces the key's row, a null value deletes it.

    A change's version is its input offset. Flattened Debezium rows
    (``ExtractNewRecordState``) that carry ``__txId`` keep it in state, so that chunk
    rows of an incremental snapshot (``change.chunk``) are decided against changes by
    the snapshot they were read in, as under ``debezium-upsert``. A delete without a
    transaction id (the tombstone after a flattened delete) over a key already deleted
    adds nothing and is dropped (a replay of it is re-emitted as any): the delete before
    it holds the transaction id.
    """
    key = ENTRY + change.key
    raw = state.get(key)
    stored = Entry.decode(raw) if raw is not None else None
    if change.chunk is not None:
        action = decide_row(change.chunk, change.read_in, stored)
    else:
        action = decide_change(change.version, change.txid, stored)
    if action is Action.DROP or (action is Action.APPLY and _adds_nothing(change, stored)):
        return None
    # On a replay (REEMIT) the state already holds this change and its previous
    # row is gone: the event carries the row itself, which downstream applies
    # idempotently.
    previous = stored.value if stored else None
    after_stored = rows.dump(change) if change.after is not None else None
    if action is Action.APPLY:
        read_in = change.read_in
        snapshot = read_in if isinstance(read_in, PgSnapshot) else None
        entry = Entry(change.version, after_stored, change.txid, change.chunk, snapshot)
        state.put(key, entry.encode())
    if change.chunk is not None:
        return Emit("r", previous, change.after, "snapshot", after_stored)
    if change.after is None:
        op = "d"
    else:
        op = "u" if previous is not None else "c"
    return Emit(op, previous, change.after, action.value, after_stored)


def _adds_nothing(change: Change, stored: Entry | None) -> bool:
    """Whether ``change`` is a delete without a transaction id of a key already deleted
    (which would lose the transaction id of the delete stored)."""
    return (
        change.after is None and change.txid is None and stored is not None and stored.value is None
    )


def debezium_upsert(change: Change, state: KeyState, rows: RowCodec) -> Emit | None:
    """``debezium-upsert``: the Debezium ``after`` replaces the key's row in state.

    The retraction comes from state, not from the input's ``before`` (which is
    empty without ``REPLICA IDENTITY FULL``). Unchanged-TOAST placeholders are
    filled from the state's row, else from the input's own ``before``. A chunk
    row of Tidemark's incremental snapshot (``change.chunk``) is decided against
    state by the snapshot it was read in (:func:`processor.reconcile.versions.decide_row`).

    A change whose placeholders have neither (a key with no state yet: a backfill
    started from ``snapshot.mode=no_data``, its row still in a window buffer, or
    state lost) is not dropped: the key's entry becomes *pending* (the change's
    version and txId, no row) and the rule answers :data:`READ_AGAIN`, for which the
    batch asks the snapshot coordinator to read the key's row again (DBLog's dump
    of chosen keys). That row, read after the change committed, is decided as any
    chunk row: applied if its snapshot (or window) places it after the pending
    change, which it then contains; a row that does not asks again. Until then
    nothing is emitted for the key: its output goes from the row before straight
    to the row read.
    """
    key = ENTRY + change.key
    raw = state.get(key)
    stored = Entry.decode(raw) if raw is not None else None
    # Debezium's versions are source positions: a PostgreSQL change's WAL position places
    # it against a chunk's snapshot, however far apart their transaction ids are.
    if change.chunk is not None:
        action = decide_row(change.chunk, change.read_in, stored, positions=True)
    else:
        action = decide_change(change.version, change.txid, stored, positions=True)
    if action is Action.DROP:
        if change.chunk is not None and stored is not None and stored.pending:
            return Emit(change.op, None, None, READ_AGAIN)  # still not the pending row
        return None
    previous = stored.value if stored else None
    if change.toast and change.after is not None:
        if previous is not None and stored is not None and not stored.pending:
            prior = rows.load(previous)
        else:  # a pending entry's row is the one last emitted, not the source's
            prior = change.before
        if fill_placeholders(change.after, prior):
            if change.chunk is not None:
                _fill(change.after, prior)  # raises: a chunk row never holds placeholders
            if action is Action.APPLY:
                entry = Entry(change.version, previous, change.txid, pending=True)
                state.put(key, entry.encode())
            return Emit(change.op, None, None, READ_AGAIN)
    after_stored = rows.dump(change) if change.after is not None else None
    if action is Action.APPLY:
        read_in = change.read_in
        snapshot = read_in if isinstance(read_in, PgSnapshot) else None
        entry = Entry(change.version, after_stored, change.txid, change.chunk, snapshot)
        state.put(key, entry.encode())
    reason = "snapshot" if change.chunk is not None else action.value
    return Emit(change.op, previous, change.after, reason, after_stored)


def debezium(change: Change, state: KeyState, rows: RowCodec) -> Emit | None:
    """``debezium``: ordered deduplication of Debezium's replays, O(1) state in steady state.

    Debezium repeats a contiguous range of events after a connector restart.
    Positions (:func:`processor.events.change.source_version`) follow commit order
    within a partition, so any change at or below the highest position already
    emitted is such a repeat. Snapshot rows share one position per snapshot (or
    per incremental chunk): among them, keys already emitted are remembered under
    the group's position, and a repeated key is dropped.
    """
    _validate_classic(change)
    raw = state.get(HIGH_WATER)
    mark: Version | None = None
    group = False
    if raw is not None:
        major, minor, flag = HIGH_WATER_MARK.unpack(raw)
        mark, group = (major, minor), bool(flag)
    in_group = change.snapshot is not Snapshot.NONE
    if mark is not None and change.version < mark:
        return None
    if mark is not None and change.version == mark:
        if not (in_group and group):
            return None  # the same change again
        seen = _seen(mark) + change.key
        if state.get(seen) is not None:
            return None
        state.put(seen, b"")
    else:
        if group:
            state.put(SEEN_STALE, b"")  # the ended group's keys: pruned a page at a time
        state.put(HIGH_WATER, HIGH_WATER_MARK.pack(change.version[0], change.version[1], in_group))
        if in_group:
            state.put(_seen(change.version) + change.key, b"")
    if change.toast and change.after is not None:
        _fill(change.after, change.before)
    reason = "snapshot" if in_group else Action.APPLY.value
    return Emit(change.op, change.before, change.after, reason)


def _seen(group: Version) -> bytes:
    return SEEN + _GROUP.pack(group[0] + _OFFSET, group[1] + _OFFSET)


def prune_seen(state: KeyState, limit: int) -> None:
    """Delete up to ``limit`` keys of snapshot groups that ended (of the ``debezium``
    envelope), so that its state returns to one mark, a page per batch."""
    if state.get(SEEN_STALE) is None:
        return
    raw = state.get(HIGH_WATER)
    before = None
    if raw is not None:
        major, minor, flag = HIGH_WATER_MARK.unpack(raw)
        if flag:  # the group being read now keeps its keys
            before = _seen((major, minor))
    stale = state.keys(SEEN, before=before, limit=limit)
    for key in stale:
        state.put(key, None)
    if len(stale) < limit:
        state.put(SEEN_STALE, None)


def _validate_classic(change: Change) -> None:
    if change.connector not in ORDERED_CONNECTORS:
        raise SourceRefusedError(
            f"the debezium envelope needs a PostgreSQL or MySQL connector, not "
            f"{change.connector!r}; use debezium-upsert"
        )
    if change.op in ("u", "d") and change.before is None:
        raise SourceRefusedError(
            f"a{'n update' if change.op == 'u' else ' delete'} without 'before': the debezium "
            "envelope needs the old row (PostgreSQL: ALTER TABLE ... REPLICA IDENTITY FULL); "
            "or use debezium-upsert"
        )


def _fill(after: Row, prior: Row | None) -> None:
    missing = fill_placeholders(after, prior)
    if missing:
        raise UnfillableError(
            f"unchanged TOAST value of {', '.join(missing)} and no earlier row to take it from "
            "(no state for the key and no full 'before'; REPLICA IDENTITY FULL provides one)"
        )


STEPS: dict[str, Step] = {
    "upsert": upsert,
    "debezium-upsert": debezium_upsert,
    "debezium": debezium,
}
