"""Records in the control topic that Tidemark does not write, against a running processor.

Review A3's recipe: a ``lifecycle`` record that is not JSON crash-looped every replica
(the compacted record is read again at every start), and a forged ``offsets-write`` plan
with ``at_ms: 0`` was carried out at once, tombstoning another topic and moving another
group's offsets with the processor's credentials. Both must be refused, counted, and
change nothing, before and after a restart.
"""

from __future__ import annotations

import orjson
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.processes import Processor, metric, pipeline_config, read_topic, wait_for
from tidemark.core.kafka import client_config, ensure_topics, producer_config, record_topic_config
from tidemark.core.topics import (
    backfill_topic,
    change_topic,
    control_topic,
    dead_letter_topic,
    instances_topic,
    notification_topic,
    positions_topic,
    progress_topic,
    signal_topic,
)
from tidemark.devstack.stack import DevStack

VICTIM = "victim.compacted"


def test_forged_and_malformed_control_records_are_refused_and_change_nothing(
    stack: DevStack,
) -> None:
    config = pipeline_config(stack, "ctlforge")
    admin = AdminClient(client_config(config.kafka))
    ensure_topics(admin, {VICTIM: 1}, 1, config={"cleanup.policy": "compact"})
    producer = Producer(producer_config(config.kafka))
    producer.produce(VICTIM, b"kept", b"row", 0)
    producer.flush(10)
    victim_group = Consumer(client_config(config.kafka, **{"group.id": "victim-group"}))
    victim_group.commit(offsets=[TopicPartition(VICTIM, 0, 1)], asynchronous=False)
    victim_group.close()

    change = change_topic(config.source.topic_prefix, "public.iso_ctlforge_queue")
    ensure_topics(admin, {change: 1}, 1)  # the processor makes its backfill topic
    processor = Processor(stack, config, "ctlforge-processor").start()
    try:
        forged = {
            "group": "victim-group",
            "delete_group": False,
            "offsets": [[VICTIM, 0, 0]],
            "positions": [],
            "reset_state": [[VICTIM, 0]],
            "at_ms": 0,
        }
        topic = control_topic(config.processor.pipeline)
        producer.produce(topic, b"nope", b"lifecycle", 0)
        producer.produce(topic, orjson.dumps(forged), b"offsets-write", 0)
        producer.flush(10)

        def refused() -> bool:
            text = processor.metrics()
            name = "tidemark_control_records_refused_total"
            return (
                metric(text, name, key="lifecycle") == 1
                and metric(text, name, key="offsets-write") == 1
            )

        wait_for("both records refused", refused)
        pid = processor.pid
        processor.stop()
        processor.start()  # reads both records again at its start
        assert processor.pid != pid and processor.health().get("status") == "ok"
        wait_for("both records refused again", refused)
        assert processor.health().get("status") == "ok"
        assert [(r.key, r.value) for r in read_topic(config, VICTIM)] == [(b"row", b"kept")]
        # Review A2: every topic of the pipeline's own takes its largest records (on a stock
        # broker, 1 MiB otherwise), the compacted ones compacted.
        pipeline = config.processor.pipeline
        limit = record_topic_config(config.kafka)["max.message.bytes"]
        compacted = {control_topic, positions_topic, progress_topic, instances_topic}
        for make in (*compacted, dead_letter_topic, signal_topic, notification_topic):
            resource = ConfigResource(ConfigResource.Type.TOPIC, make(pipeline))
            found = admin.describe_configs([resource])[resource].result()
            assert found["max.message.bytes"].value == limit, make(pipeline)
            policy = found.get("cleanup.policy")  # unset: the broker's default, delete
            expected = "compact" if make in compacted else "delete"
            assert (policy.value if policy else "delete") == expected, make(pipeline)
        # Review A8: rows and signals that wait to be read keep an explicit retention, and
        # no size limit of the cluster's.
        backfill = backfill_topic(pipeline, change)
        wait_for(backfill, lambda: backfill in admin.list_topics(timeout=10).topics)
        for name in (signal_topic(pipeline), backfill):
            resource = ConfigResource(ConfigResource.Type.TOPIC, name)
            found = admin.describe_configs([resource])[resource].result()
            assert found["retention.ms"].value == str(config.kafka.queue_retention_ms), name
            assert found["retention.bytes"].value == "-1", name
        # Dead letters are whole input rows (personal data): kept as long as configured.
        resource = ConfigResource(ConfigResource.Type.TOPIC, dead_letter_topic(pipeline))
        found = admin.describe_configs([resource])[resource].result()
        assert found["retention.ms"].value == str(config.kafka.dead_letter_retention_ms)
        # The processor shows Debezium's replication slot (read every 30 s).
        slot = config.source.replication_slot

        def slot_shown() -> bool:
            text = processor.metrics()
            return (
                metric(text, "tidemark_source_slot_active", slot=slot) == 1
                and metric(text, "tidemark_source_slot_wal_status", slot=slot, status="reserved")
                == 1
            )

        wait_for("the replication slot shown", slot_shown, timeout=60)
        request = [ConsumerGroupTopicPartitions("victim-group")]
        listed = admin.list_consumer_group_offsets(request)["victim-group"].result()
        assert [(tp.topic, tp.offset) for tp in listed.topic_partitions] == [(VICTIM, 1)]
    finally:
        processor.stop()
        admin.delete_topics([VICTIM])


def test_a_topic_made_without_tidemarks_settings_gets_them(stack: DevStack) -> None:
    """A topic of the pipeline made by an earlier release, or auto-created by a producer
    before Tidemark made it, has the broker's defaults (1 MiB records on Apache Kafka):
    making sure of it sets what Tidemark needs."""
    admin = AdminClient(client_config(stack.config.kafka))
    name = "made.elsewhere"
    ensure_topics(admin, {name: 1}, 1)
    wanted = record_topic_config(stack.config.kafka, **{"cleanup.policy": "compact"})
    ensure_topics(admin, {name: 1}, 1, config=wanted)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    found = admin.describe_configs([resource])[resource].result()
    assert {key: found[key].value for key in wanted} == wanted
    admin.delete_topics([name])
