"""Reading reconciled topics: offset ranges planned on the driver, read in executors.

Each topic-partition range becomes one Spark task that reads it with its own
confluent-kafka consumer (``assign``, no consumer group: the sink's offsets live
in the Iceberg tables, not in Kafka), so a cluster reads partitions in parallel.
Decoding happens in the executors too, with the processor's decoders
(:mod:`spark_sink.events`).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from pyspark.sql.types import StructType, _make_type_verifier

from spark_sink.errors import SchemaError, TableRetry, TableStop
from spark_sink.events import Decoded, EventDecoder, RowBuilder, specs_of
from spark_sink.gaps import BROKER_DELETE_RETENTION_MS, FirstUnread
from spark_sink.history import MERGE_ONLY, NO_METADATA, Keeping, Metadata
from spark_sink.schema import Spec
from tidemark.core.config import Config, KafkaConfig
from tidemark.core.errors import InputError
from tidemark.core.failpoints import Failpoint
from tidemark.core.kafka import (
    FETCH_QUEUE_BACKOFF,
    client_config,
    ends_past_stable,
    exact_end_offsets,
)
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache, configured_schemas
from tidemark.core.topics import reader_group


@dataclass(frozen=True)
class Range:
    """Offsets ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int
    #: Read ``read_uncommitted``: the range goes past a last stable offset the broker
    #: holds back for good (:mod:`spark_sink.stable_ends`), which a ``read_committed``
    #: reader would take for the partition's end.
    uncommitted: bool = False


@dataclass(frozen=True)
class ReadContext:
    """What an executor needs to read and decode: consumer settings and the registry."""

    consumer: dict[str, Any]
    kafka: KafkaConfig
    #: The driver's process id: the crash tests' failpoints in executors kill the driver.
    driver_pid: int
    #: Seconds a range's reader waits for a record before its batch is tried again.
    stall_s: float = 60.0

    def schemas(self) -> SchemaCache | None:
        """A registry cache of this executor's own."""
        return configured_schemas(self.kafka)


def read_context(config: Config, driver_pid: int) -> ReadContext:
    """Settings of the executors' consumers (they never join a group)."""
    consumer = client_config(
        config.kafka,
        **{
            "group.id": reader_group(config.processor.pipeline, "sink-reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # Responses of librdkafka's default 50 MB, against its default 64 MB prefetch
            # queue, leave no room to fetch ahead: reading ran at a quarter of the speed
            # (21k against 99k records/s of 3.5 kB here).
            "fetch.max.bytes": 4 << 20,
            **FETCH_QUEUE_BACKOFF,
            "log_level": 3,
        },
    )
    return ReadContext(consumer, config.kafka, driver_pid, config.sink.read_stall_s)


def sink_topics(
    admin: AdminClient,
    pattern: str,
    names: list[str],
    settle_s: float = 5.0,
    pause_s: float = 0.5,
) -> dict[str, int]:
    """Reconciled topics named in ``names`` or matching ``pattern``, with partition counts.

    A topic the broker lists without its partitions, or with an error (one it has just
    created, here), is listed again for up to ``settle_s``, then left out until the
    next listing: read as it was, it would have no partition to drain.
    """
    matcher = re.compile(pattern) if pattern else None
    deadline = time.monotonic() + settle_s
    while True:
        wanted = {
            name: meta
            for name, meta in admin.list_topics(timeout=10).topics.items()
            if name in names or (matcher and matcher.match(name))
        }
        ready = {
            n: len(m.partitions) for n, m in wanted.items() if m.error is None and m.partitions
        }
        if len(ready) == len(wanted) or time.monotonic() >= deadline:
            return ready
        time.sleep(pause_s)


class Offsets(NamedTuple):
    """A topic's offsets per partition: its first offsets, its ends for a
    ``read_committed`` reader (the last stable offsets), and its high watermarks where
    they are above those (:mod:`spark_sink.stable_ends`)."""

    starts: dict[int, int]
    stable: dict[int, int]
    high: dict[int, int]


def topic_offsets(consumer_conf: dict[str, Any], topic: str, partitions: int) -> Offsets:
    """The :class:`Offsets` of every partition of ``topic``."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = Consumer(consumer_conf)
    try:
        starts = {tp.partition: max(0, consumer.get_watermark_offsets(tp, 10)[0]) for tp in tps}
        stable = {p: end for (_t, p), end in exact_end_offsets(consumer, tps).items()}
    finally:
        consumer.close()
    every = Consumer({**consumer_conf, "isolation.level": "read_uncommitted"})
    try:
        high = ends_past_stable(every, {(topic, p): end for p, end in stable.items()})
    finally:
        every.close()
    return Offsets(starts, stable, {p: end for (_t, p), end in high.items()})


def first_unread(
    context: ReadContext, topic: str, committed: dict[int, int]
) -> dict[int, FirstUnread]:
    """The first record at or after each partition's ``committed`` offset (one past it
    where compaction removed the record there): :mod:`spark_sink.gaps` dates the unread
    records by it. A partition that sends none within ``context.stall_s`` is left out."""
    consumer = Consumer(context.consumer)
    found: dict[int, FirstUnread] = {}
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in committed.items()])
        deadline = time.monotonic() + context.stall_s
        while len(found) < len(committed) and time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.2):
                partition = msg.partition() or 0
                if msg.error() is None and partition not in found:
                    found[partition] = FirstUnread(msg.offset() or 0, msg.timestamp()[1])
        return found
    finally:
        consumer.close()


def delete_retention_ms(admin: AdminClient, topic: str) -> int | None:
    """``topic``'s ``delete.retention.ms`` (the broker's default where it does not say), or
    ``None`` for a topic that is not compacted; :class:`TableRetry` if Kafka cannot say."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        found = admin.describe_configs([resource], request_timeout=10)[resource].result()
    except KafkaException as exc:
        raise TableRetry(f"{topic}: its settings cannot be read: {exc.args[0].str()}") from None
    policy = found.get("cleanup.policy")
    if policy is None or "compact" not in (policy.value or ""):
        return None
    retention = found.get("delete.retention.ms")
    return BROKER_DELETE_RETENTION_MS if retention is None else int(retention.value)


def plan(
    topic: str,
    committed: dict[int, int],
    ends: dict[int, int],
    max_records: int,
    starts: dict[int, int] | None = None,
) -> list[Range]:
    """Ranges from the committed offsets (a partition never committed: from its first
    offset in ``starts``) to the ends, at most ``max_records`` each."""
    ranges = []
    for partition, end in sorted(ends.items()):
        start = committed.get(partition, (starts or {}).get(partition, 0))
        if end > start:
            ranges.append(Range(topic, partition, start, min(end, start + max_records)))
    return ranges


def split(ranges: list[Range], tasks: int, smallest: int = 5000) -> list[Range]:
    """``ranges`` cut into pieces of similar size, about ``tasks`` of them (none under
    ``smallest`` records unless its range is), so that every core reads."""
    total = sum(r.end - r.start for r in ranges)
    size = max(smallest, -(-total // max(tasks, 1)))
    pieces = []
    for r in ranges:
        count = -(-(r.end - r.start) // size)
        step = -(-(r.end - r.start) // count)
        pieces += [
            dataclasses.replace(r, start=start, end=min(r.end, start + step))
            for start in range(r.start, r.end, step)
        ]
    return pieces


def read_messages(context: ReadContext, r: Range) -> Iterator[Message]:
    """The messages of one range, in offset order; :class:`TableRetry` when none comes for
    ``context.stall_s`` (Kafka paused, a partition's leader gone)."""
    settings = context.consumer
    if r.uncommitted:
        settings = {**settings, "isolation.level": "read_uncommitted"}
    consumer = Consumer(settings)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        stalled = time.monotonic() + context.stall_s
        while position < r.end:
            # consume() waits for a full batch or the timeout: keep the timeout short
            messages = consumer.consume(1000, 0.2)
            if messages:
                stalled = time.monotonic() + context.stall_s
            elif time.monotonic() > stalled:
                raise TableRetry(
                    f"{r.topic}[{r.partition}]: no record after {position} in {context.stall_s} s"
                )
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    if err.fatal():
                        raise KafkaException(err)
                    raise TableRetry(f"{r.topic}[{r.partition}] at {position}: {err.str()}")
                offset = msg.offset() or 0
                if offset >= r.end:
                    return
                position = offset + 1
                yield msg
    finally:
        consumer.close()


def _raw(msg: Message) -> RawMessage:
    return RawMessage(
        msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()
    )


def _decoded(decoder: EventDecoder, msg: Message) -> Decoded:
    try:
        return decoder.decode(_raw(msg))
    except (InputError, SchemaError) as exc:
        raise TableStop(str(exc)) from None


def _with_metadata(decoder: EventDecoder, msg: Message) -> tuple[Decoded, Metadata | None]:
    try:
        return decoder.decode_with_metadata(_raw(msg))
    except (InputError, SchemaError) as exc:
        raise TableStop(str(exc)) from None


def _key_names(decoder: EventDecoder, msg: Message) -> list[str]:
    raw = RawMessage(msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(), None)
    try:
        return list(decoder.key(raw))
    except (InputError, SchemaError) as exc:
        raise TableStop(str(exc)) from None


def sample(
    context: ReadContext, ranges: list[Range], lookback: int = 50
) -> tuple[list[Spec], list[str]]:
    """``(column specs, key names)`` from the last few events of every range (on the driver).

    The newest events carry the newest schema; an older schema the sample missed
    shows up as :class:`~spark_sink.events.SchemaDrift` while the batch runs.
    """
    decoder = EventDecoder(context.schemas())
    specs: list[Spec] = []
    keys: list[str] = []
    for r in ranges:
        window = dataclasses.replace(r, start=max(r.start, r.end - lookback))
        for msg in read_messages(context, window):
            if not keys:
                keys = _key_names(decoder, msg)
            specs += specs_of(_decoded(decoder, msg))
    return specs, keys


def scan(context: ReadContext, r: Range) -> Iterator[Spec]:
    """The distinct column specs of every event in one range (in an executor)."""
    decoder = EventDecoder(context.schemas())
    seen: set[Spec] = set()
    for msg in read_messages(context, r):
        for spec in specs_of(_decoded(decoder, msg)):
            if spec not in seen:
                seen.add(spec)
                yield spec


def decode_range(
    context: ReadContext,
    r: Range,
    planned: list[Spec],
    key_names: list[str],
    schema: StructType,
    keeping: Keeping = MERGE_ONLY,
) -> Iterator[tuple[Any, ...]]:
    """Rows ``(offset, deleted, time, *planned columns)`` of one range (in an executor),
    each checked against ``schema`` (the rows' Spark schema) here, where a value that
    does not fit its column can stop its table alone. A table that keeps metadata gets
    each event's after the columns (:data:`~spark_sink.history.BATCH_COLUMNS`); an
    ``append`` table no tombstones, and no event without Tidemark's position.

    A delete (``op = d`` or a tombstone) carries only the key columns. The range's last
    event must be keyed by the table's key columns: a source whose primary key changed
    writes every later event with the new key, and a merge on the old one would fold
    rows of different keys together, so the table stops before it (the range's events
    are all read before the batch's commit).
    """
    decoder = EventDecoder(context.schemas())
    builder = RowBuilder(planned, key_names)
    failpoint = Failpoint("sink-read", victim=context.driver_pid)
    verify = _make_type_verifier(schema)  # what createDataFrame would check, pyspark pinned
    last: Message | None = None
    deleted: tuple[bytes | None, Metadata] | None = None  # the last delete's key and metadata
    for msg in read_messages(context, r):
        failpoint.passed()
        if keeping.metadata:
            decoded, metadata = _with_metadata(decoder, msg)
            if metadata is None and keeping.append:
                last = msg
                continue  # a tombstone: the delete before it is the version
            if metadata is None and deleted is not None and deleted[0] == msg.key():
                metadata = deleted[1]  # the tombstone after a delete: that delete's
            deleted = (msg.key(), metadata) if decoded[0] and metadata is not None else None
            if metadata is not None and metadata[-1] is None and keeping.append:
                raise TableStop(
                    f"{r.topic}[{r.partition}] at {msg.offset()}: an event without Tidemark's "
                    "position cannot be kept in an append table (is it the processor's?)"
                )
            built = builder.row(msg.offset() or 0, msg.timestamp()[1], decoded)
            row = built + (metadata or NO_METADATA)
        else:
            row = builder.row(msg.offset() or 0, msg.timestamp()[1], _decoded(decoder, msg))
        try:
            verify(row)
        except (TypeError, ValueError) as exc:
            raise TableStop(f"{r.topic}[{r.partition}] at {msg.offset()}: {exc}") from None
        last = msg
        yield row
    if last is not None:
        _check_key(decoder, last, key_names)


def _check_key(decoder: EventDecoder, msg: Message, key_names: list[str]) -> None:
    """:class:`TableStop` if ``msg``'s key columns are not the table's ``key_names``."""
    found = _key_names(decoder, msg)
    if set(found) != set(key_names):
        raise TableStop(
            f"{msg.topic()}[{msg.partition()}] at {msg.offset()}: the events are keyed by "
            f"{sorted(found)}, the table by {sorted(key_names)}: the source's primary key "
            "changed; re-key the table (docs: Guarantees, primary keys that change)"
        )
