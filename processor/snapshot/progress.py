"""The incremental-snapshot queue and its progress, as pure transitions and their JSON form.

The coordinator (:mod:`processor.snapshot.coordinator`) keeps one :class:`SnapshotState`
per pipeline: the tables to backfill in the order they were asked for, how far
each has got, whether reading is paused, the next chunk number and how far the
signal channels have been read. Signals and chunk results change it only
through the methods here, which return the notifications to publish; so the
queue's rules are testable without Kafka or a database.

The state is written as one JSON document (:meth:`SnapshotState.to_json`) to
the pipeline's compacted progress topic after every change. Its
``incremental_snapshot_*`` fields carry Debezium's names (DDD-4) with keys as
JSON arrays; ``tables`` holds the whole record, which is what is read back
(:mod:`processor.snapshot.progress_record`, which checks every field).

A table's key range is read in :class:`KeyRange` parts, ``(after, upto]``,
planned in key order and handed to reader processes, several at once when
``snapshot.readers`` allows; each part gets a chunk number when a reader takes
it and its row count when its rows are in Kafka. Parts may finish in any
order; ``last_key`` (DDD-4's ``incremental_snapshot_primary_key``) moves to the
end of every finished part that has no unfinished part below it, so every key
at or below it has been read.

Guarantees: a table's ``last_key`` only moves forward and only over parts whose
rows are in Kafka, so a restart continues after the last contiguous written
part (I4) and reads the parts above it again; chunk numbers never repeat, even
when a part is read again after a crash (:meth:`SnapshotState.resumed` skips
the number a lost chunk may have used).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from processor.snapshot.signals import (
    MAX_KEYS,
    MAX_TABLES,
    ExecuteSnapshot,
    PauseSnapshot,
    ResumeSnapshot,
    Signal,
    StopSnapshot,
)
from tidemark.core.config import MIN_RECORD_BYTES

FORMAT_VERSION = 1
#: The key of the progress record in the compacted progress topic.
PROGRESS_KEY = b"state"
AGGREGATE_TYPE = "Incremental Snapshot"
#: Finished tables kept for ``status`` (the oldest are forgotten first).
HISTORY = 50
#: Tables queued or being read at once, over every request: with the bounds of one
#: signal (:mod:`processor.snapshot.signals`) the progress record stays a few MB at most.
MAX_QUEUED_TABLES = 2 * MAX_TABLES
#: The most bytes the progress record may hold: three quarters of the least record every
#: topic Tidemark makes takes (``kafka.max_record_bytes`` is at least ``MIN_RECORD_BYTES``),
#: which a full queue of the longest filters fits. A request that would pass it is
#: refused; read-again requests hold up to 1 MB of keys each, asked for again later.
RECORD_LIMIT = MIN_RECORD_BYTES * 3 // 4

QUEUED, RUNNING, COMPLETED, ABORTED = "queued", "running", "completed", "aborted"
#: Read whole, its rows in Kafka: completed once the data plane has read past them.
DELIVERING = "delivering"
#: Tables to read, or being read.
PENDING = (QUEUED, RUNNING)
#: Tables whose request is not done: read, or not yet passed by the data plane.
UNFINISHED = (QUEUED, RUNNING, DELIVERING)
STATUSES = (QUEUED, RUNNING, DELIVERING, COMPLETED, ABORTED)


@dataclass
class KeyRange:
    """A part of a table's key range, ``after < key <= upto``, for one reader."""

    after: list[Any] | None
    upto: list[Any]
    #: The chunk number of its read; 0 while it waits for a reader.
    chunk: int = 0
    #: Rows written, once its rows are in Kafka.
    rows: int | None = None
    seconds: float = 0.0


@dataclass
class TableProgress:
    """One table of one snapshot request."""

    table: str
    request_id: str
    condition: str | None = None
    surrogate_key: str | None = None
    #: Only these keys (a ``keys`` request): they become its ``condition`` when its read
    #: begins. Such a request is the data plane's (rows it must read again): a stop
    #: signal does not stop it.
    keys: list[dict[str, Any]] | None = None
    status: str = QUEUED
    rows: int = 0
    chunks: int = 0
    #: Rows the table held when its snapshot began (PostgreSQL's estimate).
    estimated_rows: int | None = None
    #: Every key up to ``last_key`` is read; ``maximum_key``: the largest key when the
    #: table's snapshot began (JSON arrays).
    last_key: list[Any] | None = None
    maximum_key: list[Any] | None = None
    #: Parts above ``last_key`` planned, being read or read, in key order.
    ranges: list[KeyRange] = field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None
    #: Seconds spent reading and writing chunks (not paused time): the rate's base.
    busy_seconds: float = 0.0
    error: str | None = None
    #: Why the table waits (the source cannot be reached), while it does.
    waiting: str | None = None
    #: Where the table's backfill topic ended as its read began, and (while
    #: ``delivering``) where it ended once its rows were all in it: the offsets, by
    #: partition number as text, between which its rows are (``None`` until read).
    deliver_from: dict[str, int] | None = None
    deliver_upto: dict[str, int] | None = None

    @property
    def percent(self) -> float | None:
        """Share of the table read, 0 to 100 (``None`` before the estimate is known)."""
        if self.status in (COMPLETED, DELIVERING):
            return 100.0
        if not self.estimated_rows:
            return None
        return min(99.9, 100.0 * self.rows / self.estimated_rows)

    @property
    def cursor(self) -> list[Any] | None:
        """The end of the planned parts: the next part starts after it."""
        return self.ranges[-1].upto if self.ranges else self.last_key

    @property
    def planned(self) -> bool:
        """Whether parts cover the whole key range (nothing more to plan)."""
        return self.maximum_key is not None and self.cursor == self.maximum_key

    @property
    def seconds_left(self) -> float | None:
        """Estimated time to finish at the rate so far."""
        if self.status != RUNNING or not self.estimated_rows or not self.rows:
            return None
        rate = self.rows / max(self.busy_seconds, 1e-6)
        return max(0.0, (self.estimated_rows - self.rows) / rate)


@dataclass
class Notification:
    """An event for the notifications topic, in Debezium's notification format."""

    type: str
    request_id: str
    additional_data: dict[str, str]
    timestamp: int
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def to_json(self, pipeline: str) -> bytes:
        data = {"connector_name": pipeline, "request_id": self.request_id}
        data.update(self.additional_data)
        return orjson.dumps(
            {
                "id": self.id,
                "aggregate_type": AGGREGATE_TYPE,
                "type": self.type,
                "additional_data": data,
                "timestamp": self.timestamp,
            }
        )


@dataclass
class SnapshotState:
    """The queue of tables, their progress and the positions of the signal channels."""

    tables: list[TableProgress] = field(default_factory=list)
    paused: bool = False
    #: The last chunk number used; the next chunk gets a larger one.
    chunk_sequence: int = 0
    #: Next offset to read per signal topic and partition.
    signal_offsets: dict[str, dict[int, int]] = field(default_factory=dict)

    # -- reading the queue -----------------------------------------------------

    def current(self) -> TableProgress | None:
        """The table being read, or the next one to read."""
        return next((t for t in self.tables if t.status in PENDING), None)

    def pending(self) -> list[TableProgress]:
        return [t for t in self.tables if t.status in PENDING]

    def delivering_tables(self) -> list[TableProgress]:
        """Tables read whole whose rows the data plane has not yet passed."""
        return [t for t in self.tables if t.status == DELIVERING]

    # -- transitions -------------------------------------------------------------

    def resumed(self) -> SnapshotState:
        """The state as a new leader takes it over: the parts above each ``last_key`` are read
        again, and the number a lost chunk may have used is skipped."""
        self.chunk_sequence += 1
        for entry in self.tables:
            entry.ranges.clear()
        return self

    def apply(self, signal: Signal, now: float) -> list[Notification]:
        """Act on a signal; the notifications it causes."""
        ms = int(now * 1000)
        if isinstance(signal, ExecuteSnapshot):
            added = self._add_keys(signal.tables[0], signal.keys) if signal.keys else None
            if added is not None:
                entry, before = added
                if self._fits():
                    return []
                assert entry.keys is not None
                del entry.keys[before:]
                return [self._too_large(signal, ms)]
            collections = ",".join(signal.tables)
            # Tables delivering count: their rows wait for the data plane (a long pause).
            held = sum(t.status in UNFINISHED for t in self.tables)
            if held + len(signal.tables) > MAX_QUEUED_TABLES:
                error = (
                    f"the snapshot queue holds at most {MAX_QUEUED_TABLES} tables; "
                    f"{held} are queued or delivering: signal again once some are done"
                )
                data = {"data_collections": collections, "error": error}
                return [Notification("ABORTED", signal.request_id, data, ms)]
            queued = len(self.tables)
            for table in signal.tables:  # each request reads its tables, queued after the rest
                self.tables.append(
                    TableProgress(
                        table,
                        signal.request_id,
                        signal.conditions.get(table),
                        signal.surrogate_key,
                        list(signal.keys) or None,
                    )
                )
            if not self._fits():
                del self.tables[queued:]
                return [self._too_large(signal, ms)]
            return [
                Notification("STARTED", signal.request_id, {"data_collections": collections}, ms)
            ]
        if isinstance(signal, StopSnapshot):
            stopped = [
                t
                for t in self.pending()
                if t.keys is None and (not signal.tables or t.table in signal.tables)
            ]
            notes = []
            for entry in stopped:
                entry.status, entry.finished_at, entry.error = ABORTED, now, "stopped by signal"
                _finished(entry)
                notes.append(
                    Notification(
                        "ABORTED",
                        signal.request_id,
                        {"data_collections": entry.table, "aborted_request_id": entry.request_id},
                        ms,
                    )
                )
            for request_id in dict.fromkeys(t.request_id for t in stopped):
                notes += self._request_finished(request_id, ms)
            return notes
        if isinstance(signal, PauseSnapshot):
            was, self.paused = self.paused, True
            return [] if was else [Notification("PAUSED", signal.request_id, {}, ms)]
        assert isinstance(signal, ResumeSnapshot)
        was, self.paused = self.paused, False
        return [Notification("RESUMED", signal.request_id, {}, ms)] if was else []

    def _add_keys(
        self, table: str, keys: tuple[dict[str, Any], ...]
    ) -> tuple[TableProgress, int] | None:
        """Add ``keys`` to a queued ``keys`` request of ``table`` that has room for them
        (so that asking for rows again does not fill the queue): that request and how many
        keys it had, if one had room."""
        for entry in self.pending():
            if entry.table == table and entry.status == QUEUED and entry.keys is not None:
                known = {orjson.dumps(k) for k in entry.keys}
                new = [k for k in keys if orjson.dumps(k) not in known]
                if len(entry.keys) + len(new) <= MAX_KEYS:
                    before = len(entry.keys)
                    entry.keys.extend(new)
                    return entry, before
        return None

    def _fits(self) -> bool:
        """Whether the progress record is within :data:`RECORD_LIMIT`."""
        return len(self.to_json()) <= RECORD_LIMIT

    def _too_large(self, signal: ExecuteSnapshot, ms: int) -> Notification:
        """The refusal of a request that would take the progress record past its bound."""
        error = (
            f"the snapshot progress record would pass {RECORD_LIMIT} bytes: signal again "
            "once some of the queue is done (keys asked for again are, by the data plane)"
        )
        data = {"data_collections": ",".join(signal.tables), "error": error}
        return Notification("ABORTED", signal.request_id, data, ms)

    def begin(
        self,
        entry: TableProgress,
        maximum_key: list[Any] | None,
        estimated_rows: int,
        now: float,
        starts: dict[int, int] | None = None,
    ) -> None:
        """Start reading ``entry``'s table: its key range is fixed from here on (``starts``:
        where its backfill topic ends now, before its first row)."""
        entry.status, entry.started_at = RUNNING, now
        entry.maximum_key, entry.estimated_rows = maximum_key, estimated_rows
        entry.deliver_from = None if starts is None else _by_text(starts)

    def plan(self, entry: TableProgress, upto: list[Any]) -> KeyRange:
        """Add the part from the cursor to ``upto`` (the maximum key for the last part)."""
        part = KeyRange(entry.cursor, upto)
        entry.ranges.append(part)
        return part

    def waiting(self, entry: TableProgress) -> KeyRange | None:
        """A planned part no reader has (never taken, or its read failed)."""
        return next((r for r in entry.ranges if r.chunk == 0 and r.rows is None), None)

    def take(self, part: KeyRange) -> int:
        """A reader takes ``part``: its chunk number, never used before."""
        self.chunk_sequence += 1
        part.chunk = self.chunk_sequence
        return part.chunk

    def failed(self, entry: TableProgress, chunk: int) -> None:
        """The read of chunk ``chunk`` failed: its part waits for a reader again."""
        for part in entry.ranges:
            if part.chunk == chunk and part.rows is None:
                part.chunk = 0

    def written(
        self, entry: TableProgress, chunk: int, rows: int, seconds: float, now: float
    ) -> list[Notification]:
        """Chunk ``chunk``'s rows are in Kafka: move ``last_key`` over every finished part
        with none unfinished below it, and finish the table at its maximum key."""
        part = next((r for r in entry.ranges if r.chunk == chunk and r.rows is None), None)
        if entry.status != RUNNING or part is None:
            return []  # a read the table no longer waits for (stopped, or taken over)
        part.rows, part.seconds = rows, seconds
        ms = int(now * 1000)
        notes = []
        while entry.ranges and entry.ranges[0].rows is not None:
            done = entry.ranges.pop(0)
            entry.last_key = done.upto
            entry.rows += done.rows or 0
            entry.chunks += 1
            entry.busy_seconds += done.seconds
            notes.append(
                Notification(
                    "IN_PROGRESS",
                    entry.request_id,
                    {
                        "data_collections": entry.table,
                        "current_collection_in_progress": entry.table,
                        "maximum_key": _text(entry.maximum_key),
                        "last_processed_key": _text(entry.last_key),
                    },
                    ms,
                )
            )
        if not entry.ranges and entry.last_key == entry.maximum_key:
            notes += self.scanned(entry, now)
        return notes

    def scanned(self, entry: TableProgress, now: float) -> list[Notification]:
        """``entry``'s table is read to its end (or was empty): its rows are in Kafka, and
        it is delivering until the data plane has read past them (:meth:`delivered`)."""
        entry.status, entry.finished_at, entry.deliver_upto = DELIVERING, now, None
        _finished(entry)
        ms = int(now * 1000)
        notes = [
            Notification(
                "TABLE_SCAN_COMPLETED",
                entry.request_id,
                {
                    "data_collection": entry.table,
                    "scanned_collection": entry.table,
                    "total_rows_scanned": str(entry.rows),
                    "status": "SUCCEEDED",
                },
                ms,
            )
        ]
        return notes

    def delivering(self, entry: TableProgress, upto: dict[int, int]) -> None:
        """The offsets of ``entry``'s backfill topic the data plane must pass: where the
        topic ends once every chunk row of the table is in it."""
        entry.deliver_upto = _by_text(upto)

    def delivered(self, entry: TableProgress, now: float) -> list[Notification]:
        """The data plane has read past ``entry``'s rows: the table is completed."""
        if entry.status != DELIVERING:
            return []
        entry.status, entry.finished_at = COMPLETED, now
        entry.deliver_from = entry.deliver_upto = None
        return self._request_finished(entry.request_id, int(now * 1000))

    def abort(self, entry: TableProgress, error: str, now: float) -> list[Notification]:
        """Give up ``entry``'s table (it cannot be read); the queue goes on."""
        entry.status, entry.finished_at, entry.error = ABORTED, now, error
        _finished(entry)
        ms = int(now * 1000)
        notes = [
            Notification(
                "ABORTED",
                entry.request_id,
                {"data_collections": entry.table, "error": error},
                ms,
            )
        ]
        return notes + self._request_finished(entry.request_id, ms)

    def _request_finished(self, request_id: str, ms: int) -> list[Notification]:
        """``COMPLETED`` ends every request, once each of its tables completed or was aborted."""
        mine = [t for t in self.tables if t.request_id == request_id]
        if any(t.status in UNFINISHED for t in mine):
            return []
        self._forget_old()
        collections = ",".join(t.table for t in mine)
        return [Notification("COMPLETED", request_id, {"data_collections": collections}, ms)]

    def _forget_old(self) -> None:
        finished = [t for t in self.tables if t.status not in UNFINISHED]
        for old in finished[: max(0, len(finished) - HISTORY)]:
            self.tables.remove(old)

    # -- JSON ----------------------------------------------------------------------

    def to_json(self) -> bytes:
        """The progress record: DDD-4's fields for the queue, then the whole state."""
        current = self.current()
        return orjson.dumps(
            {
                "format": FORMAT_VERSION,
                "incremental_snapshot_collections": [
                    {
                        "incremental_snapshot_collections_id": t.table,
                        "incremental_snapshot_collections_additional_condition": t.condition,
                        "incremental_snapshot_collection_surrogate_key": t.surrogate_key,
                    }
                    for t in self.pending()
                ],
                "incremental_snapshot_primary_key": current.last_key if current else None,
                "incremental_snapshot_maximum_key": current.maximum_key if current else None,
                "paused": self.paused,
                "chunk_sequence": self.chunk_sequence,
                "signal_offsets": {
                    topic: {str(p): o for p, o in offsets.items()}
                    for topic, offsets in self.signal_offsets.items()
                },
                "tables": [dataclasses.asdict(t) for t in self.tables],
            }
        )


def _by_text(offsets: dict[int, int]) -> dict[str, int]:
    """Offsets by partition as JSON keeps them: the partition's number as text."""
    return {str(p): o for p, o in sorted(offsets.items())}


def _finished(entry: TableProgress) -> None:
    """A finished ``keys`` request keeps no keys, nor the filter made of them: the history
    of finished requests would otherwise hold megabytes of them."""
    if entry.keys is not None:
        entry.keys, entry.condition = [], None


def key_to_json(key: tuple[Any, ...] | None) -> list[Any] | None:
    """A key read from the source as a JSON array that :func:`key_from_json` turns back
    into query parameters: numbers and text as they are, ``bytea`` as ``\\x`` hex, other
    values (timestamps, decimals, UUIDs) as their text, which PostgreSQL casts back."""
    if key is None:
        return None
    out: list[Any] = []
    for value in key:
        if value is None or isinstance(value, bool | int | str):
            out.append(value)
        elif isinstance(value, bytes | bytearray | memoryview):
            out.append("\\x" + bytes(value).hex())
        else:
            out.append(str(value))
    return out


def key_from_json(key: list[Any] | None) -> tuple[Any, ...] | None:
    """Query parameters of a key written by :func:`key_to_json`."""
    return None if key is None else tuple(key)


def _text(key: list[Any] | None) -> str:
    return "" if key is None else orjson.dumps(key).decode()
