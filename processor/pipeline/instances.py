"""Which instances run the pipeline, and which partitions each holds: told by themselves.

The broker's description of a consumer group does not say which member holds
which partition here (the development broker answers UNKNOWN), so every
instance reports itself: every :data:`REPORT_EVERY_S` seconds it writes its status
(the one ``GET /pipelines/{name}/status`` answers, with who it is) under its own
key to the compacted topic ``<pipeline>.instances``, and a tombstone when it
stops. A reader takes each instance's last report among the topic's newest
records and leaves out those older than :data:`STALE_AFTER_S` (an instance that
was killed writes no tombstone).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterable
from typing import Any

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tidemark.core.config import Config
from tidemark.core.kafka import (
    Acknowledgements,
    client_config,
    ensure_topics,
    newest_by_key,
    producer_config,
    record_topic_config,
)
from tidemark.core.topics import instances_topic, reader_group

REPORT_EVERY_S = 5.0
#: A report older than this is of an instance that stopped without saying so.
STALE_AFTER_S = 30.0
#: The newest records a reader looks at for the last reports.
SCANNED = 5_000


def instance_id() -> str:
    """Who this process is: its host (a pod's name on Kubernetes), its pid, and a random
    part, so that a restarted process with the same pid is another instance."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Reporter:
    """Writes this instance's reports."""

    def __init__(self, config: Config, instance: str | None = None) -> None:
        self.instance = instance or instance_id()
        self.started_ms = int(time.time() * 1000)
        self._topic = instances_topic(config.processor.pipeline)
        ensure_topics(
            AdminClient(client_config(config.kafka)),
            {self._topic: 1},
            config.kafka.replication_factor,
            config=record_topic_config(config.kafka, **{"cleanup.policy": "compact"}),
        )
        self._producer = Producer(producer_config(config.kafka, **{"linger.ms": 0}))
        self._acks = Acknowledgements(self._producer)

    def report(self, status: dict[str, Any]) -> None:
        """Write ``status`` as this instance's report, acknowledged."""
        document = {
            **status,
            "instance": self.instance,
            "started_ms": self.started_ms,
            "reported_ms": int(time.time() * 1000),
        }
        self._send(orjson.dumps(document))

    def close(self) -> None:
        """Say this instance has stopped (a tombstone)."""
        self._send(None)

    def _send(self, value: bytes | None) -> None:
        self._producer.produce(
            self._topic, value, self.instance.encode(), 0, on_delivery=self._acks.on_delivery
        )
        self._acks.wait("instance report", timeout=10.0)


def read_instances(config: Config, now_ms: int | None = None) -> list[dict[str, Any]]:
    """The last report of every instance that reported in the last :data:`STALE_AFTER_S`
    seconds and has not stopped, by instance. Records that are not reports are skipped."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    pipeline = config.processor.pipeline
    last = newest_by_key(
        config.kafka, reader_group(pipeline, "instances"), instances_topic(pipeline), SCANNED
    )
    return alive(map(report_of, last.values()), now_ms)


def alive(reports: Iterable[dict[str, Any] | None], now_ms: int) -> list[dict[str, Any]]:
    """The reports (each instance's last) of instances that still run, by instance."""
    horizon = now_ms - STALE_AFTER_S * 1000
    running = [r for r in reports if r is not None and r["reported_ms"] >= horizon]
    return sorted(running, key=lambda r: str(r["instance"]))


def report_of(raw: bytes | None) -> dict[str, Any] | None:
    """A report, or ``None`` for a tombstone or anything that is not one."""
    if raw is None:
        return None
    try:
        report = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if (
        not isinstance(report, dict)
        or not isinstance(report.get("instance"), str)
        or not isinstance(report.get("reported_ms"), int)
        or not isinstance(report.get("assigned_partitions"), list)
    ):
        return None
    return report


def holders(instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each partition reported, with the instance that holds it (by topic, partition)."""
    held = []
    for report in instances:
        for tp in report["assigned_partitions"]:
            if isinstance(tp, dict) and {"topic", "partition"} <= tp.keys():
                held.append(
                    {
                        "topic": tp["topic"],
                        "partition": tp["partition"],
                        "instance": report["instance"],
                    }
                )
    return sorted(held, key=lambda h: (str(h["topic"]), str(h["partition"]), str(h["instance"])))
