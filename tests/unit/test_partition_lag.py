"""The exported lag of an owned partition, read or not read yet."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

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
        """What the fetches told: nothing for a partition never fetched."""
        if self.positions[(tp.topic, tp.partition)] < 0:
            return -1001, -1001
        return 0, self.high

    def assignment(self) -> list[TopicPartition]:
        topics = {t for t, _ in self.positions}
        return [TopicPartition(t, p) for t, p in self.positions] + [
            TopicPartition(backfill_topic("lag", t), p) for t in topics for p in range(3)
        ]

    def resume(self, tps: list[TopicPartition]) -> None:
        self.resumed += [(t.topic, t.partition) for t in tps]


@pytest.fixture(autouse=True)
def ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's answer for every partition: records 0 to 5."""

    def watermarks(
        _admin: object, tps: list[TopicPartition], committed: bool = True
    ) -> dict[tuple[str, int], tuple[int, int]]:
        return {(t.topic, t.partition): (0, 5) for t in tps}

    monkeypatch.setattr("processor.dataplane.partitions.watermarks", watermarks)


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


def test_partitions_with_records_and_no_position_are_resumed_again() -> None:
    """librdkafka drops a resume issued while a new partition waits for its committed
    offset: a partition never fetched with records waiting is resumed again, with its
    backfill partition; one being read is left alone (a resume drops what it fetched)."""
    partitions = partitions_of()
    member = Member({("t", 0): -1001, ("t", 1): 5, ("t", 2): -1001}, committed=-1001, high=5)
    try:
        partitions.update_lag(member)  # type: ignore[arg-type]
    finally:
        partitions.close()
    backfill = backfill_topic("lag", "t")
    assert sorted(member.resumed) == sorted([("t", 0), ("t", 2), (backfill, 0), (backfill, 2)])


def test_nothing_is_resumed_while_the_pipeline_is_paused() -> None:
    partitions = partitions_of(paused=True)
    member = Member({("t", 0): -1001, ("t", 1): -1001, ("t", 2): -1001}, committed=-1001, high=5)
    try:
        partitions.update_lag(member)  # type: ignore[arg-type]
    finally:
        partitions.close()
    assert member.resumed == []
