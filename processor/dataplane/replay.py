"""Reading a crashed batch again exactly as it was read (:mod:`processor.reconcile.batch_reads`).

Once an input partition's state is ready (restored, or up to date when the
partition is assigned), its store may hold the reads of a batch that crashed
between its first output and its state. Until the partition's next batch has
read exactly those offsets of the input partition and of its backfill
partition, their messages are collected here rather than decided. A message past
them is cut: its partition is sought back to it and paused until that batch is
committed. If the offsets do not all come back within ``PATIENCE_S`` (records
deleted since), what came is decided, with a warning; if a partition is read
from before them (an offsets write moved it), the replay is dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from processor.reconcile.batch import TopicPartitionKey
from processor.reconcile.batch_reads import READS_KEY, BatchReads, Span
from state.store import PartitionStore
from tidemark.core.messages import RawMessage
from tidemark.core.topics import backfill_topic

log = logging.getLogger(__name__)

#: Seconds a replay waits for the offsets it must read again.
PATIENCE_S = 60.0


@dataclass
class _Replay:
    """One input partition's batch to read again: the span of each of its two partitions."""

    spans: dict[TopicPartitionKey, Span | None]
    since: float
    collected: dict[TopicPartitionKey, list[RawMessage]] = field(default_factory=dict)
    #: The partitions whose span is read to its end.
    complete: set[TopicPartitionKey] = field(default_factory=set)
    #: The partitions paused at a message past their span.
    cut: set[TopicPartitionKey] = field(default_factory=set)


class Replays:
    """The input partitions whose next batch must read what a crashed batch read."""

    def __init__(self, pipeline: str) -> None:
        self._pipeline = pipeline
        self._pending: dict[TopicPartitionKey, _Replay] = {}
        #: Input partitions whose store was looked at since they were assigned.
        self._checked: set[TopicPartitionKey] = set()
        #: Partitions to resume once the batch being decided is committed.
        self._to_resume: list[TopicPartitionKey] = []

    @property
    def waiting(self) -> bool:
        """Whether a replay is collecting its batch."""
        return bool(self._pending)

    def collecting(self, tp: TopicPartitionKey) -> bool:
        """Whether input partition ``tp``'s replay is collecting its batch."""
        return tp in self._pending

    def check(
        self,
        stores: Mapping[TopicPartitionKey, PartitionStore],
        ready: Callable[[TopicPartitionKey], bool],
    ) -> None:
        """Look, once per assignment, for the pending reads of each ``ready`` partition."""
        for tp, store in stores.items():
            if tp in self._checked or not ready(tp):
                continue
            self._checked.add(tp)
            stored = store.get(READS_KEY)
            if stored is None:
                continue
            reads = BatchReads.decode(stored)
            if reads is None:
                log.warning("%s[%d]: unreadable batch reads %r, not replayed", *tp, stored[:200])
                continue
            backfill = (backfill_topic(self._pipeline, tp[0]), tp[1])
            spans = {tp: reads.changes, backfill: reads.backfill}
            replay = _Replay(spans, time.monotonic())
            replay.complete = {p for p, span in spans.items() if span is None}
            self._pending[tp] = replay
            log.info(
                "%s[%d]: reading a crashed batch again as it was read (changes %s, backfill %s)",
                *tp,
                reads.changes,
                reads.backfill,
            )

    def take(self, groups: dict[TopicPartitionKey, list[RawMessage]], consumer: Consumer) -> None:
        """Collect the messages of partitions being replayed out of ``groups`` (each in offset
        order); put a replay's whole batch back in once it has read all of it."""
        for owner, replay in list(self._pending.items()):
            if self._moved(owner, replay, groups):
                continue
            for tp, span in replay.spans.items():
                group = groups.pop(tp, None)
                if not group:
                    continue
                last = -1 if span is None else span[1]
                taken = next((i for i, m in enumerate(group) if m.offset > last), len(group))
                replay.collected.setdefault(tp, []).extend(group[:taken])
                if taken < len(group):
                    partition = TopicPartition(tp[0], tp[1], group[taken].offset)
                    consumer.pause([partition])
                    consumer.seek(partition)
                    replay.cut.add(tp)
                if span is None or taken < len(group) or group[taken - 1].offset >= last:
                    replay.complete.add(tp)
            if len(replay.complete) < len(replay.spans):
                if time.monotonic() - replay.since <= PATIENCE_S:
                    continue
                log.warning(
                    "%s[%d]: the crashed batch's offsets did not all come back in %.0f s; "
                    "deciding what did",
                    *owner,
                    PATIENCE_S,
                )
            self._release(owner, replay, groups)

    def _moved(
        self,
        owner: TopicPartitionKey,
        replay: _Replay,
        groups: dict[TopicPartitionKey, list[RawMessage]],
    ) -> bool:
        """Whether a partition is read from before the offsets the crashed batch read (an
        offsets write moved it since): then the replay is dropped, and its messages pass."""
        for tp, span in replay.spans.items():
            group = replay.collected.get(tp) or groups.get(tp)
            if span is not None and group and group[0].offset < span[0]:
                log.warning(
                    "%s[%d]: read from offset %d, before the crashed batch's %d (offsets "
                    "written since): not replayed",
                    *tp,
                    group[0].offset,
                    span[0],
                )
                self._release(owner, replay, groups)
                return True
        return False

    def _release(
        self,
        owner: TopicPartitionKey,
        replay: _Replay,
        groups: dict[TopicPartitionKey, list[RawMessage]],
    ) -> None:
        """End ``owner``'s replay: what it collected goes back into ``groups``, ahead of
        what the batch holds, and its cut partitions resume after the commit."""
        for tp, collected in replay.collected.items():
            if collected:
                groups[tp] = collected + groups.get(tp, [])
        self._to_resume += sorted(replay.cut)
        del self._pending[owner]

    def resume(
        self, consumer: Consumer, held: Callable[[list[TopicPartition]], list[TopicPartition]]
    ) -> None:
        """After a replayed batch is committed: resume the partitions cut, but those ``held``."""
        if not self._to_resume:
            return
        cut = [TopicPartition(t, p) for t, p in self._to_resume]
        self._to_resume = []
        kept = {(p.topic, p.partition) for p in held(cut)}
        consumer.resume([p for p in cut if (p.topic, p.partition) not in kept])

    def forget(self, tp: TopicPartitionKey) -> None:
        """Input partition ``tp`` left this instance."""
        self._checked.discard(tp)
        self._pending.pop(tp, None)
        backfill = (backfill_topic(self._pipeline, tp[0]), tp[1])
        self._to_resume = [p for p in self._to_resume if p not in (tp, backfill)]
