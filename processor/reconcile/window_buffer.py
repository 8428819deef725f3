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
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from processor import metrics
from processor.events.chunk_tag import ChunkTag
from processor.events.visibility import Window
from processor.reconcile.envelopes import WINDOW_BUFFER
from state.batch import BatchState
from state.store import PartitionStore
from tidemark.messages import RawMessage
from tidemark.topics import backfill_topic

TopicPartitionKey = tuple[str, int]
#: How far an input partition's state reflects its input: the next offset it has not seen.
Reached = Callable[[TopicPartitionKey], int]

_HEAD = struct.Struct(">qqHI")  # offset, chunk, window text length, key length


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
    """Which input partitions hold buffered rows, and the earliest offset that releases some.

    The index is rebuilt from a partition's store the first time the partition is
    seen (:meth:`load`), so rows buffered before a restart or on another instance
    are released too.
    """

    def __init__(self, pipeline: str) -> None:
        self._pipeline = pipeline
        #: Per input partition with buffered rows: (smallest end offset, row count).
        self._pending: dict[TopicPartitionKey, tuple[int, int]] = {}
        self._loaded: set[TopicPartitionKey] = set()

    def load(self, tp: TopicPartitionKey, store: PartitionStore) -> None:
        """Index ``tp``'s buffered rows (once per assignment)."""
        if tp in self._loaded:
            return
        self._loaded.add(tp)
        stored = store.get_many(store.keys(WINDOW_BUFFER))
        self._index(tp, [end_of(self._decode(tp, v)) for v in stored if v is not None])

    def forget(self, tp: TopicPartitionKey) -> None:
        """``tp`` left this instance."""
        self._loaded.discard(tp)
        self._index(tp, [])

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
        if held is not None and _HEAD.unpack_from(held)[1] > raw.chunk.number:
            return  # a later chunk's row of this key waits already
        state.put(slot, encode(raw))
        end, count = self._pending.get(tp, (end_of(raw), 0))
        self._set(tp, min(end, end_of(raw)), count + (held is None))

    def due(self, tp: TopicPartitionKey, reached: int) -> bool:
        """Whether ``tp``, whose state reflects its input below ``reached``, releases rows."""
        pending = self._pending.get(tp)
        return pending is not None and pending[0] <= reached

    def release(self, tp: TopicPartitionKey, state: BatchState, reached: int) -> list[RawMessage]:
        """Take the rows of ``tp`` whose end offset is at most ``reached``, in arrival order."""
        released, kept = [], []
        for slot in state.keys(WINDOW_BUFFER):
            stored = state.get(slot)
            if stored is None:
                continue
            raw = self._decode(tp, stored)
            end = end_of(raw)
            if end <= reached:
                released.append(raw)
                state.put(slot, None)
            else:
                kept.append(end)
        self._index(tp, kept)
        return sorted(released, key=lambda r: r.offset)

    def _decode(self, tp: TopicPartitionKey, stored: bytes) -> RawMessage:
        return decode(backfill_topic(self._pipeline, tp[0]), tp[1], stored)

    def _index(self, tp: TopicPartitionKey, ends: list[int]) -> None:
        if ends:
            self._set(tp, min(ends), len(ends))
        elif self._pending.pop(tp, None) is not None:
            metrics.WINDOW_BUFFERED_ROWS.labels(tp[0]).set(self.count(tp[0]))

    def _set(self, tp: TopicPartitionKey, end: int, count: int) -> None:
        self._pending[tp] = (end, count)
        metrics.WINDOW_BUFFERED_ROWS.labels(tp[0]).set(self.count(tp[0]))
