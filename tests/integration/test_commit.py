"""The commit protocol against the real broker: no state is durable before the outputs it implies.

A batch whose output Kafka never takes (here: an output to a partition its
topic does not have) must fail without a single changelog record of that batch
in Kafka. (Before the changelog waited for the outputs, the changelog record
landed while the output failed.)
Otherwise a restore from the changelog (another instance, or a store that
reopened at an earlier commit) would hold state past outputs that never
landed, and the ``debezium`` envelope would drop their replay as duplicates.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from processor.dataplane.commit import Committer
from processor.dataplane.writers import SlotWriter
from processor.events.chunk_tag import ChunkTag
from processor.events.source_codec import SourceCodec
from processor.events.visibility import PgSnapshot
from processor.reconcile.batch import Batch, InputTopic, Reconciler
from processor.reconcile.envelopes import STEPS
from state.batch import BatchState
from state.memory import MemoryPartitionStore
from tests.integration.processes import Processor, pipeline_config, read_topic, reconciled, wait_for
from tests.oracle import strip_resent
from tidemark.cli.verify import processor_lag
from tidemark.core.config import Config
from tidemark.core.errors import DeliveryError
from tidemark.core.kafka import Acknowledgements, client_config, consumer_config, ensure_topics
from tidemark.core.topics import backfill_topic
from tidemark.devstack.stack import DevStack


def committer_of(
    config: Config, name: str, envelope: str, changelog_partitions: int
) -> tuple[Committer, InputTopic]:
    """A committer of one input topic ``<name>.in`` (one output partition, its changelog
    of ``changelog_partitions``), with the topics made."""
    output, changelog = f"{name}.out", f"{name}.changelog"
    admin = AdminClient(client_config(config.kafka))
    ensure_topics(admin, {changelog: changelog_partitions, output: 1}, 1)
    codec = SourceCodec(envelope, output, None)
    topic = InputTopic(f"{name}.in", envelope, STEPS[envelope], codec, output, changelog)
    reconciler = Reconciler(config)
    reconciler.topics[topic.topic] = topic
    return Committer(config, reconciler), topic


def test_no_changelog_record_is_durable_before_the_batchs_outputs(stack: DevStack) -> None:
    config = stack.config
    name = f"commit{uuid.uuid4().hex[:8]}"
    committer, topic = committer_of(config, name, "debezium", 3)
    output, changelog = topic.output, topic.changelog
    writers = {(topic.topic, 2): SlotWriter(config, (3, 2))}
    batch = Batch()
    # An output Kafka cannot take: its topic has one partition.
    batch.records.append((output, 2, b'{"id":1}', b'{"after":{"id":1}}'))
    state = batch.states[(topic.topic, 2)] = BatchState(MemoryPartitionStore())
    state.put(b"\x00tidemark:high-water", b"past the batch")
    consumer = Consumer(consumer_config(config.kafka, f"{name}-group"))
    try:
        with pytest.raises((DeliveryError, KafkaException)):
            committer.commit(batch, {}, writers, consumer)
        writers[(topic.topic, 2)].close()
        time.sleep(1)
        assert read_topic(config, changelog) == []
    finally:
        consumer.close()


class RebalancingConsumer:
    """A group member whose offset commit Kafka refuses: the group rebalanced under it."""

    def commit(self, **_kwargs: Any) -> None:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "Broker: Unknown member"))


def test_an_offset_commit_refused_by_a_rebalance_does_not_fail_the_batch(stack: DevStack) -> None:
    """A batch that ends as the group rebalances has its outputs and state in, only its
    offsets refused: the partitions move at the next poll, and their next owner replays
    from the committed offsets (equal versions). Failing the turn made the instance leave
    the group, one more rebalance for every member; at 1,000 partitions it happened on
    every rebalance."""
    config = stack.config
    name = f"rebal{uuid.uuid4().hex[:8]}"
    committer, topic = committer_of(config, name, "debezium-upsert", 1)
    tp = (topic.topic, 0)
    writers = {tp: SlotWriter(config, (1, 0))}
    store = MemoryPartitionStore()
    batch = Batch()
    batch.records.append((topic.output, 0, b'{"id":1}', b'{"after":{"id":1}}'))
    state = batch.states[tp] = BatchState(store)
    state.put(b"a", b"1")
    batch.next_offsets[tp] = 7
    try:
        committer.commit(batch, {tp: store}, writers, RebalancingConsumer())  # type: ignore[arg-type]
        assert store.checkpoint().input_offset == 7
        assert [r.key for r in read_topic(config, topic.output)] == [b'{"id":1}']
    finally:
        writers[tp].close()


def change_event(table: str, op: str, name: str, txid: int | None, key: int = 1) -> bytes:
    """A Debezium-shaped event of ``key`` (``txid`` None: a backfill's chunk row)."""
    source = {
        "version": "3.6.3.Final",
        "connector": "postgresql",
        "name": "tidemark",
        "ts_ms": 1,
        "snapshot": "false" if txid is not None else "incremental",
        "db": "postgres",
        "sequence": None if txid is None else f'["{txid}","{txid}"]',
        "schema": "public",
        "table": table,
        "txId": txid,
        "lsn": txid,
    }
    after = {"id": key, "name": name}
    return orjson.dumps({"before": None, "after": after, "source": source, "op": op, "ts_ms": 2})


def test_a_batch_replayed_after_a_crash_decides_as_the_crashed_one_did(stack: DevStack) -> None:
    """A batch's decisions depend on how its change topic and backfill topic interleave; its
    replay after a crash must decide as it did. Here a chunk row (read in a snapshot that
    sees changes c1 to c3) is decided alone: it shows c3's row. The processor is killed
    with the batch's outputs in Kafka and its state nowhere; c2 and c3 arrive meanwhile.
    Were the replay to read them before the row, it would emit c2 after c3's row: a step
    back that no re-send explains."""
    table = "iso_replay_t"
    config = pipeline_config(stack, "replay")
    topic = f"{config.source.topic_prefix}.public.{table}"
    backfill = backfill_topic("replay", topic)
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 1}, 1)
    producer = Producer(client_config(config.kafka, **{"enable.idempotence": True}))
    acks = Acknowledgements(producer)

    def send(target: str, value: bytes, headers: Any = None) -> None:
        producer.produce(target, value, b'{"id":1}', 0, acks.on_delivery, headers=headers)
        acks.wait("test records")

    send(topic, change_event(table, "c", "c1", 101))
    processor = Processor(stack, config, "replay-processor").start()
    try:
        wait_for(
            "c1",
            lambda: processor_lag(config).get(topic) == 0 and backfill in processor_lag(config),
        )
        processor.stop()
        processor.start(failpoint="outputs-acked:1")
        tag = ChunkTag(1, PgSnapshot.parse("200:200:"), "replay-1")
        send(backfill, change_event(table, "r", "c3", None), tag.headers())
        processor.crashed()  # the row's output is in Kafka, its state is not
        send(topic, change_event(table, "u", "c2", 102))
        send(topic, change_event(table, "u", "c3", 103))
        processor.start()
        wait_for("the pipeline", lambda: not any(processor_lag(config).values()))
    finally:
        processor.stop()
    names = [e.after["name"] for e in reconciled(config, table) if e.after is not None]
    kept, stale = strip_resent([int(name[1:]) for name in names])
    assert stale == 0, names
    assert kept[-1] == 3, names


def test_a_stalled_owner_never_checkpoints_the_next_owners_changelog_records(
    stack: DevStack,
) -> None:
    """Review A6: owner A commits a batch's transaction and stalls (a GC pause, SIGSTOP)
    right after, at the failpoint that follows the commits; owner B is given the
    partition (its writer fences A's) and writes state of its own. A's checkpoint must not
    reach B's records: A would take them as in its store, and a later restore of A's
    store would skip them (stale rows, wrong retractions and TOAST fills)."""
    config = stack.config
    name = f"stall{uuid.uuid4().hex[:8]}"
    committer, topic = committer_of(config, name, "debezium-upsert", 1)
    output, changelog = topic.output, topic.changelog
    tp = (topic.topic, 0)
    writers = {tp: SlotWriter(config, (1, 0))}

    def next_owner_writes() -> None:
        taker = SlotWriter(config, (1, 0))  # fences A's producer
        taker.begin()
        for i in range(3):
            taker.producer.produce(changelog, b"B's", f"b{i}".encode(), 0)
        taker.commit()
        taker.close()

    committer._after_flush.passed = next_owner_writes  # type: ignore[method-assign]
    store = MemoryPartitionStore()
    batch = Batch()
    batch.records.append((output, 0, b'{"id":1}', b'{"after":{"id":1}}'))
    state = batch.states[tp] = BatchState(store)
    state.put(b"a", b"A's")
    consumer = Consumer(consumer_config(config.kafka, f"{name}-group"))
    try:
        committer.commit(batch, {tp: store}, writers, consumer)
        records = read_topic(config, changelog)
        first_of_b = min(r.offset for r in records if r.key is not None and r.key[:1] == b"b")
        position = store.checkpoint().changelog_offset
        assert position is not None and position <= first_of_b, (position, records)
    finally:
        consumer.close()
        writers[tp].close()
