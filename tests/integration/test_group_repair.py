"""The embedded broker wedges a group whose leader leaves mid-rebalance; the repair
(``tidemark dev repair-groups``) unwedges it."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from tests.integration.processes import Processor, pipeline_config, run_cli
from tidemark.cli.devstack.stack import DevStack
from tidemark.kafka import client_config, consumer_config, ensure_topics
from tidemark.topics import dataplane_group

pytestmark = pytest.mark.integration


def assigned_within(consumer: Consumer, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    return bool(consumer.assignment())


def test_a_group_whose_leader_left_mid_rebalance_is_repaired(stack: DevStack) -> None:
    config = pipeline_config(stack, f"wedge{uuid.uuid4().hex[:6]}")
    group, topic = dataplane_group(config.processor.pipeline), f"{config.processor.pipeline}.t"
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 2})
    settings = {"partition.assignment.strategy": "range"}
    leader = Consumer(consumer_config(config.kafka, group, **settings))
    leader.subscribe([topic])
    assert assigned_within(leader, 30)
    follower = Consumer(consumer_config(config.kafka, group, **settings))
    try:
        follower.subscribe([topic])
        follower.poll(0.5)  # its join is under way: the group is forming
        leader.close()  # the leader leaves now
        assert not assigned_within(follower, 15), "the broker no longer wedges the group"
        repaired = run_cli(Processor(stack, config, "wedge"), "dev", "repair-groups")
        assert repaired.returncode == 0, repaired.stderr
        assert f"{group}: lost leader rdkafka-" in repaired.stdout
        assert assigned_within(follower, 30)
        assert {tp.partition for tp in follower.assignment()} == {0, 1}
    finally:
        follower.close()
