"""The exported lag of an owned partition, read or not read yet."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.dataplane.partitions import Partitions, lag_of
from processor.reconcile.batch import Reconciler
from state.memory import MemoryBackend, MemoryPartitionStore
from tidemark.core.config import Config, KafkaConfig, ProcessorConfig
from tidemark.core.topics import backfill_topic

pytestmark = pytest.mark.unit


def test_a_partition_read_lags_from_its_position() -> None:
    assert lag_of(7, 3, 0, 10) == 3


def test_a_partition_not_read_since_assigned_lags_from_its_committed_offset() -> None:
    """It was exported as 0 (caught up) while it was not read at all."""
    assert lag_of(-1001, 4, 0, 10) == 6
    assert lag_of(-1001, -1001, 2, 10) == 8
    assert lag_of(-1001, -1001, 0, 0) == 0


class Member:
    """The group member as the data plane sees it: positions, committed offsets, ends."""

    def __init__(self, positions: dict[tuple[str, int], int], committed: int, high: int) -> None:
        self.positions, self.committed_offset, self.high = positions, committed, high
        self.resumed: list[tuple[str, int]] = []

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(t.topic, t.partition, self.positions[(t.topic, t.partition)])
            for t in tps
        ]

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(t.topic, t.partition, self.committed_offset) for t in tps]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool) -> tuple[int, int]:
        return 0, self.high

    def resume(self, tps: list[TopicPartition]) -> None:
        self.resumed += [(t.topic, t.partition) for t in tps]


def partitions_of(paused: bool = False) -> Partitions:
    config = Config(
        kafka=KafkaConfig(bootstrap_servers="127.0.0.1:9"),
        processor=ProcessorConfig(pipeline="lag"),
    )
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9"})
    partitions = Partitions(
        config, MemoryBackend(), Reconciler(config), admin, lambda: paused, lambda _tp: None
    )
    for p in range(3):
        partitions.stores[("t", p)] = MemoryPartitionStore()
    return partitions


def test_the_lag_of_a_partition_not_read_counts_from_its_committed_offset() -> None:
    partitions = partitions_of()
    member = Member({("t", 0): -1001, ("t", 1): 5, ("t", 2): 2}, committed=1, high=5)
    try:
        partitions.update_lag(member)  # type: ignore[arg-type]
    finally:
        partitions.close()
    lags = {p: metrics.CONSUMER_LAG.labels("t", str(p))._value.get() for p in range(3)}
    assert lags == {0: 4, 1: 0, 2: 3}


def test_partitions_a_restore_resumed_are_resumed_again_until_read() -> None:
    """librdkafka drops a resume issued while a new partition waits for its committed
    offset: a partition a restore resumed is resumed again until one of its messages is
    read, unless it is held back (its state being restored again)."""
    partitions = partitions_of()
    backfill = backfill_topic("lag", "t")
    member = Member({}, committed=-1001, high=5)
    now = time.monotonic()
    partitions._resumed = {("t", 0): now, (backfill, 0): now, ("t", 1): now, ("t", 2): now - 61}
    partitions._next_late_resume = now + 30
    try:
        partitions.read(("t", 1))
        partitions.resume_again(member)  # type: ignore[arg-type]
        assert sorted(member.resumed) == sorted([("t", 0), (backfill, 0)])
        assert ("t", 2) in partitions._resumed  # past its first minute: resumed later
    finally:
        partitions.close()


def test_a_partition_still_not_read_after_a_minute_is_resumed_every_half_minute() -> None:
    """A partition's wait for its committed offset may outlast the first minute on a
    CPU-bound broker (a likely cause of 149 partitions never read at 500 tables). Past its
    first minute a partition not read is resumed every ``RESUME_LATER_S`` until one of its
    messages is read."""
    partitions = partitions_of()
    member = Member({}, committed=-1001, high=5)
    partitions._resumed = {("t", 2): time.monotonic() - 600}
    try:
        partitions.resume_again(member)  # type: ignore[arg-type]
        assert member.resumed == [("t", 2)]
        partitions.resume_again(member)  # type: ignore[arg-type]
        assert member.resumed == [("t", 2)]  # not again within the half minute
        partitions._next_late_resume = time.monotonic() - 1
        partitions.resume_again(member)  # type: ignore[arg-type]
        assert member.resumed == [("t", 2), ("t", 2)]
        partitions.read(("t", 2))
        partitions._next_late_resume = time.monotonic() - 1
        partitions.resume_again(member)  # type: ignore[arg-type]
        assert member.resumed == [("t", 2), ("t", 2)]
    finally:
        partitions.close()


def test_nothing_is_resumed_again_while_the_pipeline_is_paused() -> None:
    partitions = partitions_of(paused=True)
    member = Member({}, committed=-1001, high=5)
    partitions._resumed = {("t", 0): time.monotonic()}
    try:
        partitions.resume_again(member)  # type: ignore[arg-type]
    finally:
        partitions.close()
    assert member.resumed == []
