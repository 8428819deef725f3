"""The pipeline's control topic: its lifecycle, and the offsets write in progress.

``<pipeline>.control`` has one partition and compacted keys. Every instance
reads it in full (assigned, never shared through a consumer group), so a
change reaches every replica:

- ``lifecycle``: ``RUNNING``, ``PAUSED`` (the data plane keeps its partitions
  and reads nothing) or ``STOPPED`` (the data plane leaves its consumer group;
  the web API stays up). A pipeline without the record runs.
- ``offsets-write``: an offsets write being applied (:mod:`processor.pipeline.offsets`).
  While it exists no data plane joins the group, so a write is seen whole or
  not at all; whoever finds one that its writer left behind completes it.
- ``removing:<input topic>``: a table being removed
  (:mod:`processor.pipeline.table_removal`). While it exists the data planes leave the
  topic (and its backfill topic) out of their subscription, and delete its state.

Writers (the API, the CLI) need no running processor: a pipeline stopped
before its processor starts stays stopped. A record that is not one Tidemark writes
(:mod:`processor.pipeline.control_records`) is refused with a log line and
``tidemark_control_records_refused_total``, and the view keeps what it had.

Each record carries the time it was written in a ``tidemark.at`` header, and a
released plan's tombstone names its writer (``tidemark.released``). With a record key
(:mod:`tidemark.core.record_auth`) every record is signed, and a reader refuses one that
is not; one written more than :data:`REPLAY_SKEW_MS` before the broker appended it (the
topic's ``message.timestamp.type`` is ``LogAppendTime``) or before its key's newest
record, both of which a copy of an old record written again is; a plan whose writer
released it; and a release that names another writer than the plan's. The topic keeps
tombstones for ten years, so that a key's newest time outlives compaction. (Compaction
keeps a copy and drops the original: only the broker's append time tells it then.)
"""

from __future__ import annotations

import enum
import logging
import re
import time
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.errors import ProcessorError
from processor.pipeline.control_records import (
    REMOVING_PREFIX,
    ControlRecordError,
    checked_time,
    lifecycle_record,
    plan_record,
    removal_record,
)
from tidemark.core.config import Config
from tidemark.core.kafka import (
    client_config,
    consumer_config,
    data_messages,
    ensure_topics,
    exact_end_offsets,
    headers_of,
    producer_config,
    read_range,
    reader_config,
    record_topic_config,
)
from tidemark.core.record_auth import KEY_ENV, MAC_HEADER, record_keys
from tidemark.core.topics import control_topic, reader_group

LIFECYCLE = b"lifecycle"
OFFSETS_WRITE = b"offsets-write"
AT_HEADER = "tidemark.at"
RELEASED_HEADER = "tidemark.released"
#: How much older than its key's newest record a record may be (clocks of two writers
#: differ); an older one is a copy written again, and refused where records are signed.
REPLAY_SKEW_MS = 60_000
#: How long the control topic keeps a tombstone: its time must outlive compaction.
TOMBSTONE_RETENTION_MS = 3650 * 24 * 3600 * 1000
#: How many released writers a view remembers.
_RELEASED_KEPT = 1000

log = logging.getLogger(__name__)


class Lifecycle(enum.Enum):
    """What the pipeline's data planes are asked to do."""

    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"


def write_control(
    config: Config, key: bytes, value: dict[str, Any] | None, released: str = ""
) -> None:
    """Write one control record (``None``: delete the key; ``released``: the writer of the
    plan a tombstone releases), signed where a record key is set, and wait for Kafka to
    keep it."""
    topic = _ensure_control_topic(config)
    producer = Producer(producer_config(config.kafka))
    errors: list[str] = []
    at_ms = int(time.time() * 1000)
    body = None if value is None else orjson.dumps({**value, "at_ms": at_ms})
    headers: list[tuple[str, str | bytes | None]] = [(AT_HEADER, str(at_ms).encode())]
    if released:
        headers.append((RELEASED_HEADER, released.encode()))
    keys = record_keys()
    if keys is not None:
        headers.append(keys.sign(topic, 0, key, body, headers))
    elif _signed(config, topic):
        raise ProcessorError(
            f"the control records of pipeline {config.processor.pipeline!r} are signed: set "
            f"{KEY_ENV} (the processors' record key) to write one; unsigned, every instance "
            "would refuse it"
        )
    producer.produce(
        topic,
        body,
        key,
        0,
        lambda err, _msg: errors.append(err.str()) if err is not None else None,
        headers=headers,
    )
    if producer.flush(30) or errors:
        raise ProcessorError(
            f"the control record was not written to {topic}: {errors or 'timeout'}"
        )


def set_lifecycle(config: Config, state: Lifecycle, by: str) -> None:
    """Ask every instance of the pipeline to go to ``state``."""
    write_control(config, LIFECYCLE, {"state": state.value, "by": by})


class ControlView:
    """The control topic's current records (of ``config``'s pipeline), and how to read
    them."""

    def __init__(self, config: Config) -> None:
        self.records: dict[bytes, dict[str, Any]] = {}
        self._pipeline = config.processor.pipeline
        self._topic = control_topic(self._pipeline)
        self._inputs = re.compile(config.input_pattern())
        self._keys = record_keys()
        #: Each key's newest record time, and the writers of released plans (signed only).
        self._newest: dict[bytes, int] = {}
        self._released: dict[str, None] = {}

    def apply(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Any = None,
        appended_ms: int | None = None,
        offset: int | None = None,
    ) -> None:
        """Apply one record (``headers``: the message's; ``appended_ms``: when the broker
        appended it, where the topic's timestamps are the broker's): a tombstone deletes
        its key; a record Tidemark does not write is refused (logged and counted), and the
        key keeps its value."""
        if key is None or not (
            key in (LIFECYCLE, OFFSETS_WRITE) or key.startswith(REMOVING_PREFIX)
        ):
            return  # no key Tidemark reads
        try:
            record = self._checked(key, value, headers, appended_ms)
        except ControlRecordError as exc:
            name = key.decode()
            log.error(
                "control record %r of pipeline %s at offset %s refused: %s",
                name,
                self._pipeline,
                offset,
                exc,
            )
            metrics.CONTROL_REFUSED.labels(name).inc()
            return
        if record is None:
            self.records.pop(key, None)
        else:
            self.records[key] = record

    def _checked(
        self, key: bytes, value: bytes | None, headers: Any, appended_ms: int | None
    ) -> dict[str, Any] | None:
        """The record, if it is one Tidemark wrote (``None``: a tombstone)."""
        if self._keys is None:
            if value is None:
                return None
            return self._record(key, value)
        if not self._keys.verify(self._topic, 0, key, value, headers):
            raise ControlRecordError("not signed with the pipeline's record key")
        found = dict(headers or ())
        at_ms = checked_time(found.get(AT_HEADER))
        if appended_ms is not None and abs(at_ms - appended_ms) > REPLAY_SKEW_MS:
            raise ControlRecordError(
                f"written at {at_ms} but appended at {appended_ms}: a copy written again, "
                "or a writer whose clock is off"
            )
        newest = self._newest.get(key, 0)
        if at_ms < newest - REPLAY_SKEW_MS:
            raise ControlRecordError(
                f"written at {at_ms}, before the key's newest record ({newest}): a copy"
            )
        record = None
        if value is None:
            released = found.get(RELEASED_HEADER)
            name = released.decode(errors="replace") if isinstance(released, bytes) else ""
            current = self.records.get(key)
            if current is not None and key == OFFSETS_WRITE and current.get("writer") != name:
                # Another writer's plan (a claim came meanwhile, or an old release written
                # again): it stays, to be released by its own writer.
                log.info("a release of %r leaves the plan of %r", name, current.get("writer"))
                return current
            if name:
                self._released[name] = None
                while len(self._released) > _RELEASED_KEPT:
                    del self._released[next(iter(self._released))]
        else:
            record = self._record(key, value)
            if key == OFFSETS_WRITE and record.get("writer") in self._released:
                raise ControlRecordError(f"a plan of writer {record['writer']}, released")
        self._newest[key] = max(newest, at_ms)
        return record

    def _record(self, key: bytes, value: bytes) -> dict[str, Any]:
        """The record ``value`` of ``key``, checked."""
        if key == LIFECYCLE:
            return lifecycle_record(value)
        if key == OFFSETS_WRITE:
            return plan_record(value, self._pipeline, self._inputs)
        return removal_record(value, key, self._inputs)

    def read_to_end(self, consumer: Consumer, topic: str) -> int:
        """Apply every record of ``topic`` up to its end; the end offset."""
        end = exact_end_offsets(consumer, [TopicPartition(topic, 0)])[(topic, 0)]
        for msg in read_range(consumer, topic, 0, 0, end):
            self.apply(msg.key(), msg.value(), headers_of(msg), _appended_ms(msg), msg.offset())
        return end

    @property
    def lifecycle(self) -> Lifecycle:
        record = self.records.get(LIFECYCLE)
        return Lifecycle(record["state"]) if record else Lifecycle.RUNNING

    @property
    def offsets_write(self) -> dict[str, Any] | None:
        return self.records.get(OFFSETS_WRITE)

    @property
    def removing(self) -> set[str]:
        """The input topics of the tables being removed."""
        return {r["topic"] for k, r in self.records.items() if k.startswith(REMOVING_PREFIX)}


def read_control(config: Config) -> ControlView:
    """The control topic read once to its end (no records: a running pipeline)."""
    view = ControlView(config)
    topic = control_topic(config.processor.pipeline)
    if topic not in AdminClient(client_config(config.kafka)).list_topics(timeout=10).topics:
        return view
    consumer = Consumer(_reader_config(config, once=True))
    try:
        view.read_to_end(consumer, topic)
    finally:
        consumer.close()
    return view


class ControlReader(ControlView):
    """Follows the control topic from its beginning, for one instance's data plane."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        topic = _ensure_control_topic(config)
        self._consumer = Consumer(_reader_config(config))
        end = self.read_to_end(self._consumer, topic)
        self._consumer.assign([TopicPartition(topic, 0, end or OFFSET_BEGINNING)])

    def poll(self) -> None:
        """Apply the records written since the last call (does not wait)."""
        for msg in data_messages(self._consumer.consume(100, 0)):
            self.apply(msg.key(), msg.value(), headers_of(msg), _appended_ms(msg), msg.offset())

    def close(self) -> None:
        self._consumer.close()


def _signed(config: Config, topic: str) -> bool:
    """Whether a record of the control topic is signed (a writer without the key meets a
    pipeline with one)."""
    consumer = Consumer(_reader_config(config, once=True))
    try:
        end = exact_end_offsets(consumer, [TopicPartition(topic, 0)])[(topic, 0)]
        return any(
            MAC_HEADER in dict(headers_of(msg) or ())
            for msg in read_range(consumer, topic, 0, 0, end)
        )
    finally:
        consumer.close()


def _appended_ms(msg: Message) -> int | None:
    """When the broker appended ``msg``, if the topic's timestamps are the broker's (the
    embedded broker keeps the writer's, whatever the topic says)."""
    kind, ms = msg.timestamp()
    return ms if kind == TIMESTAMP_LOG_APPEND_TIME else None


def _ensure_control_topic(config: Config) -> str:
    """Create the pipeline's control topic if it is missing; its name."""
    topic = control_topic(config.processor.pipeline)
    ensure_topics(
        AdminClient(client_config(config.kafka)),
        {topic: 1},
        config.kafka.replication_factor,
        config=record_topic_config(
            config.kafka,
            **{
                "cleanup.policy": "compact",
                "delete.retention.ms": str(TOMBSTONE_RETENTION_MS),
                # the broker's clock, not the writer's: a copy written again is told apart
                "message.timestamp.type": "LogAppendTime",
            },
        ),
    )
    return topic


def _reader_config(config: Config, once: bool = False) -> dict[str, Any]:
    """A reader's settings (``once``: for one read, then closed; otherwise one that tails).
    A group id is required by librdkafka; the reader only assigns and never commits."""
    settings = reader_config if once else consumer_config
    return settings(config.kafka, reader_group(config.processor.pipeline, "control"))
