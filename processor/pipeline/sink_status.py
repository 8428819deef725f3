"""The sink's tables as the sink last published them (:mod:`spark_sink.status`).

Each table's last status among the newest records of ``<pipeline>.sink-status``: its
committed offsets, lag, last commit, and whether it stopped and why. Read from
Kafka alone, so the API shows the sink without an Iceberg client.
"""

from __future__ import annotations

from typing import Any

import orjson

from tidemark.core.config import Config
from tidemark.core.kafka import newest_by_key
from tidemark.core.topics import reader_group, sink_status_topic

#: The newest records a reader looks at for each table's last status.
SCANNED = 20_000


def read_sink_status(config: Config) -> list[dict[str, Any]]:
    """Each table's last published status, by table; records that are not one skipped."""
    pipeline = config.processor.pipeline
    last = newest_by_key(
        config.kafka, reader_group(pipeline, "sink-status"), sink_status_topic(pipeline), SCANNED
    )
    found = (status_of(raw) for raw in last.values())
    return sorted((s for s in found if s is not None), key=lambda s: str(s["table"]))


def status_of(raw: bytes | None) -> dict[str, Any] | None:
    """A table's status, or ``None`` for anything that is not one."""
    if raw is None:
        return None
    try:
        status = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(status, dict) or not isinstance(status.get("table"), str):
        return None
    return status
