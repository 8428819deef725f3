"""Window buffers: chunk rows of a signal-table window that wait for their partition to pass it.

A chunk row read inside a signal-table window ``(L, H)`` can be decided only
once its input partition has seen every change below ``H``
(:func:`processor.reconcile.versions.decide_row`). The coordinator writes a window's rows
only after Debezium confirmed ``H``, with each change-topic partition's end
offset at that moment (:class:`processor.events.visibility.Window`), so a data plane
that keeps up decides them on arrival. One that lags keeps them here, in the
state of the partition that owns them, under ``WINDOW_BUFFER + key``: one row
per key, a later chunk's replacing an earlier one's (the rules would let it win
anyway). Once the partition's state reflects its input up to a row's end
offset, the row is released and decided as if it arrived then; a change of the
key inside the window, applied meanwhile, makes the rule drop it, which is
DDD-3's "a buffered row is dropped when its key changes inside the window".
Nothing here depends on which of the two topics Kafka delivered first.

Guarantee: buffered rows are state like any other, written and removed by the
commit protocol with the batch that holds or releases them (RocksDB and the
changelog), so a crash while rows wait, or while they are being released,
replays at most that batch and loses none.

Memory: a lagging partition may buffer a whole table. Each row has an entry
``WINDOW_DUE + end + key``, so the rows due are found in order without reading
the others, and a batch releases at most a page of them (``PAGE_ROWS`` rows,
``PAGE_BYTES`` bytes); the rest go in the next batches. Rows buffered by a
version without these entries are indexed a page per batch first
(``WINDOW_INDEXED`` marks a partition whose rows all have one).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from processor import metrics
from processor.events.chunk_tag import ChunkTag
from processor.events.visibility import Window
from processor.reconcile.envelopes import WINDOW_BUFFER, WINDOW_DUE, WINDOW_INDEXED
from state.batch import BatchState
from state.store import PartitionStore
from tidemark.core.messages import RawMessage
from tidemark.core.topics import backfill_topic

TopicPartitionKey = tuple[str, int]
#: How far an input partition's state reflects its input: the next offset it has not seen.
Reached = Callable[[TopicPartitionKey], int]

_HEAD = struct.Struct(">qqHI")  # offset, chunk, window text length, key length
_END = struct.Struct(">Q")
#: Rows released (or indexed) per partition and batch, and their bytes at most.
PAGE_ROWS = 5_000
PAGE_BYTES = 64 << 20


def encode(raw: RawMessage) -> bytes:
    """A buffered backfill record: where it came from, its chunk and window, key and value."""
    assert raw.chunk is not None and isinstance(raw.chunk.read_in, Window)
    window = str(raw.chunk.read_in).encode()
    key, value = raw.key or b"", raw.value or b""
    return _HEAD.pack(raw.offset, raw.chunk.number, len(window), len(key)) + window + key + value


def decode(topic: str, partition: int, stored: bytes) -> RawMessage:
    """The record :func:`encode` buffered, as it was read from ``topic``'s ``partition``."""
    offset, chunk, window_size, key_size = _HEAD.unpack_from(stored)
    at = _HEAD.size
    window = Window.parse(stored[at : at + window_size].decode())
    at += window_size
    key = stored[at : at + key_size]
    tag = ChunkTag(chunk, window, "")
    return RawMessage(topic, partition, offset, key, stored[at + key_size :], tag)


def end_of(raw: RawMessage) -> int:
    """The input offset that ``raw``'s partition must reach before ``raw`` is decided."""
    assert raw.chunk is not None and isinstance(raw.chunk.read_in, Window)
    return raw.chunk.read_in.ends[raw.partition]


class WindowBuffers:
    """Which input partitions hold buffered rows, how many, and the earliest end among them.

    The index is rebuilt from a partition's store the first time the partition is
    seen (:meth:`load`), so rows buffered before a restart or on another instance
    are released too.
    """

    def __init__(self, pipeline: str) -> None:
        self._pipeline = pipeline
        #: Per input partition with buffered rows: (smallest end offset, row count).
        self._pending: dict[TopicPartitionKey, tuple[int, int]] = {}
        self._loaded: set[TopicPartitionKey] = set()
        #: Partitions whose rows lack due entries: the last row indexed so far.
        self._unindexed: dict[TopicPartitionKey, bytes | None] = {}

    def load(self, tp: TopicPartitionKey, store: PartitionStore) -> None:
        """Index ``tp``'s buffered rows (once per assignment), reading keys a page at a time."""
        if tp in self._loaded:
            return
        self._loaded.add(tp)
        count, after = 0, None
        while page := store.keys(WINDOW_BUFFER, after=after, limit=PAGE_ROWS):
            count, after = count + len(page), page[-1]
        if not count:
            return
        if store.get(WINDOW_INDEXED) is None:
            self._unindexed[tp] = None
            self._set(tp, 0, count)  # due at once: indexing is part of releasing
        else:
            self._set(tp, _first_end(store.keys(WINDOW_DUE, limit=1)), count)

    def forget(self, tp: TopicPartitionKey) -> None:
        """``tp`` left this instance."""
        self._loaded.discard(tp)
        self._unindexed.pop(tp, None)
        self._drop(tp)

    def pending(self) -> list[TopicPartitionKey]:
        """The input partitions that hold buffered rows."""
        return list(self._pending)

    def count(self, topic: str) -> int:
        """Rows buffered for the input topic ``topic`` on this instance."""
        return sum(n for (t, _p), (_end, n) in self._pending.items() if t == topic)

    def hold(self, tp: TopicPartitionKey, state: BatchState, key: bytes, raw: RawMessage) -> None:
        """Buffer ``raw`` (whose change has the state key ``key``) in ``tp``'s state."""
        assert raw.chunk is not None
        slot = WINDOW_BUFFER + key
        held = state.get(slot)
        if held is not None:
            if _HEAD.unpack_from(held)[1] > raw.chunk.number:
                return  # a later chunk's row of this key waits already
            state.put(_due(end_of(self._decode(tp, held)), key), None)
        elif tp not in self._unindexed and state.get(WINDOW_INDEXED) is None:
            state.put(WINDOW_INDEXED, b"")
        end = end_of(raw)
        state.put(slot, encode(raw))
        state.put(_due(end, key), b"")
        first, count = self._pending.get(tp, (end, 0))
        self._set(tp, min(first, end), count + (held is None))

    def due(self, tp: TopicPartitionKey, reached: int) -> bool:
        """Whether ``tp``, whose state reflects its input below ``reached``, releases rows."""
        pending = self._pending.get(tp)
        return pending is not None and pending[0] <= reached

    def release(self, tp: TopicPartitionKey, state: BatchState, reached: int) -> list[RawMessage]:
        """Take a page of the rows of ``tp`` whose end offset is at most ``reached``, in
        arrival order; :meth:`due` says whether more are left."""
        if tp in self._unindexed:
            self._index_page(tp, state)
        released: list[RawMessage] = []
        size = 0
        for entry in state.keys(WINDOW_DUE, before=_due(reached + 1, b""), limit=PAGE_ROWS):
            state.put(entry, None)
            slot = WINDOW_BUFFER + entry[1 + _END.size :]
            stored = state.get(slot)
            if stored is None:
                continue  # its row was released by a version without due entries
            raw = self._decode(tp, stored)
            if end_of(raw) != _END.unpack_from(entry, 1)[0]:
                continue  # the row was replaced: its own entry stands
            state.put(slot, None)
            released.append(raw)
            size += len(stored)
            if size >= PAGE_BYTES:
                break
        left = self._pending[tp][1] - len(released)
        if tp in self._unindexed:
            self._set(tp, 0, left)
        elif entries := state.keys(WINDOW_DUE, limit=1):
            self._set(tp, _first_end(entries), left)
        else:
            self._drop(tp)
        return sorted(released, key=lambda r: r.offset)

    def _index_page(self, tp: TopicPartitionKey, state: BatchState) -> None:
        """Give a page of rows buffered without due entries theirs."""
        slots = state.keys(WINDOW_BUFFER, after=self._unindexed[tp], limit=PAGE_ROWS)
        size = 0
        for slot in slots:
            stored = state.get(slot)
            assert stored is not None
            state.put(_due(end_of(self._decode(tp, stored)), slot[len(WINDOW_BUFFER) :]), b"")
            self._unindexed[tp] = slot
            size += len(stored)
            if size >= PAGE_BYTES:
                return
        if len(slots) < PAGE_ROWS:
            del self._unindexed[tp]
            state.put(WINDOW_INDEXED, b"")

    def _decode(self, tp: TopicPartitionKey, stored: bytes) -> RawMessage:
        return decode(backfill_topic(self._pipeline, tp[0]), tp[1], stored)

    def _set(self, tp: TopicPartitionKey, end: int, count: int) -> None:
        self._pending[tp] = (end, count)
        self._publish(tp[0])

    def _drop(self, tp: TopicPartitionKey) -> None:
        if self._pending.pop(tp, None) is not None:
            self._publish(tp[0])

    def _publish(self, topic: str) -> None:
        metrics.WINDOW_BUFFERED_ROWS.labels(topic).set(self.count(topic))


def _due(end: int, key: bytes) -> bytes:
    """A row's entry: ordered by the end offset that releases it."""
    return WINDOW_DUE + _END.pack(end) + key


def _first_end(entries: list[bytes]) -> int:
    """The end offset of the first of ``entries`` (at least one)."""
    return int(_END.unpack_from(entries[0], 1)[0])
