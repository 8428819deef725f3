"""The commit protocol against the real broker: no state is durable before the outputs it implies.

A batch whose output Kafka never acknowledges (here: an output to a partition
its topic will not have; the topic does not exist yet when the record is
produced, so librdkafka reports the failure only once the broker has made the
topic) must fail without a single changelog record of that batch in Kafka.
Otherwise a restore from the changelog (another instance, or a store that
reopened at an earlier commit) would hold state past outputs that never
landed, and the ``debezium`` envelope would drop their replay as duplicates.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from processor.dataplane.commit import Committer
from processor.events.source_codec import SourceCodec
from processor.reconcile.batch import Batch, InputTopic
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
    ensure_topics(AdminClient(client_config(config.kafka)), {changelog: 3}, 1)
    topic = InputTopic(
        f"{name}.in",
        "debezium",
        STEPS["debezium"],
        SourceCodec("debezium", output, None),
        output,
        changelog,
    )
    committer = Committer(config, lambda _name: topic)
    batch = Batch()
    # An output Kafka cannot take: the broker creates the topic with fewer partitions.
    batch.records.append((output, 99, b'{"id":1}', b'{"after":{"id":1}}'))
    state = batch.states[(topic.topic, 2)] = BatchState(MemoryPartitionStore())
    state.put(b"\x00tidemark:high-water", b"past the batch")
    consumer = Consumer(consumer_config(config.kafka, f"{name}-group"))
    try:
        with pytest.raises(DeliveryError):
            committer.commit(batch, {}, consumer)
        committer.flush(10)  # whatever was handed to a producer has landed by now
        time.sleep(1)
        assert read_topic(config, changelog) == []
    finally:
        consumer.close()
