"""Reads of a known range (:func:`tidemark.core.kafka.reader_config`, ``exact_end_offsets``,
``read_range``): what the API's reads of the status topics are made of."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.core.kafka import (
    client_config,
    ensure_topics,
    exact_end_offsets,
    newest_records,
    producer_config,
    read_range,
    reader_config,
)
from tidemark.devstack.stack import DevStack


def test_the_end_of_a_topic_written_all_the_time_is_found_while_it_is_written(
    stack: DevStack,
) -> None:
    """A snapshot's progress and the source positions are written all the time. A reader
    that fetches without a long poll used to follow such a topic for as long as it was
    written, so an API read of it never answered."""
    kafka = stack.config.kafka
    topic = f"reads-{uuid.uuid4().hex[:8]}"
    ensure_topics(AdminClient(client_config(kafka)), {topic: 1})
    producer = Producer(producer_config(kafka))
    for i in range(100):
        producer.produce(topic, b"%d" % i, b"k", 0)
    assert producer.flush(30) == 0
    writing = threading.Event()
    writing.set()

    def write() -> None:
        while writing.is_set():
            producer.produce(topic, b"more", b"k", 0)
            producer.flush(5)
            time.sleep(0.02)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    consumer = Consumer(reader_config(kafka, f"{topic}-reader"))
    try:
        done = threading.Event()
        found: dict[str, int] = {}

        def read() -> None:
            end = exact_end_offsets(consumer, [TopicPartition(topic, 0)])[(topic, 0)]
            found["end"] = end
            found["read"] = sum(1 for _ in read_range(consumer, topic, 0, 0, end))
            done.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert done.wait(10), "the read followed the topic while it was written"
        assert found["end"] >= 100 and found["read"] == found["end"]
    finally:
        writing.clear()
        writer.join(10)
        reader.join(10)
        consumer.close()


def test_the_newest_records_of_each_partition_are_read_in_one_pass(stack: DevStack) -> None:
    """``newest_records`` keeps each partition's last ``most`` records, in offset order,
    read up to each partition's end (across a transaction's commit marker too)."""
    kafka = stack.config.kafka
    topic = f"newest-{uuid.uuid4().hex[:8]}"
    ensure_topics(AdminClient(client_config(kafka)), {topic: 3})
    producer = Producer(producer_config(kafka, **{"linger.ms": 5}))
    for partition, count in ((0, 120), (1, 7)):  # partition 2 stays empty
        for i in range(count):
            producer.produce(topic, b"%d-%d" % (partition, i), b"k", partition)
    assert producer.flush(30) == 0
    transactional = Producer(producer_config(kafka, **{"transactional.id": topic}))
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, b"1-7", b"k", 1)
    transactional.commit_transaction(30)  # partition 1 ends with a commit marker
    consumer = Consumer(reader_config(kafka, f"{topic}-reader"))
    try:
        read = newest_records(consumer, topic, 3, 50)
    finally:
        consumer.close()
    values = [(msg.partition(), msg.value()) for msg in read]
    expected = [(0, b"0-%d" % i) for i in range(70, 120)] + [(1, b"1-%d" % i) for i in range(8)]
    assert values == expected
