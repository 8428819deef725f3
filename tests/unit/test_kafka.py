"""Acknowledgements of a producer that reports failures only (no broker needed)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, TopicPartition

from tidemark.core.errors import DeliveryError, RecordTooLargeError, TopicError
from tidemark.core.kafka import FAILURES_ONLY, Acknowledgements, produce_waiting, read_range


def test_a_failures_only_producer_still_reports_a_record_kafka_never_acknowledged() -> None:
    # Nothing listens on port 1: the record times out in librdkafka.
    producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 300, **FAILURES_ONLY}
    )
    acks = Acknowledgements(producer)
    producer.produce("t", b"v", on_delivery=acks.on_delivery)
    with pytest.raises(DeliveryError, match="timed out"):
        acks.wait("test record", timeout=10)
    assert acks.failures == []  # reported once, then cleared


class _Record:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None


class _SlowConsumer:
    """A consumer whose records come one per call, ``pause`` apart (a long partition on a
    slow broker), and none after ``stops_at``."""

    def __init__(self, pause: float, stops_at: int) -> None:
        self.pause, self.stops_at, self.next = pause, stops_at, 0

    def assign(self, _partitions: object) -> None: ...

    def unassign(self) -> None: ...

    def consume(self, _count: int, timeout: float) -> list[_Record]:
        if self.next >= self.stops_at:
            time.sleep(timeout)
            return []
        time.sleep(self.pause)
        self.next += 1
        return [_Record(self.next - 1)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(partitions[0].topic, 0, self.next)]


def test_a_read_that_goes_on_is_never_cut_short_and_one_that_stalls_is() -> None:
    """Review A11: a changelog partition that took longer to read than a total timeout
    could never be reset. The timeout is a stall: the longest wait for the next record."""
    slow = _SlowConsumer(pause=0.02, stops_at=40)  # 0.8 s in all, never 0.1 s apart
    assert len(list(read_range(slow, "t", 0, 0, 40, timeout=0.1))) == 40  # type: ignore[arg-type]
    stalled = _SlowConsumer(pause=0.0, stops_at=5)
    started = time.monotonic()
    with pytest.raises(TopicError, match="stopped at 5 of 40"):
        list(read_range(stalled, "t", 0, 0, 40, timeout=0.3))  # type: ignore[arg-type]
    assert time.monotonic() - started < 2


def test_a_record_larger_than_the_client_takes_is_said_to_be_too_large() -> None:
    """Item 2 of issue 45: the producer's message.max.bytes (kafka.max_record_bytes and
    its framing, as every topic Tidemark makes takes) refuses a larger record before it
    leaves, and that is the record's fault, not Kafka being away."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "message.max.bytes": 1000})
    with pytest.raises(RecordTooLargeError, match="2000 bytes"):
        produce_waiting(producer, "t", b"v" * 1990, b"k" * 10, lambda _e, _m: None)
    produce_waiting(producer, "t", b"v" * 100, None, lambda _e, _m: None)  # fits
