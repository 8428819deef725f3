"""The version rules every stateful envelope shares, and the state entry they keep per key.

A *version* orders the changes of one key (docs/concepts/versions.md). State holds, per
key, what was applied last: a change (its version and Debezium's ``txId``) or a chunk row
of an incremental snapshot (its chunk number and the ``pg_snapshot`` it was read in). The
decisions:

- change ``e`` against a change of version ``v``: ``e < v`` drop (a replay of
  an older change); ``e = v`` re-emit (I5: after a crash the replay may be the
  only copy that reached the output; downstream is idempotent); ``e > v`` apply;
- change ``e`` against a chunk row read in snapshot ``S``: drop if ``e``'s
  transaction is visible in ``S`` (the row already contains it), else apply;
- chunk row ``r`` of ``S`` against a change: apply if that change is visible
  in ``S`` (the row is newer), else drop (state is newer than the chunk);
- chunk row ``r`` against a chunk row: the later chunk wins; the same chunk
  (a replay) is re-emitted.

A chunk row read inside a signal-table window ``(L, H)`` (DDD-3's watermarks)
is decided only once its partition has seen every change below ``H``: it is
applied if state holds no change of the key at or above ``L`` (a change inside
the window, or after it, is at least as new as the row), else dropped. Below
``L``, where the window carries the chunk's PostgreSQL snapshot, the state's
change must also be visible in it: a transaction that had written its commit
record but was not yet visible when the chunk was read sits below ``L`` in the
stream and is missing from the row (:mod:`processor.events.visibility`). The row is
stored at version ``H``, so a later change wins and a replayed earlier one
does not.

With exact visibility every decision is immediate, and the output is monotone
per key. A delete keeps a tombstone entry with its version and ``txId``, so a
replayed older change or a stale chunk row cannot resurrect the row.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from processor.errors import StateFormatError
from processor.events.visibility import PgSnapshot, Window

Version = tuple[int, int]

#: An entry's head: format, version, flags (``flags < 2``: a version and a value only).
HEAD = struct.Struct(">BqqB")
TXID = struct.Struct(">q")
_CHUNK = struct.Struct(">q")
#: The format of every entry this release writes; an entry of another stops its partition.
FORMAT = 2
_PRESENT, _TXID_FLAG, _SNAPSHOT_FLAG, _CHUNK_FLAG, _PENDING_FLAG = 1, 2, 4, 8, 16
#: The first byte of every entry this release writes.
FORMAT_BYTE = bytes([FORMAT])
#: The snapshot of a chunk row's entry carries the WAL positions around it.
_POSITIONS_FLAG = 32
PRESENT_FLAG = _PRESENT
_PRESENT_TXID = _PRESENT | _TXID_FLAG
#: A change's entry up to its row: :data:`HEAD`, then its transaction id.
_CHANGE_HEAD = struct.Struct(HEAD.format + TXID.format[1:])
#: The flags of an entry that holds a change's row (or its deletion), with or without its
#: transaction id (the rest hold a chunk row's or a pending change), and, for each, where
#: the row's bytes start: what a hot path reads without decoding the entry.
CHANGE_ROW_AT = {0: HEAD.size, _PRESENT: HEAD.size, _TXID_FLAG: HEAD.size + TXID.size}
CHANGE_ROW_AT[_PRESENT | _TXID_FLAG] = HEAD.size + TXID.size
#: Where each part of a change's entry is, as the compiled loops read and write it:
#: ``processor/reconcile/_fused.c`` has its own, exported as ``ENTRY_LAYOUT``, and
#: tests/unit/test_fused_loops.py holds the two equal.
ENTRY_LAYOUT = {
    "format": FORMAT,
    "major_at": struct.calcsize(">B"),
    "minor_at": struct.calcsize(">Bq"),
    "flags_at": struct.calcsize(">Bqq"),
    "head_size": HEAD.size,
    "txid_size": TXID.size,
    "present": _PRESENT,
    "txid_flag": _TXID_FLAG,
}


def unknown_format(raw: bytes) -> str:
    """Why an entry cannot be read: its format, or its length."""
    if raw[:1] == FORMAT_BYTE:
        return f"a state entry of {len(raw)} bytes, shorter than an entry's head: damaged"
    found = raw[0] if raw else "none"
    return (
        f"a state entry of format {found}; this release reads format {FORMAT} (an entry "
        "written by a newer release, or damaged): run the release that wrote it, or "
        "rebuild the partition's state (tidemark offsets reset --reset-state)"
    )


class Action(enum.Enum):
    """What to do with a change or a chunk row."""

    APPLY = "applied"
    REEMIT = "replayed"
    DROP = "dropped"


def decide(incoming: Version, stored: Version | None) -> Action:
    """The decision for a change of version ``incoming`` against state version ``stored``."""
    if stored is None or incoming > stored:
        return Action.APPLY
    if incoming == stored:
        return Action.REEMIT
    return Action.DROP


def decide_change(
    version: Version, txid: int | None, stored: Entry | None, positions: bool = False
) -> Action:
    """A change (``txid``: Debezium's ``txId``, if any) against the key's state.
    ``positions``: versions are PostgreSQL positions, ``(last commit LSN, change LSN)``,
    which place a change against a snapshot whatever its distance in transaction ids
    (:meth:`~processor.events.visibility.PgSnapshot.visible`)."""
    if stored is None:
        return Action.APPLY
    if stored.snapshot is not None and txid is not None:
        lsn = version[1] if positions else None
        return Action.DROP if stored.snapshot.visible(txid, lsn) else Action.APPLY
    return decide(version, stored.version)


def decide_row(
    chunk: int, read_in: PgSnapshot | Window, stored: Entry | None, positions: bool = False
) -> Action:
    """A chunk row (chunk number ``chunk``, read in a snapshot or inside a window) against
    the key's state; a window's row only once its partition has passed the window.
    ``positions`` as for :func:`decide_change`, of the change in state."""
    if stored is None:
        return Action.APPLY
    if stored.chunk is not None:
        if chunk == stored.chunk:
            return Action.REEMIT
        return Action.APPLY if chunk > stored.chunk else Action.DROP
    if isinstance(read_in, Window):
        if stored.version >= read_in.low:
            return Action.DROP  # the key changed inside the window, or after it
        if read_in.snapshot is None or stored.txid is None:
            return Action.APPLY
        # Below the window, but possibly not yet visible when the chunk was read.
        snapshot = read_in.snapshot
    else:
        snapshot = read_in
    if stored.txid is None:
        # A change without a transaction id (not from PostgreSQL) cannot be placed
        # against the snapshot: the row read from the source now is the newest.
        return Action.APPLY
    lsn = stored.version[1] if positions else None
    return Action.APPLY if snapshot.visible(stored.txid, lsn) else Action.DROP


class Entry(NamedTuple):
    """State of one key: what was applied last and its value (``None``: deleted).

    A change has a ``version`` and, from PostgreSQL, a ``txid``; a chunk row has
    the ``chunk`` number and the ``snapshot`` it was read in (read-only mode) or,
    read inside a signal-table window, the window's close as its ``version``. (A
    tuple: one is made per event on the hot path.)

    A *pending* entry is a change applied without its row: an update whose unchanged
    TOAST values could not be filled (no earlier row), or a change that became a dead
    letter. Its row is read again from the source
    (:func:`processor.reconcile.envelopes.debezium_upsert`); meanwhile it orders changes
    and chunk rows as a change does, and its ``value`` is only the row last emitted (the
    next output's retraction), never one to fill unchanged TOAST values from.
    """

    version: Version
    value: bytes | None
    txid: int | None = None
    chunk: int | None = None
    snapshot: PgSnapshot | None = None
    pending: bool = False

    def encode(self) -> bytes:
        """Bytes for the store: format, version, flags, the optional parts, the value."""
        flags = _PRESENT if self.value is not None else 0
        if self.pending:
            flags |= _PENDING_FLAG
        optional = b""
        if self.txid is not None:
            flags |= _TXID_FLAG
            optional = TXID.pack(self.txid)
        if self.snapshot is not None:
            flags |= _SNAPSHOT_FLAG | (_POSITIONS_FLAG if self.snapshot.positioned else 0)
            optional += _CHUNK.pack(self.chunk or 0) + self.snapshot.encode()
        elif self.chunk is not None:
            flags |= _CHUNK_FLAG
            optional += _CHUNK.pack(self.chunk)
        head = HEAD.pack(FORMAT, self.version[0], self.version[1], flags)
        return head + optional + (self.value or b"")

    @staticmethod
    def encode_row(version: Version, value: bytes | None) -> bytes:
        """``Entry(version, value).encode()`` without making the entry (a hot path's)."""
        if value is None:
            return HEAD.pack(FORMAT, version[0], version[1], 0)
        return HEAD.pack(FORMAT, version[0], version[1], _PRESENT) + value

    @staticmethod
    def encode_change(version: Version, value: bytes | None, txid: int) -> bytes:
        """``Entry(version, value, txid).encode()`` without making the entry."""
        if value is None:
            return _CHANGE_HEAD.pack(FORMAT, version[0], version[1], _TXID_FLAG, txid)
        return _CHANGE_HEAD.pack(FORMAT, version[0], version[1], _PRESENT_TXID, txid) + value

    @staticmethod
    def decode(raw: bytes) -> Entry:
        """Inverse of :meth:`encode` (:class:`StateFormatError` for another format)."""
        if raw[:1] != FORMAT_BYTE or len(raw) < HEAD.size:
            raise StateFormatError(unknown_format(raw))
        _format, major, minor, flags = HEAD.unpack_from(raw)
        if flags < _TXID_FLAG:  # the common case: a version and a value
            return Entry((major, minor), raw[HEAD.size :] if flags else None)
        offset = HEAD.size
        txid = chunk = snapshot = None
        try:
            if flags & _TXID_FLAG:
                txid = TXID.unpack_from(raw, offset)[0]
                offset += TXID.size
            if flags & _SNAPSHOT_FLAG:
                chunk = _CHUNK.unpack_from(raw, offset)[0]
                positioned = bool(flags & _POSITIONS_FLAG)
                snapshot, offset = PgSnapshot.decode(raw, offset + _CHUNK.size, positioned)
            elif flags & _CHUNK_FLAG:
                chunk = _CHUNK.unpack_from(raw, offset)[0]
                offset += _CHUNK.size
        except (struct.error, ValueError) as exc:  # a changelog record copied as it came
            raise StateFormatError(
                f"a state entry of {len(raw)} bytes, too short for its flags {flags}: "
                f"damaged ({exc})"
            ) from None
        value = raw[offset:] if flags & _PRESENT else None
        return Entry((major, minor), value, txid, chunk, snapshot, bool(flags & _PENDING_FLAG))
