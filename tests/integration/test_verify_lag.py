"""The processor's lag, as ``tidemark dev wait`` and the tests read it, on a real broker."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.processes import pipeline_config
from tidemark.cli.verify import processor_lag
from tidemark.core.kafka import (
    TRANSACTION_TIMEOUT,
    client_config,
    ensure_topics,
    producer_config,
)
from tidemark.core.topics import backfill_topic, dataplane_group
from tidemark.devstack.stack import DevStack


def test_transaction_markers_after_the_last_record_are_no_lag(stack: DevStack) -> None:
    """A lifetime run never caught up: a truncate's markers, written in a transaction,
    were the last of a backfill topic's partitions, so the partition ended one past the
    data plane's committed offset (its commit marker, which no reader is given) for good.
    Records after the committed offset are lag; markers alone are not."""
    config = pipeline_config(stack, "lagmarks")
    pipeline = config.processor.pipeline
    input_topic = f"{config.source.topic_prefix}.public.iso_lagmarks_t"
    topic = backfill_topic(pipeline, input_topic)
    ensure_topics(AdminClient(client_config(config.kafka)), {input_topic: 1, topic: 1}, 1)
    writer = Producer(producer_config(config.kafka, **{"transactional.id": "tests-lagmarks"}))
    writer.init_transactions(TRANSACTION_TIMEOUT)
    writer.begin_transaction()
    writer.produce(topic, b"marker", b"k", 0)
    writer.commit_transaction(TRANSACTION_TIMEOUT)  # record 0, its commit marker at 1
    group = Consumer(client_config(config.kafka, **{"group.id": dataplane_group(pipeline)}))
    try:
        group.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert processor_lag(config)[topic] == 0
        plain = Producer(producer_config(config.kafka))
        plain.produce(topic, b"row", b"k2", 0)  # a record after it: lag
        assert plain.flush(30) == 0
        assert processor_lag(config)[topic] == 2
    finally:
        group.close()
