"""Acknowledgements of a producer that reports failures only (no broker needed)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tidemark.core.errors import DeliveryError
from tidemark.core.kafka import FAILURES_ONLY, Acknowledgements


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
