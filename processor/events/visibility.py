"""What a chunk row saw: a PostgreSQL snapshot (read-only mode) or a signal-table window.

Read-only mode (:class:`PgSnapshot`), exact:

A chunk of an incremental snapshot is read in a ``REPEATABLE READ`` transaction
whose first statement takes ``pg_current_snapshot()``: ``xmin:xmax:xip``, 64-bit
transaction ids (``xid8``, never wrapping). A change committed by transaction
``t`` is visible in that snapshot, that is already in the chunk's rows, iff
``t < xmin``, or ``t < xmax`` and ``t`` is not in ``xip`` (docs/concepts/versions.md).

Debezium reports ``source.txId`` as PostgreSQL's 32-bit ``xid``. Alone, it is extended
to 64 bits by taking the value congruent to it modulo 2^32 that lies within 2^31 of the
snapshot's ``xmax``: right for a change of about the snapshot's time, wrong for one 2^31
transactions or more away (a few days of a busy database), which a snapshot kept in state
for a backfilled key meets sooner or later. So a snapshot also carries the WAL insert
positions read just before it was taken (``before``) and just after (``after``), and a
change's own WAL position (its LSN) places it first (:meth:`PgSnapshot.visible`):

- a change written at or after ``after`` committed after the snapshot: not visible;
- a change written before ``before`` belongs to a transaction that had its id before the
  snapshot was taken, so its id lies below the next id to assign then: visible unless it
  is one of ``xip`` or at or above ``xmax``;
- a change written between the two is of the snapshot's time: its extended id decides.

The 32-bit id is then only ever extended near its own time. Snapshots read before the
positions were recorded (state or records of an earlier version) have none and keep the
extension alone.

PostgreSQL's ``xmax`` is not the next id to assign, as its manual says, but the newest
*completed* id plus one: a transaction that holds a newer id and has not ended is in no
``xip``. So the reader also reads the next id (:meth:`PgSnapshot.with_next_xid`) and
raises ``xmax`` to it, listing the ids between as in progress, which they were: the same
visibility, and an ``xmax`` above every id assigned before the snapshot, as the second
rule needs.

Signal-table mode (:class:`Window`, DDD-3's watermarks), for sources without
such snapshots: the chunk was read after its window-open row committed and
before its window-close row did, so it contains no change above ``high``, a
change between ``low`` and ``high`` may or may not be in it, and a change below
``low`` is in it, with one exception. PostgreSQL writes a transaction's commit
record before it makes the transaction visible, so a transaction caught between
the two when the open row commits sits below ``low`` in the change stream yet
is missing from the chunk. Where the source has snapshots (PostgreSQL), the
window therefore also carries the chunk's own, which settles that case.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from processor.errors import SnapshotFormatError

_EPOCH = 1 << 32
_HALF = 1 << 31
#: Transaction ids are unsigned 64-bit (``xid8``); positions and offsets signed 64-bit.
_XID8_END = 1 << 64
_INT64 = 1 << 63
#: Ids at or above a snapshot's ``xmax`` that :meth:`PgSnapshot.with_next_xid` lists in
#: ``xip`` at most (each takes 8 bytes in the state entry of every row of the chunk).
NEWER_OPEN_IDS = 64
_HEAD = struct.Struct(">QQI")
_XID = struct.Struct(">Q")
_POSITIONS = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class PgSnapshot:
    """A PostgreSQL MVCC snapshot: ``xmin``, ``xmax`` and the in-progress ``xip``; and the
    WAL insert positions read just before and just after it was taken, where known."""

    xmin: int
    xmax: int
    xip: frozenset[int] = frozenset()
    before: int | None = None
    after: int | None = None

    @staticmethod
    def parse(text: str) -> PgSnapshot:
        """From ``pg_current_snapshot()``'s text form ``xmin:xmax:xip1,xip2``, optionally
        followed by the positions, ``@before:after`` (:meth:`__str__`)."""
        try:
            snapshot_text, at, positions = text.strip().partition("@")
            xmin, xmax, xip = snapshot_text.split(":")
            ids = frozenset(int(x) for x in xip.split(",") if x)
            before = after = None
            if at:
                first, second = positions.split(":")
                before, after = int(first), int(second)
            snapshot = PgSnapshot(int(xmin), int(xmax), ids, before, after)
        except ValueError:
            raise SnapshotFormatError(f"not a pg_snapshot: {text!r}") from None
        if (
            not 0 <= snapshot.xmin <= snapshot.xmax < _XID8_END
            or any(not snapshot.xmin <= x < snapshot.xmax for x in snapshot.xip)
            or (at and not 0 <= (before or 0) <= (after or 0) < _INT64)
        ):
            raise SnapshotFormatError(f"inconsistent pg_snapshot: {text!r}")
        return snapshot

    def extend(self, xid32: int) -> int:
        """The 64-bit id of a 32-bit ``xid`` seen while this snapshot was current."""
        candidate = (self.xmax & ~(_EPOCH - 1)) | (xid32 & (_EPOCH - 1))
        if candidate > self.xmax + _HALF:
            candidate -= _EPOCH
        elif candidate < self.xmax - _HALF:
            candidate += _EPOCH
        return candidate

    def with_next_xid(self, next_xid: int) -> PgSnapshot:
        """This snapshot with ``xmax`` raised to ``next_xid``, the next transaction id to
        assign, read after it was taken: the ids from ``xmax`` up, none of which had
        completed, listed in ``xip``. Every id keeps its visibility, and every id assigned
        before the snapshot lies below the new ``xmax``. More than :data:`NEWER_OPEN_IDS`
        such ids (a transaction with many subtransactions, alone on the source) would make
        every row's state entry long: the positions are then left out, and changes are
        placed by the extension of their id alone, exact within 2^31 ids of the snapshot."""
        if next_xid <= self.xmax:
            return self
        if next_xid - self.xmax > NEWER_OPEN_IDS:
            return PgSnapshot(self.xmin, self.xmax, self.xip)
        opened = frozenset(range(self.xmax, next_xid))
        return PgSnapshot(self.xmin, next_xid, self.xip | opened, self.before, self.after)

    def visible(self, xid32: int, lsn: int | None = None) -> bool:
        """Whether the change of transaction ``xid32`` (Debezium's ``txId``), written at WAL
        position ``lsn`` where known, committed before this snapshot."""
        if lsn is not None and self.after is not None:
            if lsn >= self.after:
                return False  # written after the snapshot: committed after it too
            if self.before is not None and lsn < self.before:
                # Its id was assigned before the snapshot: below xmax (with_next_xid).
                xid = self.xmax - 1 - ((self.xmax - 1 - xid32) & (_EPOCH - 1))
                return xid < self.xmin or xid not in self.xip
        xid = self.extend(xid32)
        return xid < self.xmin or (xid < self.xmax and xid not in self.xip)

    @property
    def positioned(self) -> bool:
        """Whether the WAL positions around the snapshot are known."""
        return self.before is not None and self.after is not None

    def encode(self) -> bytes:
        """Bytes for state: ``xmin``, ``xmax``, the count of ``xip``, each ``xip``, then
        ``before`` and ``after`` where :attr:`positioned` (the entry's flags say which).

        Every row of a chunk stores its chunk's snapshot, so the bytes are cached (and
        the last snapshot's by identity: hashing a dataclass costs more than a row's rule).
        """
        last, encoded = _LAST_ENCODED
        if last is self:
            return encoded
        encoded = _ENCODED.get(self)
        if encoded is None:
            ids = sorted(self.xip)
            encoded = _HEAD.pack(self.xmin, self.xmax, len(ids)) + b"".join(
                _XID.pack(x) for x in ids
            )
            if self.positioned:
                encoded += _POSITIONS.pack(self.before, self.after)
            _remember(_ENCODED, self, encoded)
        _LAST_ENCODED[:] = [self, encoded]
        return encoded

    @staticmethod
    def decode(raw: bytes, offset: int = 0, positioned: bool = False) -> tuple[PgSnapshot, int]:
        """A snapshot from :meth:`encode`'s bytes at ``offset`` (``positioned``: with its
        positions); and the offset after it."""
        count = _HEAD.unpack_from(raw, offset)[2]
        end = offset + _HEAD.size + count * _XID.size + (_POSITIONS.size if positioned else 0)
        encoded = raw[offset:end]
        snapshot = _DECODED.get(encoded)
        if snapshot is None:
            xmin, xmax, _count = _HEAD.unpack_from(encoded)
            ids = frozenset(
                _XID.unpack_from(encoded, _HEAD.size + i * _XID.size)[0] for i in range(count)
            )
            before = after = None
            if positioned:
                before, after = _POSITIONS.unpack_from(encoded, len(encoded) - _POSITIONS.size)
            snapshot = PgSnapshot(xmin, xmax, ids, before, after)
            _remember(_DECODED, encoded, snapshot)
        return snapshot, end

    def __str__(self) -> str:
        text = f"{self.xmin}:{self.xmax}:{','.join(map(str, sorted(self.xip)))}"
        if self.before is None or self.after is None:
            return text
        return f"{text}@{self.before}:{self.after}"


@dataclass(frozen=True, slots=True)
class Window:
    """A chunk's signal-table window and where each change-topic partition passes it.

    ``low`` and ``high`` are the positions (:func:`processor.events.change.source_version`)
    of the window-open and window-close rows in the change stream. ``ends[p]`` is
    the end offset of the change topic's partition ``p`` once Debezium had
    confirmed the close row: every change below ``high`` lies below it, so a
    partition whose state reflects its input up to ``ends[p]`` has seen all of
    them, even if it is idle (the idle-partition rule of docs/concepts/versions.md). ``snapshot`` is
    the snapshot the chunk was read in, where the source has one.
    """

    low: tuple[int, int]
    high: tuple[int, int]
    ends: tuple[int, ...]
    snapshot: PgSnapshot | None = None

    def __str__(self) -> str:
        bounds = (*self.low, *self.high)
        text = f"{','.join(map(str, bounds))};{','.join(map(str, self.ends))}"
        return text if self.snapshot is None else f"{text};{self.snapshot}"

    @staticmethod
    def parse(text: str) -> Window:
        """From :meth:`__str__`'s form ``low0,low1,high0,high1;end0,end1,...[;pg_snapshot]``."""
        try:
            bounds, ends, *rest = text.split(";")
            l0, l1, h0, h1 = (int(x) for x in bounds.split(","))
            offsets = tuple(int(x) for x in ends.split(",") if x)
            if len(rest) > 1:
                raise ValueError(text)
            snapshot = PgSnapshot.parse(rest[0]) if rest else None
        except (ValueError, SnapshotFormatError):
            raise SnapshotFormatError(f"not a signal-table window: {text!r}") from None
        window = Window((l0, l1), (h0, h1), offsets, snapshot)
        numbers = (*window.low, *window.high, *window.ends)
        if (
            not window.low < window.high
            or not window.ends
            or min(window.ends) < 0
            or not all(-_INT64 <= n < _INT64 for n in numbers)
        ):
            raise SnapshotFormatError(f"inconsistent signal-table window: {text!r}")
        return window


_ENCODED: dict[PgSnapshot, bytes] = {}
_LAST_ENCODED: list[Any] = [None, b""]
_DECODED: dict[bytes, PgSnapshot] = {}
_CACHED = 256


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _CACHED:
        cache.clear()
    cache[key] = value
