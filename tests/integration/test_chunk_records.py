"""Framed backfill records in a real processor: each row decided, a broken record dead-lettered.

The chunk reader frames a chunk's rows a few to a record
(:mod:`processor.events.chunk_records`). Here records are written directly to a
backfill topic: two framed records of rows, one whose ``tidemark.rows`` header does
not count its frames (as no reader writes it), and a row without the header (as
chunk readers wrote before framing). Every row of the framed records and the unframed
row are reconciled; the broken record is one dead letter holding its bytes whole; the
processor never restarts.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from processor.events.chunk_records import ROWS_PER_RECORD, records, rows_header
from processor.events.chunk_tag import ChunkTag
from processor.events.visibility import PgSnapshot
from processor.snapshot.reader_pool import PRODUCER_SETTINGS
from tests.integration.processes import (
    Processor,
    pipeline_config,
    read_topic,
    reconciled,
    wait_for,
)
from tidemark.cli.verify import processor_lag
from tidemark.core.errors import TopicError
from tidemark.core.kafka import (
    Acknowledgements,
    client_config,
    ensure_topics,
    partition_count,
    producer_config,
)
from tidemark.core.topics import backfill_topic, dead_letter_topic
from tidemark.devstack.procs import pid_alive
from tidemark.devstack.stack import DevStack

TABLE = "iso_framed_t"


def row(key: int) -> tuple[bytes, bytes]:
    """A chunk row of ``key``: Debezium's key, and its READ event of an incremental snapshot."""
    source: dict[str, Any] = {
        "version": "3.6.3.Final",
        "connector": "postgresql",
        "name": "tidemark",
        "ts_ms": 1,
        "snapshot": "incremental",
        "db": "postgres",
        "sequence": None,
        "schema": "public",
        "table": TABLE,
        "txId": None,
        "lsn": None,
    }
    after = {"id": key, "name": f"row {key}"}
    event = {"before": None, "after": after, "source": source, "op": "r", "ts_ms": 2}
    return orjson.dumps({"id": key}), orjson.dumps(event)


def test_framed_rows_are_each_decided_and_a_broken_record_is_one_dead_letter(
    stack: DevStack,
) -> None:
    config = pipeline_config(stack, "framed")
    topic = f"{config.source.topic_prefix}.public.{TABLE}"
    backfill = backfill_topic("framed", topic)
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 1}, 1)
    producer = Producer(client_config(config.kafka, **{"enable.idempotence": True}))
    acks = Acknowledgements(producer)
    tag = ChunkTag(7, PgSnapshot(500, 500), "framed-1").headers()
    processor = Processor(stack, config, "framed-processor").start()
    try:
        wait_for("the backfill topic", lambda: processor_lag(config).get(backfill) == 0)
        count = ROWS_PER_RECORD + 3  # a full record, then one of 3 rows
        framed = records([row(k) for k in range(1, count + 1)], [0] * count)
        assert [rows for _, rows, _ in framed] == [ROWS_PER_RECORD, 3]
        broken = records([row(count + 1), row(count + 2)], [0, 0])[0][2]
        unframed = row(count + 3)
        sent = [
            (framed[0][2], None, [*tag, rows_header(framed[0][1])]),
            (broken, None, [*tag, rows_header(3)]),  # it frames 2 rows
            (framed[1][2], None, [*tag, rows_header(framed[1][1])]),
            (unframed[1], unframed[0], tag),  # one row, unframed
        ]
        for value, key, headers in sent:
            producer.produce(backfill, value, key, 0, acks.on_delivery, headers=headers)
        acks.wait("test records")
        wait_for("the backfill records", lambda: processor_lag(config).get(backfill) == 0)
        assert pid_alive(processor.pid)
    finally:
        processor.stop()
    last = {e.key["id"]: e.after["name"] for e in reconciled(config, TABLE) if e.after}
    assert last == {k: f"row {k}" for k in [*range(1, count + 1), count + 3]}
    letters = read_topic(config, dead_letter_topic("framed"))
    assert [(r.value, r.headers["tidemark.source.offset"]) for r in letters] == [(broken, b"1")]


def test_partitions_are_counted_and_a_missing_topic_is_a_topic_error(stack: DevStack) -> None:
    """The reader partitions a chunk's rows itself: it counts the backfill topic's
    partitions, with its own producer. A topic that is not there is a TopicError (the
    chunk is tried again later), not a topic created by the metadata request with the
    broker's default partition count (librdkafka's producers ask for that by default)."""
    config = stack.config
    topic = "iso_framed_counted"
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 3}, 1)
    producer = Producer(producer_config(config.kafka, **PRODUCER_SETTINGS))
    assert partition_count(producer, topic) == 3
    with pytest.raises(TopicError, match="iso_framed_missing"):
        partition_count(producer, "iso_framed_missing")
