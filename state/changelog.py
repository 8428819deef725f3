"""Changelog topics: the source of truth for state, and restoring a store from one.

Every state update the data plane commits is first produced to the store's
changelog, ``<pipeline>.changelog.<input topic>``: compacted, co-partitioned
with the input topic (partition ``p`` of the input owns partition ``p`` of the
changelog). A store's checkpoint records how far into the changelog it is.
When a partition is assigned, the :class:`Restorer` reads the changelog from
that checkpoint to the end, so a store that is missing (a new instance, a lost
disk) or stale (the partition lived elsewhere for a while) is brought up to
date before the partition's input is processed.

A changelog that no longer reaches back to the checkpoint (retention removed
records the store never saw) cannot be replayed onto the store: the store is
wiped and rebuilt from the changelog's first record.

A restore reads ``read_committed``, to the changelog's last stable offset. When
it starts, the partition's writer has just fenced the last one, so on Kafka no
transaction holds that offset back. The embedded broker can hold it for good
(at 0) after a writer died inside a transaction: such a partition is restored to
its last record, read ``read_uncommitted`` (that broker shows a committed reader
every record anyway), and never taken for a log that does not continue the store.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from state.store import Checkpoint, PartitionStore
from tidemark.core.kafka import data_messages, ends_past_stable, exact_end_offsets, watermarks

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    store: PartitionStore
    #: The next changelog offset to read, and the offset to reach.
    position: int
    end: int
    started: float
    records: int = 0
    #: Read uncommitted: the end is past a stable offset the broker holds back.
    held: bool = False


@dataclass(frozen=True)
class Restored:
    """A finished restore, for logs and metrics."""

    topic: str
    partition: int
    records: int
    seconds: float


class Restorer:
    """Restores stores from their changelog partitions, a bounded step at a time.

    The data plane calls :meth:`step` between its batches, so a long restore
    never starves the consumer group's heartbeat or poll deadline.
    """

    def __init__(
        self, consumer_settings: dict[str, object], admin: AdminClient, batch: int = 20_000
    ) -> None:
        settings = {**consumer_settings, "enable.auto.commit": False, "enable.partition.eof": False}
        every = {**settings, "isolation.level": "read_uncommitted"}
        self._consumer = Consumer(settings)
        #: Reads the partitions whose stable offset is held back (see the module's text).
        self._every = Consumer(every)
        #: Find where changelogs end (stable, and whatever was written); reassigning them
        #: never disturbs the restores under way.
        self._probe = Consumer(settings)
        self._every_probe = Consumer(every)
        #: Asks where the changelogs start and end, for all of them at once.
        self._admin = admin
        self._batch = batch
        self._pending: dict[tuple[str, int], _Pending] = {}

    def add(self, stores: dict[tuple[str, int], PartitionStore]) -> set[tuple[str, int]]:
        """Start restoring each store from its changelog partition (``(topic, partition)``).

        Returns the changelog partitions that are being restored; the others were
        up to date. Where the changelog ends is found for all of them at once.
        """
        tps = [TopicPartition(topic, partition) for topic, partition in stores]
        stable = watermarks(self._admin, tps)
        lows = {tp: low for tp, (low, _high) in stable.items()}
        ends = exact_end_offsets(self._probe, tps, marks=stable)
        written = watermarks(self._admin, tps, committed=False)
        highs = ends_past_stable(self._every_probe, ends, marks=written)
        restoring = set()
        for (topic, partition), store in stores.items():
            start = store.checkpoint().changelog_offset or 0
            low, end = lows[(topic, partition)], ends[(topic, partition)]
            held = (topic, partition) in highs
            if held:
                log.warning(
                    "changelog %s[%d]: a transaction the broker does not close holds its "
                    "stable offset at %d, records up to %d: restoring to those, uncommitted",
                    topic,
                    partition,
                    end,
                    highs[(topic, partition)],
                )
                end = highs[(topic, partition)]
            if start > end or start < low:
                log.warning(
                    "changelog %s[%d] does not continue the local state (state at %d, log "
                    "%d..%d): rebuilding the store from the changelog",
                    topic,
                    partition,
                    start,
                    low,
                    end,
                )
                store.wipe()
                start = 0
            if start < end:
                pending = _Pending(store, start, end, time.monotonic(), held=held)
                self._pending[(topic, partition)] = pending
                restoring.add((topic, partition))
        if restoring:
            self._assign()
        return restoring

    def remove(self, partitions: list[tuple[str, int]]) -> None:
        """Stop restoring ``partitions`` (revoked before they finished); the consumers are
        reassigned once, not once a partition (1,500 partitions took minutes)."""
        removed = [tp for tp in partitions if self._pending.pop(tp, None) is not None]
        if removed:
            self._assign()

    @property
    def busy(self) -> bool:
        """True while a store is being restored."""
        return bool(self._pending)

    def restoring(self, topic: str, partition: int) -> bool:
        """True while ``topic[partition]``'s store is being restored."""
        return (topic, partition) in self._pending

    def step(self, budget_s: float = 0.5) -> list[Restored]:
        """Apply changelog records for up to ``budget_s``; return the restores that finished."""
        deadline = time.monotonic() + budget_s
        finished: list[Restored] = []
        while self._pending and time.monotonic() < deadline:
            held = any(p.held for p in self._pending.values())
            messages = self._consumer.consume(self._batch, 0.2 if not held else 0.05)
            if held:
                messages += self._every.consume(self._batch, 0.05)
            updates: dict[tuple[str, int], dict[bytes, bytes | None]] = {}
            read: dict[tuple[str, int], int] = {}
            last: dict[tuple[str, int], int] = {}
            for msg in data_messages(messages):
                tp = (msg.topic() or "", msg.partition() or 0)
                if tp not in self._pending:
                    continue
                last[tp] = msg.offset() or 0
                read[tp] = read.get(tp, 0) + 1
                key = msg.key()
                if key is not None:
                    updates.setdefault(tp, {})[key] = msg.value()
            # The consumer's position passes transaction markers, which are no messages.
            positions = {
                (tp.topic, tp.partition): tp.offset
                for consumer, held_ones in ((self._consumer, False), (self._every, True))
                for tp in consumer.position(self._partitions(held_ones))
            }
            for tp, pending in list(self._pending.items()):
                position = max(last.get(tp, -1) + 1, positions.get(tp, -1), pending.position)
                if position == pending.position:
                    continue
                pending.store.commit(updates.get(tp, {}), Checkpoint(changelog_offset=position))
                pending.position = position
                pending.records += read.get(tp, 0)
                if pending.position >= pending.end:
                    del self._pending[tp]
                    finished.append(
                        Restored(tp[0], tp[1], pending.records, time.monotonic() - pending.started)
                    )
            if finished:
                self._assign()
                break
        return finished

    def _partitions(self, held: bool) -> list[TopicPartition]:
        """The partitions being restored, those held back or the others, at their
        positions."""
        return [
            TopicPartition(t, p, pending.position)
            for (t, p), pending in self._pending.items()
            if pending.held == held
        ]

    def _assign(self) -> None:
        self._consumer.assign(self._partitions(False))
        self._every.assign(self._partitions(True))

    def close(self) -> None:
        """Release the consumers."""
        for consumer in (self._consumer, self._every, self._probe, self._every_probe):
            consumer.close()
