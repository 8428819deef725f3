"""The data plane's replay of a crashed batch: it reads exactly what the batch read.

The consumer here only records what the replay asks of it (pause, seek, resume);
reading them back from a real broker is ``test_commit.py``'s.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from processor.dataplane.replay import Replays
from processor.reconcile.batch_reads import READS_KEY, BatchReads
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tidemark.core.messages import RawMessage
from tidemark.core.topics import backfill_topic

TOPIC = "tidemark.public.t"
BACKFILL = backfill_topic("p", TOPIC)
TP, BTP = (TOPIC, 0), (BACKFILL, 0)


class Recording:
    """What was asked of the consumer, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []

    def _record(self, name: str, partitions: list[TopicPartition]) -> None:
        self.calls.append((name, [(p.topic, p.partition, p.offset) for p in partitions]))

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._record("pause", partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._record("resume", partitions)

    def seek(self, partition: TopicPartition) -> None:
        self._record("seek", [partition])


def messages(topic: str, *offsets: int) -> list[RawMessage]:
    return [RawMessage(topic, 0, o, b"k", b"v") for o in offsets]


def replays_of(reads: BatchReads | None) -> Replays:
    store = MemoryPartitionStore()
    if reads is not None:
        store.commit({READS_KEY: reads.encode()}, Checkpoint(10))
    replays = Replays("p")
    replays.check({TP: store}, lambda _tp: True)
    return replays


def test_a_replay_collects_its_batch_cuts_what_follows_and_resumes_after_commit() -> None:
    replays, consumer = replays_of(BatchReads((10, 12), (3, 4))), Recording()
    assert replays.waiting
    first: dict[Any, list[RawMessage]] = {TP: messages(TOPIC, 10, 11, 12, 13, 14)}
    replays.take(first, consumer)  # type: ignore[arg-type]
    assert first == {}  # the changes are all here, the backfill rows not yet
    assert consumer.calls == [("pause", [(TOPIC, 0, 13)]), ("seek", [(TOPIC, 0, 13)])]
    second: dict[Any, list[RawMessage]] = {BTP: messages(BACKFILL, 3, 4, 5)}
    replays.take(second, consumer)  # type: ignore[arg-type]
    assert second == {TP: messages(TOPIC, 10, 11, 12), BTP: messages(BACKFILL, 3, 4)}
    assert not replays.waiting
    replays.resume(consumer, lambda held: [])  # type: ignore[arg-type]
    resumed = consumer.calls[-1]
    assert resumed[0] == "resume"
    assert sorted(resumed[1]) == [(BACKFILL, 0, -1001), (TOPIC, 0, -1001)]


def test_a_batch_that_read_no_changes_is_replayed_without_any() -> None:
    replays, consumer = replays_of(BatchReads(None, (3, 3))), Recording()
    groups: dict[Any, list[RawMessage]] = {
        TP: messages(TOPIC, 10, 11),
        BTP: messages(BACKFILL, 3),
    }
    replays.take(groups, consumer)  # type: ignore[arg-type]
    assert groups == {BTP: messages(BACKFILL, 3)}
    assert ("seek", [(TOPIC, 0, 10)]) in consumer.calls


def test_partitions_without_reads_and_other_partitions_pass_untouched() -> None:
    replays, consumer = replays_of(None), Recording()
    assert not replays.waiting
    replays = replays_of(BatchReads((10, 10), None))
    other = ("other", 0)
    groups: dict[Any, list[RawMessage]] = {other: messages("other", 1, 2)}
    replays.take(groups, consumer)  # type: ignore[arg-type]
    assert groups == {other: messages("other", 1, 2)} and replays.waiting
    replays.forget(TP)  # revoked meanwhile: nothing is left to replay here
    assert not replays.waiting


def test_a_partition_read_from_before_the_batch_drops_the_replay() -> None:
    """An offsets write moved the partition back: the crashed batch is history now."""
    replays, consumer = replays_of(BatchReads((10, 12), None)), Recording()
    groups: dict[Any, list[RawMessage]] = {TP: messages(TOPIC, 4, 5, 6)}
    replays.take(groups, consumer)  # type: ignore[arg-type]
    assert groups == {TP: messages(TOPIC, 4, 5, 6)} and not replays.waiting
    assert consumer.calls == []
