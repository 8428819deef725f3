"""Unwedge a consumer group whose leader is gone (the embedded broker, Tansu 0.6.0).

Tansu's group coordinator (``tansu-broker/src/coordinator/group/administrator.rs``
at v0.6.0) keeps a leader that is no longer a member while the group is forming:
when the leader sends LeaveGroup during a rebalance (a graceful stop while another
instance joins), or when a heartbeat removed it before the next join. Every
JoinGroup then names that leader, no one sends the SyncGroup only the leader may
send, and each follower's SyncGroup answers REBALANCE_IN_PROGRESS, forever: the
group has no partitions assigned until the broker restarts, which, memory-only,
loses every topic.

The coordinator drops a forming group's leader only when the leader is a member
whose session expired. So :func:`repair_group` joins under the lost leader's
member id (the broker checks no caller) and sends nothing more: a session
timeout later, the next join of a live member expires it, clears the leader,
and becomes the leader itself. Apache Kafka has no such defect: there the
probe's join and a join under a live leader's id would only cause rebalances.

A member sees the wedge as a rebalance that never ends: :class:`RebalanceWatch`
reads librdkafka's statistics, and the data plane and the snapshot coordinator
repair their own group once its join has not reached ``steady`` for
``kafka.stuck_rebalance_s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest

from tidemark.core.config import Config, KafkaConfig
from tidemark.core.kafka_aio import aiokafka_settings
from tidemark.core.topics import dataplane_group, snapshot_group

log = logging.getLogger(__name__)

#: Kafka's MEMBER_ID_REQUIRED: a first join learns its member id from the answer.
MEMBER_ID_REQUIRED = 79
#: An empty ``consumer`` protocol subscription (version 0, no topics, no user data).
NO_SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"


def repair_group(
    kafka: KafkaConfig, group: str, protocol: str = "range", timeout_s: float = 30.0
) -> str | None:
    """Make the lost leader of ``group`` a member that expires; its member id, or
    ``None`` when the group has no leader other than the probe (nothing to repair)."""
    return asyncio.run(asyncio.wait_for(_repair(kafka, group, protocol), timeout_s))


async def _repair(kafka: KafkaConfig, group: str, protocol: str) -> str | None:
    client = AIOKafkaClient(
        bootstrap_servers=kafka.bootstrap_servers,
        client_id="tidemark-group-repair",
        **aiokafka_settings(kafka.client_properties),
    )
    await client.bootstrap()
    try:
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)

        async def join(member: str) -> tuple[int, str, str]:
            request = JoinGroupRequest(
                group, 6000, 10000, member, None, "consumer", [(protocol, NO_SUBSCRIPTION)]
            )
            answer = await client.send(node, request)
            return answer.error_code, answer.member_id, answer.leader_id

        error, probe, _ = await join("")
        if error == MEMBER_ID_REQUIRED:
            error, probe, leader = await join(probe)
        else:
            leader = ""
        await client.send(node, LeaveGroupRequest(group, probe))
        if error or not leader or leader == probe:
            return None
        error, _, _ = await join(leader)
        log.warning("group %s: joined as its lost leader %s (%s)", group, leader, error)
        return leader
    finally:
        await client.close()


def pipeline_groups(pipeline: str) -> dict[str, str]:
    """The groups a processor joins, with their protocols: Faust's own (named after the
    pipeline, Faust's assignor), the data plane's and the snapshot coordinator's."""
    return {
        pipeline: "faust",
        dataplane_group(pipeline): "range",
        snapshot_group(pipeline): "range",
    }


def repair_pipeline_groups(config: Config) -> dict[str, str | None]:
    """:func:`repair_group` on every group of the pipeline."""
    return {
        group: repair_group(config.kafka, group, protocol)
        for group, protocol in pipeline_groups(config.processor.pipeline).items()
    }


class RebalanceWatch:
    """Whether a consumer's rebalance has gone on for longer than ``limit_s`` (0: never),
    from librdkafka's statistics: pass :meth:`observe` as the consumer's ``stats_cb``.

    A member with no partition in a group that formed is ``steady``; one whose group
    never forms goes round join and sync without reaching it.
    """

    #: How often librdkafka reports (``statistics.interval.ms``).
    INTERVAL_MS = 5000

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._steady_at = time.monotonic()

    def settings(self) -> dict[str, object]:
        """The consumer settings that feed :meth:`observe`."""
        if not self.limit_s:
            return {}
        return {"statistics.interval.ms": self.INTERVAL_MS, "stats_cb": self.observe}

    def observe(self, stats: str) -> None:
        if json.loads(stats).get("cgrp", {}).get("join_state") == "steady":
            self._steady_at = time.monotonic()

    def stuck(self) -> bool:
        return bool(self.limit_s) and time.monotonic() - self._steady_at > self.limit_s

    def restart(self) -> None:
        """Count from now (a new member, a repair just sent)."""
        self._steady_at = time.monotonic()


def repair_stuck(watch: RebalanceWatch, kafka: KafkaConfig, group: str) -> None:
    """Repair ``group`` once ``watch`` says its rebalance is stuck; errors are logged."""
    if not watch.stuck():
        return
    watch.restart()
    log.warning("group %s: no rebalance completed in %.0f s, repairing", group, watch.limit_s)
    try:
        repair_group(kafka, group)
    except Exception as exc:  # the broker may be away: the next stuck period tries again
        log.warning("group %s: the repair failed: %r", group, exc)
