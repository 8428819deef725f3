"""An estate of many tables: what an instance costs does not grow with its partitions.

The input topics are made here, with Debezium-shaped events produced to them, so the
test is about the data plane alone (the ``make scale`` benchmark runs real Debezium).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.processes import Processor, metric, pipeline_config, read_topic, wait_for
from tests.integration.test_commit import change_event
from tests.integration.test_recovery import other_instance, stopped
from tidemark.cli.verify import wait_caught_up
from tidemark.core.config import Config
from tidemark.core.kafka import Acknowledgements, client_config, ensure_topics
from tidemark.core.topics import output_topic
from tidemark.devstack.stack import DevStack

TABLES = 16
PARTITIONS = 3


class Estate:
    """``TABLES`` input topics of ``PARTITIONS`` partitions for pipeline ``name``, made here,
    with Debezium-shaped events produced to every partition."""

    def __init__(self, config: Config, name: str) -> None:
        prefix = config.source.topic_prefix
        self.topics = [f"{prefix}.public.iso_{name}_t{i:02d}" for i in range(TABLES)]
        admin = AdminClient(client_config(config.kafka))
        ensure_topics(admin, dict.fromkeys(self.topics, PARTITIONS), 1)
        self._producer = Producer(client_config(config.kafka))
        self._acks = Acknowledgements(self._producer)

    def send(self, version: int) -> None:
        """One event to each partition of each topic, its row's name ``v<version>``."""
        for topic in self.topics:
            for partition in range(PARTITIONS):
                key = partition + 10 * version
                value = change_event(topic.rsplit(".", 1)[1], "c", f"v{version}", version, key)
                self._producer.produce(
                    topic, value, orjson.dumps({"id": key}), partition, self._acks.on_delivery
                )
        self._acks.wait("test changes")


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(ln for ln in status if ln.startswith("Threads:"))
    return int(line.split()[1])


def labelled(text: str, name: str) -> list[dict[str, str]]:
    """The label sets of metric family ``name``'s samples in ``/metrics`` text ``text``."""
    return [
        sample.labels
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
        if not sample.name.endswith("_created")
    ]


def test_producers_and_threads_do_not_grow_with_the_partitions_owned(stack: DevStack) -> None:
    """48 input partitions on one instance, then on two: each instance holds a producer per
    partition slot it owns (3, then 2 and 1), its thread count stays far below one
    producer's threads per partition, and no instance fences another's live producer.
    The second serves its metrics at ``pipeline`` detail: one series a family."""
    config = pipeline_config(stack, "estate")
    estate = Estate(config, "estate")
    topics, send = estate.topics, estate.send

    def arrived(version: int) -> bool:
        for topic in topics:
            names = {
                orjson.loads(r.value)["after"]["name"]
                for r in read_topic(config, output_topic(config.source.topic_prefix, topic))
                if r.value is not None
            }
            if f"v{version}" not in names:
                return False
        return True

    send(1)
    first = Processor(stack, config, "estate-a").start()
    second_config = other_instance(config, "b")
    second_config = dataclasses.replace(
        second_config,
        processor=dataclasses.replace(second_config.processor, metrics_detail="pipeline"),
    )
    second = Processor(stack, second_config, "estate-b")
    try:
        wait_for("every table's outputs", lambda: arrived(1), timeout=180)
        lags = labelled(first.metrics(), "tidemark_consumer_lag")
        assert {(s["topic"], s["partition"]) for s in lags} >= {(topics[0], "0"), (topics[0], "2")}
        assert first.health()["assigned_partitions"] == TABLES * PARTITIONS
        assert metric(first.metrics(), "tidemark_dataplane_producers") == PARTITIONS
        # librdkafka runs a few threads per producer: one per partition would be ~200 here.
        assert threads_of(first.pid) < 90, threads_of(first.pid)

        second.start()
        wait_for(
            "the partitions shared",
            lambda: (
                sorted(p.health().get("assigned_partitions", 0) for p in (first, second))
                == [TABLES, 2 * TABLES]
            ),
            timeout=120,
        )
        send(2)
        wait_for("every table's outputs after the rebalance", lambda: arrived(2), timeout=180)
        # The range assignor keeps each slot on one member: partitions 0 and 1 of every
        # topic on one instance, partition 2 on the other.
        producers = sorted(
            metric(p.metrics(), "tidemark_dataplane_producers") for p in (first, second)
        )
        assert producers == [1, 2], producers
        text = second.metrics()
        read = labelled(text, "tidemark_events_in")
        assert len(read) == 1 and not read[0], read  # one series, no topic label
        assert metric(text, "tidemark_events_in_total") >= TABLES  # its partitions' v2 events
        families = list(text_string_to_metric_families(text))
        assert not [
            s for f in families for s in f.samples if {"topic", "partition"} & set(s.labels)
        ]
        for instance in (first, second):
            assert "fenced" not in instance.log.read_text()
    finally:
        first.stop()
        second.stop()


def test_every_partition_restored_at_once_is_read_again(stack: DevStack) -> None:
    """An instance crashes with a batch's changelog in Kafka and no offsets committed (a
    failpoint after its transactions' commit); another, with no local state, restores
    every one of the 48 partitions and must then read each again, and what follows."""
    config = pipeline_config(stack, "restall")
    send = Estate(config, "restall").send

    send(1)
    Processor(stack, config, "restall-a").start(failpoint="after-flush:1", healthy=False).crashed()
    second = Processor(stack, other_instance(config, "b"), "restall-b").start()
    try:
        send(2)
        wait_caught_up(config, timeout=120)
    finally:
        second.stop()


def test_partitions_restored_after_a_stall_are_read_again(stack: DevStack) -> None:
    """An instance stalls (SIGSTOP) with its first batch decided, past the poll deadline;
    it then commits the batch (its offsets refused: the group moved on), leaves, joins
    again and restores the partitions whose changelog the batch wrote. Every partition
    must be read again, and what follows. At 500 tables the partitions restored this
    way were never read again."""
    config = pipeline_config(stack, "stall")
    send = Estate(config, "stall").send

    send(1)
    first = Processor(stack, config, "stall-a")
    try:
        first.start(failpoint="batch-decided:1:stop", healthy=False)
        wait_for("the stall", lambda: stopped(first.pid))
        time.sleep(15)  # past max.poll.interval.ms: the group takes the partitions away
        os.kill(first.pid, signal.SIGCONT)
        wait_for("the rejoin", lambda: "data plane: Kafka unreachable" in first.log.read_text())
        send(2)
        wait_caught_up(config, timeout=120)
    finally:
        first.stop()
