"""Partitions added to a change topic (review A12).

The topics Tidemark made for the change topic (output, changelog, backfill) keep the
old count: the instance given a new partition had no changelog partition to restore
from, failed in its assignment, and rode it out as an outage, every topic it reads
stalled, until it exited. The grown topic must stop with its reason, and the others
go on.

The embedded broker cannot add partitions (no CreatePartitions, KIP-195), so the test
makes the state a grown topic leaves: its derived topics made with two partitions, the
topic itself with three, as a restart after the growth finds them.
"""

from __future__ import annotations

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.integration.processes import (
    Processor,
    metric,
    pipeline_config,
    read_topic,
    wait_for,
)
from tests.integration.test_commit import change_event
from tidemark.core.kafka import Acknowledgements, client_config, ensure_topics
from tidemark.core.topics import backfill_topic, changelog_topic, output_topic
from tidemark.devstack.stack import DevStack


def test_a_change_topic_given_more_partitions_stops_alone_with_its_reason(
    stack: DevStack,
) -> None:
    config = pipeline_config(stack, "grow")
    prefix = config.source.topic_prefix
    grown, steady = f"{prefix}.public.iso_grow_a", f"{prefix}.public.iso_grow_b"
    admin = AdminClient(client_config(config.kafka))
    pipeline = config.processor.pipeline
    made = [output_topic(prefix, grown), changelog_topic(pipeline, grown)]
    made.append(backfill_topic(pipeline, grown))
    ensure_topics(admin, dict.fromkeys(made, 2), 1)  # made while the topic had two
    ensure_topics(admin, {grown: 3, steady: 1}, 1)
    producer = Producer(client_config(config.kafka))
    acks = Acknowledgements(producer)

    def send(topic: str, partition: int, key: int, position: int) -> None:
        value = change_event(topic.rsplit(".", 1)[1], "c", f"v{key}", position, key)
        producer.produce(topic, value, orjson.dumps({"id": key}), partition, acks.on_delivery)
        acks.wait("test changes")

    def arrived(topic: str, key: int) -> bool:
        records = read_topic(config, output_topic(prefix, topic))
        return any(r.key == orjson.dumps({"id": key}) for r in records)

    send(grown, 0, 1, 100)
    send(grown, 2, 3, 101)
    send(steady, 0, 1, 100)
    processor = Processor(stack, config, "grow-processor").start()
    try:

        def refused() -> bool:
            text = processor.metrics()
            return metric(text, "tidemark_source_refused", topic=grown) == 1

        wait_for("the other topic's change", lambda: arrived(steady, 1), timeout=90)
        wait_for("the grown topic stopped", refused)
        send(steady, 0, 2, 102)
        wait_for("the other topic's next change", lambda: arrived(steady, 2))
        assert processor.health().get("status") == "ok"
        assert not arrived(grown, 1) and not arrived(grown, 3)
        log = processor.log.read_text()
        assert "partitions were added to it" in log and "Traceback" not in log
    finally:
        processor.stop()
        admin.delete_topics([grown, steady])
