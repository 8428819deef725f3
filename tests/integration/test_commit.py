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

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from processor.dataplane.commit import Committer
from processor.dataplane.writers import PartitionWriter
from processor.events.source_codec import SourceCodec
from processor.reconcile.batch import Batch, InputTopic, Reconciler
from processor.reconcile.envelopes import STEPS
from state.batch import BatchState
from state.memory import MemoryPartitionStore
from tests.integration.processes import read_topic
from tidemark.cli.devstack.stack import DevStack
from tidemark.errors import DeliveryError
from tidemark.kafka import client_config, consumer_config, ensure_topics

pytestmark = pytest.mark.integration


def test_no_changelog_record_is_durable_before_the_batchs_outputs(stack: DevStack) -> None:
    config = stack.config
    name = f"commit{uuid.uuid4().hex[:8]}"
    output, changelog = f"{name}.out", f"{name}.changelog"
    ensure_topics(AdminClient(client_config(config.kafka)), {changelog: 3, output: 1}, 1)
    topic = InputTopic(
        f"{name}.in",
        "debezium",
        STEPS["debezium"],
        SourceCodec("debezium", output, None),
        output,
        changelog,
    )
    reconciler = Reconciler(config)
    reconciler.topics[topic.topic] = topic
    committer = Committer(config, reconciler)
    writers = {(topic.topic, 2): PartitionWriter(config, (topic.topic, 2))}
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
        committer.close()
