"""Reading reconciled topics: offset ranges planned on the driver, read in executors.

Each topic-partition range becomes one Spark task that reads it with its own
confluent-kafka consumer (``assign``, no consumer group: the sink's offsets live
in the Iceberg tables, not in Kafka), so a cluster reads partitions in parallel.
Decoding happens in the executors too, with the processor's envelope parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.errors import InputError, RawMessage
from processor.json_codec import split_envelope
from spark_sink.schema import Column
from tidemark.config import Config
from tidemark.kafka import client_config, exact_end_offsets


@dataclass(frozen=True)
class Range:
    """Offsets ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int


def reader_config(config: Config) -> dict[str, Any]:
    """Settings of the executors' consumers (they never join a group)."""
    return client_config(
        config.kafka,
        **{
            "group.id": f"{config.processor.pipeline}-sink-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 3,
        },
    )


def sink_topics(admin: AdminClient, pattern: str) -> dict[str, int]:
    """Reconciled topics matching ``pattern`` and their partition counts."""
    matcher = re.compile(pattern)
    return {
        name: len(meta.partitions)
        for name, meta in admin.list_topics(timeout=10).topics.items()
        if matcher.match(name) and meta.error is None
    }


def end_offsets(kafka_conf: dict[str, Any], topic: str, partitions: int) -> dict[int, int]:
    """The end offset of every partition of ``topic``."""
    consumer = Consumer(kafka_conf)
    try:
        ends = exact_end_offsets(consumer, [TopicPartition(topic, p) for p in range(partitions)])
        return {p: end for (_t, p), end in ends.items()}
    finally:
        consumer.close()


def plan(
    topic: str, committed: dict[int, int], ends: dict[int, int], max_records: int
) -> list[Range]:
    """Ranges from the committed offsets to the ends, at most ``max_records`` each."""
    ranges = []
    for partition, end in sorted(ends.items()):
        start = committed.get(partition, 0)
        if end > start:
            ranges.append(Range(topic, partition, start, min(end, start + max_records)))
    return ranges


def read_messages(kafka_conf: dict[str, Any], r: Range) -> Iterator[RawMessage]:
    """The messages of one range, in offset order."""
    consumer = Consumer(kafka_conf)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        while position < r.end:
            for msg in consumer.consume(1000, 5.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise KafkaException(err)
                offset = msg.offset() or 0
                if offset >= r.end:
                    return
                position = offset + 1
                yield RawMessage(r.topic, r.partition, offset, msg.key(), msg.value())
    finally:
        consumer.close()


def latest_schema(
    kafka_conf: dict[str, Any], ranges: list[Range], lookback: int = 50
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(schema, sample row)`` of the newest non-tombstone event in ``ranges``.

    Read on the driver from the last few messages of each range; ``(None, None)``
    when the ranges end in tombstones only.
    """
    for r in ranges:
        window = Range(r.topic, r.partition, max(r.start, r.end - lookback), r.end)
        found: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)
        for msg in read_messages(kafka_conf, window):
            if msg.value is None:
                continue
            payload, schema = split_envelope(msg.value, msg)
            if isinstance(payload, dict) and isinstance(payload.get("after"), dict):
                found = (schema, payload["after"])
        if found[1] is not None:
            return found
    return None, None


def decode_range(
    kafka_conf: dict[str, Any], r: Range, key_names: list[str], columns: list[Column]
) -> Iterator[tuple[Any, ...]]:
    """Rows ``(offset, deleted, *columns)`` of one range; runs in an executor.

    A delete (``op = d`` or a tombstone) carries only the key columns.
    """
    converters = {c.name: c.convert for c in columns}
    width = len(columns)
    names = [c.name for c in columns]
    for msg in read_messages(kafka_conf, r):
        key = _key(msg)
        if msg.value is None:
            yield _delete(msg.offset, key, key_names, names, converters, width)
            continue
        payload, _schema = split_envelope(msg.value, msg)
        after = payload.get("after") if isinstance(payload, dict) else None
        if not isinstance(payload, dict) or payload.get("op") == "d" or after is None:
            yield _delete(msg.offset, key, key_names, names, converters, width)
            continue
        yield (msg.offset, False, *(converters[n](after.get(n)) for n in names))


def _delete(
    offset: int,
    key: dict[str, Any],
    key_names: list[str],
    names: list[str],
    converters: dict[str, Any],
    width: int,
) -> tuple[Any, ...]:
    values = [None] * width
    for name in key_names:
        values[names.index(name)] = converters[name](key.get(name))
    return (offset, True, *values)


def _key(msg: RawMessage) -> dict[str, Any]:
    if msg.key is None:
        raise InputError("reconciled event without a key", msg)
    try:
        doc = orjson.loads(msg.key)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"key is not JSON: {exc}", msg) from None
    if isinstance(doc, dict) and doc.keys() == {"schema", "payload"}:
        doc = doc["payload"]
    if not isinstance(doc, dict):
        raise InputError("key is not a JSON object of primary-key columns", msg)
    return doc


def key_names_of(kafka_conf: dict[str, Any], ranges: list[Range]) -> list[str]:
    """Primary-key column names, from the first key in ``ranges``."""
    for r in ranges:
        for msg in read_messages(kafka_conf, Range(r.topic, r.partition, r.start, r.start + 1)):
            return list(_key(msg))
    raise InputError(
        "no key found",
        RawMessage(ranges[0].topic, ranges[0].partition, ranges[0].start, None, None),
    )
