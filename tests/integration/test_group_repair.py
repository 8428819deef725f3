"""The embedded broker wedges a group whose leader leaves mid-rebalance: ``tidemark dev
repair-groups`` unwedges it, and so does a processor that finds itself in it."""

from __future__ import annotations

import dataclasses
import time
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from tests.integration.processes import Processor, pipeline_config, run_cli, wait_for
from tidemark.core.config import Config
from tidemark.core.kafka import client_config, consumer_config, ensure_topics
from tidemark.core.topics import dataplane_group
from tidemark.devstack.stack import DevStack


def assigned_within(consumer: Consumer, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    return bool(consumer.assignment())


def wedge(config: Config, topic: str) -> Consumer:
    """Wedge the pipeline's data-plane group: its leader leaves while a second member
    joins. The second member, still in the group, is returned."""
    group = dataplane_group(config.processor.pipeline)
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 2})
    settings = {"partition.assignment.strategy": "range"}
    leader = Consumer(consumer_config(config.kafka, group, **settings))
    leader.subscribe([topic])
    assert assigned_within(leader, 30)
    follower = Consumer(consumer_config(config.kafka, group, **settings))
    follower.subscribe([topic])
    follower.poll(0.5)  # its join is under way: the group is forming
    leader.close()  # the leader leaves now
    # a join takes about 3 s here: 6 s without partitions is a wedge (the repairs' own
    # assertions then prove that the group had lost its leader)
    assert not assigned_within(follower, 6), "the broker no longer wedges the group"
    return follower


def test_repair_groups_unwedges_a_group_whose_leader_left(stack: DevStack) -> None:
    config = pipeline_config(stack, f"wedge{uuid.uuid4().hex[:6]}")
    follower = wedge(config, f"{config.processor.pipeline}.t")
    try:
        repaired = run_cli(Processor(stack, config, "wedge"), "dev", "repair-groups")
        assert repaired.returncode == 0, repaired.stderr
        group = dataplane_group(config.processor.pipeline)
        assert f"{group}: lost leader rdkafka-" in repaired.stdout
        assert assigned_within(follower, 30)
        assert {tp.partition for tp in follower.assignment()} == {0, 1}
    finally:
        follower.close()


def test_a_processor_in_a_wedged_group_repairs_it(stack: DevStack) -> None:
    name = f"stuck{uuid.uuid4().hex[:6]}"
    config = pipeline_config(stack, name)
    config = dataclasses.replace(
        config,
        kafka=dataclasses.replace(config.kafka, max_poll_interval_ms=6000, stuck_rebalance_s=20.0),
    )
    topic = f"{config.source.topic_prefix}.public.iso_{name}_t"
    wedge(config, topic).close()  # the wedge outlives its members
    processor = Processor(stack, config, f"{name}-processor").start()
    try:
        wait_for(
            "the processor's partitions",
            lambda: processor.health().get("assigned_partitions") == 2,
            timeout=120,
        )
        assert "no rebalance completed in 20 s, repairing" in processor.log.read_text()
    finally:
        processor.stop()


def test_a_data_plane_with_no_input_topic_yet_repairs_nothing(stack: DevStack) -> None:
    """A pipeline whose tables have no topic yet subscribes to nothing: no rebalance is
    awaited, so none is "stuck" and its group is not repaired again and again."""
    name = f"idle{uuid.uuid4().hex[:6]}"
    config = pipeline_config(stack, name)
    kafka = dataclasses.replace(
        config.kafka,
        heartbeat_interval_ms=500,
        session_timeout_ms=2000,
        max_poll_interval_ms=2000,
        stuck_rebalance_s=6.0,
    )
    config = dataclasses.replace(config, kafka=kafka)
    processor = Processor(stack, config, f"{name}-processor").start()
    try:
        wait_for("the coordinator", lambda: processor.health().get("snapshots") == "leader")
        time.sleep(14)  # two stuck periods
        assert f"group {name}-dataplane: no rebalance" not in processor.log.read_text()
    finally:
        processor.stop()
