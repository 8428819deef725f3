"""Tables that come and go while the pipeline runs: a table added to the source is taken
up without a restart; a table removed (``tidemark tables remove``) leaves no topic, no
position and no state behind, and, made again, starts from nothing."""

from __future__ import annotations

import re
import time

import orjson
import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from psycopg import sql

from processor.pipeline.control_topic import read_control
from processor.snapshot.client import read_state
from processor.snapshot.progress import UNFINISHED
from tests.integration.processes import (
    Processor,
    pipeline_config,
    read_topic,
    reconciled,
    run_cli,
    wait_for,
)
from tests.integration.test_commit import change_event
from tests.integration.test_recovery import other_instance
from tidemark.cli.verify import wait_caught_up
from tidemark.core.config import Config
from tidemark.core.kafka import Acknowledgements, client_config, ensure_topics, partition_counts
from tidemark.core.topics import backfill_topic, changelog_topic, output_topic, positions_topic
from tidemark.devstack.debezium import TOPICS_CHECKED_EVERY_S
from tidemark.devstack.stack import DevStack


def send(config: Config, topic: str, events: list[tuple[int, str, int]]) -> None:
    """Debezium-shaped events of ``topic``'s table: (key, row name, transaction id)."""
    table = topic.rsplit(".", 1)[1]
    producer = Producer(client_config(config.kafka))
    acks = Acknowledgements(producer)
    for key, name, txid in events:
        value = change_event(table, "c", name, txid, key)
        producer.produce(topic, value, orjson.dumps({"id": key}), 0, acks.on_delivery)
    acks.wait("test changes")


def names_of(config: Config, topic: str, key: int) -> list[str]:
    """The row names of ``key``'s records in output ``topic``, in order."""
    return [
        orjson.loads(r.value)["after"]["name"]
        for r in read_topic(config, topic)
        if r.value is not None and orjson.loads(r.key)["id"] == key
    ]


def cli(processor: Processor, *args: str) -> None:
    done = run_cli(processor, *args)
    assert done.returncode == 0, done.stderr


def unfinished(config: Config, request: str) -> bool:
    """Whether snapshot request ``request`` has a table not yet done."""
    state = read_state(config)
    return state is not None and any(
        t.request_id == request and t.status in UNFINISHED for t in state.tables
    )


def series_of(processor: Processor) -> set[str]:
    """The ``topic`` labels of the processor's series (``topic="..."``)."""
    return set(re.findall(r'topic="[^"]*"', processor.metrics()))


def test_a_removed_table_made_again_starts_from_nothing(stack: DevStack) -> None:
    """A table is removed while the instance that held its state is down, then made
    again, and another instance carries its new topics past where the old state's
    checkpoint stood. When the first instance takes the table back, the state of the
    removed table must not meet the new one's records: here it held key 9 at
    transaction 1009, which the new table's records never touch, and under which the
    new table's first change of key 9, at transaction 20, would be taken for an old one
    and dropped."""
    config = pipeline_config(stack, "again")
    prefix, pipeline = config.source.topic_prefix, config.processor.pipeline
    topic = f"{prefix}.public.iso_again_t"
    output = output_topic(prefix, topic)
    made = [topic, backfill_topic(pipeline, topic), changelog_topic(pipeline, topic), output]
    admin = AdminClient(client_config(config.kafka))
    ensure_topics(admin, {topic: 1, backfill_topic(pipeline, topic): 1}, 1)

    send(config, topic, [(k, "old", 1000 + k) for k in (1, 2, 3, 9)])
    first = Processor(stack, config, "again-a").start()
    try:
        wait_caught_up(config, timeout=120)
    finally:
        first.stop()
    assert names_of(config, output, 9) == ["old"]

    removed = run_cli(first, "tables", "remove", "public.iso_again_t", "--output")
    assert removed.returncode == 0, removed.stderr
    assert sorted(orjson.loads(removed.stdout)["deleted_topics"]) == sorted(made)
    assert not set(partition_counts(admin, made)), "topics left behind"
    positions = [r for r in read_topic(config, positions_topic(pipeline)) if r.key]
    last = {r.key: r.value for r in positions}
    assert last[f"{topic}/0".encode()] is None, "the position was not forgotten"

    ensure_topics(admin, {topic: 1}, 1)
    send(config, topic, [(k, "new", 10 + k) for k in range(1, 9)])
    second = Processor(stack, other_instance(config, "b"), "again-b").start()
    try:
        wait_caught_up(config, timeout=120)
    finally:
        second.stop()
    send(config, topic, [(9, "newer", 20)])
    first.start()
    try:
        wait_caught_up(config, timeout=120)
    finally:
        first.stop()
    assert names_of(config, output, 1) == ["new"]
    assert names_of(config, output, 9) == ["newer"]
    assert "deleted and made again since this state" in first.log.read_text()


def test_a_table_added_at_run_time_is_taken_up_and_removed_while_running(
    stack: DevStack,
) -> None:
    """A running instance takes up a table created in the source after it started
    (Debezium captures it, its topic appears, the subscription finds it) without a
    restart. Its removal is refused while the source has it, and while a backfill of it
    is unfinished; once the table is dropped, it is removed with the pipeline running:
    the instance gives up its partitions before their topics are deleted (librdkafka
    crashes a consumer that holds one then), deletes their state and their series, and
    goes on with the other table. Made again, the table is taken up again by the same
    instance, its topics made anew."""
    config = pipeline_config(stack, "added")
    prefix = config.source.topic_prefix
    topic = f"{prefix}.public.iso_added_t"
    other = f"{prefix}.public.iso_added_other"
    output = output_topic(prefix, topic)
    admin = AdminClient(client_config(config.kafka))
    ensure_topics(admin, {other: 1}, 1)  # a table that stays
    table = sql.Identifier("public", "iso_added_t")
    processor = Processor(stack, config, "added-a").start()
    try:
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, name text)").format(table))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'a'), (2, 'b')").format(table))
        wait_for(
            "the new table's outputs",
            lambda: (
                output in partition_counts(admin, [output])
                and {e.after["id"] for e in reconciled(config, "iso_added_t") if e.after} == {1, 2}
            ),
        )
        refused = run_cli(processor, "tables", "remove", "public.iso_added_t")
        assert refused.returncode == 2, refused.stderr
        assert "still exists in the source" in refused.stderr
        assert topic in partition_counts(admin, [topic])
        assert f'topic="{topic}"' in processor.metrics()

        # Nor while a backfill of it is unfinished, --force or not: it is kept queued
        cli(processor, "snapshot", "pause")
        cli(processor, "snapshot", "start", "public.iso_added_t", "--id", "rm-1")
        wait_for("the backfill queued", lambda: unfinished(config, "rm-1"), timeout=60)
        refused = run_cli(processor, "tables", "remove", "public.iso_added_t", "--force")
        assert refused.returncode == 2, refused.stderr
        assert "a backfill of public.iso_added_t is " in refused.stderr
        cli(processor, "snapshot", "stop", "public.iso_added_t")
        wait_for("the backfill stopped", lambda: not unfinished(config, "rm-1"), timeout=60)
        cli(processor, "snapshot", "resume")
        assert not read_control(config).removing  # refused before the mark

        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
        removed = run_cli(processor, "tables", "remove", "public.iso_added_t")
        assert removed.returncode == 0, removed.stderr
        assert not set(partition_counts(admin, [topic, backfill_topic("added", topic)]))
        assert output in partition_counts(admin, [output])  # kept without --output
        wait_for(
            "its state deleted",
            lambda: f"deleted the state of {topic}:" in processor.log.read_text(),
            timeout=30,
        )
        assert not read_control(config).removing  # the mark taken back
        wait_for(
            "its series gone from /metrics",
            lambda: not {f'topic="{t}"' for t in (topic, output)} & series_of(processor),
            timeout=30,
        )
        send(config, other, [(1, "after", 1)])
        wait_for(
            "the other table's output", lambda: names_of(config, output_topic(prefix, other), 1)
        )
        assert processor.health()["assigned_partitions"] == 1

        # The table made again, under the same instance: new topics, its own again. The
        # development stack's Debezium bridge learns within TOPICS_CHECKED_EVERY_S that
        # a topic it made is gone, and the embedded broker takes a write to a deleted
        # topic without a word: a change sooner would be lost there (not on Kafka).
        time.sleep(TOPICS_CHECKED_EVERY_S + 1)
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, name text)").format(table))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (3, 'c')").format(table))
        wait_for(
            "the table's outputs again",
            lambda: 3 in {e.after["id"] for e in reconciled(config, "iso_added_t") if e.after},
        )
        changelog = changelog_topic("added", topic)
        assert changelog in partition_counts(admin, [changelog])
    finally:
        processor.stop()
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
