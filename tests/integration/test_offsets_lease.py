"""Who applies an offsets write (review A11), with two running instances.

Before, a plan older than 60 s was completed by every data plane that saw it, at once,
even while its writer was still at work: the stragglers' tombstones then wiped state
the resumed pipeline had just rebuilt. Now a writer renews its plan, no instance takes
a renewed plan, exactly one instance completes a plan its writer left, and the writer
that was only slow finds its plan taken and stops.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from processor.pipeline.control_topic import Lifecycle, read_control, set_lifecycle
from processor.pipeline.offsets_lease import Lease, LeaseLost, new_writer
from tests.integration.processes import Processor, pipeline_config, wait_for
from tidemark.core.config import Config
from tidemark.core.kafka import client_config, ensure_topics
from tidemark.core.ports import free_port
from tidemark.core.topics import change_topic, dataplane_group
from tidemark.devstack.stack import DevStack

COMPLETED = "completed the offsets write its writer left unfinished"


def group_offsets(config: Config, topic: str) -> list[int]:
    group = dataplane_group(config.processor.pipeline)
    admin = AdminClient(client_config(config.kafka))
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    return [tp.offset for tp in listed[group].result().topic_partitions if tp.topic == topic]


def test_a_renewed_write_is_left_alone_and_a_left_one_completed_by_one_instance(
    stack: DevStack,
) -> None:
    config = pipeline_config(stack, "lease", offsets_write_abandoned_s=6.0)
    topic = change_topic(config.source.topic_prefix, "public.iso_lease_t")
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 1}, 1)
    set_lifecycle(config, Lifecycle.STOPPED, "test")  # no instance rejoins after the write
    other = dataclasses.replace(
        config,
        processor=dataclasses.replace(
            config.processor, web_port=free_port(), state_dir=config.processor.state_dir + "-2"
        ),
    )
    processors = [Processor(stack, config, "lease-1"), Processor(stack, other, "lease-2")]
    try:
        for processor in processors:
            processor.start()
        plan = {
            "group": dataplane_group(config.processor.pipeline),
            "delete_group": False,
            "offsets": [[topic, 0, 0]],
            "positions": [],
            "reset_state": [],
        }
        lease = Lease(config, plan, new_writer("test"))
        lease.write()
        # A writer at work renews its plan: for more than twice the abandonment time,
        # nobody takes it.
        renewed_until = time.monotonic() + 13
        while time.monotonic() < renewed_until:
            lease.renew()
            current = read_control(config).offsets_write
            assert current is not None and current["writer"] == lease.writer
            time.sleep(0.2)
        assert not any("claiming" in p.log.read_text() for p in processors)

        # The writer stalls (a long pause): one instance claims the plan and completes it.
        wait_for("the plan released", lambda: read_control(config).offsets_write is None)
        logs = [p.log.read_text() for p in processors]
        assert sum(log.count(COMPLETED) for log in logs) == 1, logs
        assert group_offsets(config, topic) == [0]
        # The stalled writer wakes up: its plan was taken, it writes nothing more.
        with pytest.raises(LeaseLost):
            lease.renew()
        time.sleep(1)
        assert read_control(config).offsets_write is None
    finally:
        for processor in processors:
            processor.stop()
