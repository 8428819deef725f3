"""Snapshot control without a running processor: signals to the signal topic, status from progress.

``tidemark snapshot start|stop|pause|resume`` write a signal record to
``<pipeline>.signals`` (the coordinator acts on it when it runs, also if it is
started later); ``tidemark snapshot status`` reads the last progress record. The API
reads the notifications back too.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from processor.errors import FilterError, ProcessorError
from processor.snapshot.filters import check_filter
from processor.snapshot.progress import SnapshotState
from processor.snapshot.progress_record import read_progress
from processor.snapshot.signals import ExecuteSnapshot, parse_signal
from tidemark.core.config import Config
from tidemark.core.kafka import (
    client_config,
    ensure_topics,
    partition_counts,
    producer_config,
    queue_topic_config,
    read_newest,
    reader_config,
)
from tidemark.core.record_auth import record_keys
from tidemark.core.topics import notification_topic, progress_topic, reader_group, signal_topic


def send_signal(config: Config, kind: str, data: dict[str, Any], signal_id: str = "") -> str:
    """Write a signal to the pipeline's signal topic; its id (given or new)."""
    signal_id = signal_id or str(uuid.uuid4())
    body = orjson.dumps(data)
    signal = parse_signal(signal_id, kind, body)  # refuse here what the coordinator would
    if isinstance(signal, ExecuteSnapshot):
        for table, condition in signal.conditions.items():
            try:
                check_filter(condition)
            except FilterError as exc:
                raise FilterError(f"the filter of {table} is refused: {exc}") from None
    pipeline = config.processor.pipeline
    topic = signal_topic(pipeline)
    ensure_topics(
        AdminClient(client_config(config.kafka)),
        {topic: 1},
        config.kafka.replication_factor,
        config=queue_topic_config(config.kafka),
    )
    producer = Producer(producer_config(config.kafka))
    errors: list[str] = []
    producer.produce(
        topic,
        orjson.dumps({"id": signal_id, "type": kind, "data": data}),
        pipeline.encode(),
        0,
        lambda err, _msg: errors.append(err.str()) if err is not None else None,
    )
    if producer.flush(30) or errors:
        raise ProcessorError(f"the signal was not written to {topic}: {errors or 'timed out'}")
    return signal_id


def read_state(config: Config) -> SnapshotState | None:
    """The pipeline's snapshot progress; ``None`` when no coordinator has written any."""
    topic = progress_topic(config.processor.pipeline)
    admin = AdminClient(client_config(config.kafka))
    if topic not in partition_counts(admin, [topic]):
        return None
    consumer = Consumer(
        reader_config(config.kafka, reader_group(config.processor.pipeline, "status"))
    )
    try:
        return read_progress(consumer, topic, record_keys())
    finally:
        consumer.close()


def status_document(state: SnapshotState) -> dict[str, Any]:
    """The state as ``tidemark snapshot status --json`` prints it."""
    return {
        "paused": state.paused,
        "tables": [
            {**dataclasses.asdict(t), "percent": t.percent, "seconds_left": t.seconds_left}
            for t in state.tables
        ],
    }


#: The newest notifications one request looks at, and the most it answers.
NOTIFICATIONS_SCANNED, MAX_NOTIFICATIONS = 20_000, 1000


def read_notifications(config: Config, request: str | None, limit: int) -> dict[str, Any]:
    """The pipeline's newest notifications, in Debezium's format, newest first: of the
    snapshot request ``request`` only, when given. A record that is not a notification
    (anyone may write the topic) is counted in ``unreadable``, not shown."""
    consumer = Consumer(
        reader_config(config.kafka, reader_group(config.processor.pipeline, "notifications"))
    )
    found: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
    unreadable = 0
    try:
        records, complete = read_newest(
            consumer, notification_topic(config.processor.pipeline), NOTIFICATIONS_SCANNED
        )
        for msg in records:
            try:
                note = orjson.loads(msg.value() or b"")
            except orjson.JSONDecodeError:
                note = None
            extra = note.get("additional_data") if isinstance(note, dict) else None
            if not isinstance(extra, dict):
                unreadable += 1
                continue
            if request is None or extra.get("request_id") == request:
                found.append(((msg.timestamp()[1], msg.partition() or 0, msg.offset() or 0), note))
    finally:
        consumer.close()
    found.sort(key=lambda seen: seen[0], reverse=True)
    return {
        "notifications": [note for _at, note in found[:limit]],
        "complete": complete,
        "unreadable": unreadable,
    }
