"""Whether a table can be backfilled, and what reading it needs, worked out before its first chunk.

A table is refused (:class:`~processor.errors.SnapshotRefusedError`, which
aborts that table with its reason while the queue goes on) when:

- its topic uses another envelope than ``debezium-upsert`` (chunk rows are
  decided against per-key state);
- Debezium has no change topic for it yet, or the topic holds no event to
  learn the table's event layout from;
- the source has no such table, or no usable key;
- a column's type is one whose encoding the connector does not reproduce;
- its events were encoded under other connector value settings than ``source.debezium``
  (:mod:`processor.snapshot.encoding_check`), or put in partitions by another
  partitioner than ``source.partitioner``: its rows would differ from its changes in type,
  or land where its keys' changes do not;
- Debezium's key columns are not columns of the table.

A source that cannot be reached is not a refusal: the coordinator retries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.errors import ChunkError, SnapshotRefusedError, SourceUnavailableError
from processor.snapshot.chunk_events import TableShape
from processor.snapshot.chunk_reader import ChunkReader, TableInfo
from processor.snapshot.connector import Connector
from processor.snapshot.progress import TableProgress
from tidemark.config import Config
from tidemark.errors import TidemarkError
from tidemark.kafka import (
    ensure_topics,
    exact_end_offsets,
    partition_counts,
    read_range,
    record_topic_config,
)
from tidemark.partitioners import contradiction
from tidemark.schema_registry import SchemaCache
from tidemark.topics import backfill_topic, change_topic


@dataclass
class PreparedTable:
    """What reading one table needs."""

    info: TableInfo
    #: Key and value of one of Debezium's events of the table: the layout to reproduce.
    event: tuple[bytes, bytes]
    backfill: str


class TableChecks:
    """Prepares each table of a snapshot request once, while this instance leads."""

    def __init__(
        self,
        config: Config,
        connector: Connector,
        admin: AdminClient,
        probe: Consumer,
        schemas: SchemaCache | None,
    ) -> None:
        self._config = config
        self._connector = connector
        self._admin = admin
        self._probe = probe
        self._schemas = schemas
        self._prepared: dict[tuple[str, str], PreparedTable] = {}

    def prepare(self, entry: TableProgress, reader: ChunkReader) -> PreparedTable:
        """Check that ``entry``'s table can be backfilled and learn how its events look."""
        found = self._prepared.get((entry.table, entry.request_id))
        if found is not None:
            return found
        topic = change_topic(self._config.source.topic_prefix, entry.table)
        envelope = self._config.envelope_of(topic)
        if envelope != "debezium-upsert":
            raise SnapshotRefusedError(
                f"{entry.table} uses the {envelope} envelope; incremental snapshots need "
                "debezium-upsert (per-key state decides chunk rows against changes)"
            )
        counts = partition_counts(self._admin, [topic])
        if topic not in counts:
            raise SnapshotRefusedError(
                f"no change topic {topic}: Debezium has not captured {entry.table} yet"
            )
        try:
            info = reader.table_info(entry.table, entry.surrogate_key)
        except SourceUnavailableError:
            raise
        except ChunkError as exc:
            raise SnapshotRefusedError(str(exc)) from None
        try:
            columns = self._connector.columns(info)  # refuses a type it does not reproduce
        except TidemarkError as exc:
            raise SnapshotRefusedError(str(exc)) from None
        recent = recent_events(self._probe, topic, counts[topic])
        self._check_partitioner(topic, counts[topic], recent)
        event = max(recent, key=lambda e: e.timestamp, default=None)
        if event is None:
            raise SnapshotRefusedError(
                f"{topic} holds no Debezium event yet to learn the table's event layout from; "
                "change one row of the table (or let Debezium's initial snapshot run) and "
                "signal again"
            )
        try:
            shape = TableShape.learn(event.key, event.value, self._schemas)
        except (TidemarkError, ValueError) as exc:
            raise SnapshotRefusedError(f"cannot learn the events of {topic}: {exc}") from None
        settings = self._config.source.value_settings()
        disagreements = shape.disagreements(columns, settings, (e.value for e in recent))
        if disagreements:
            first = disagreements[0]
            raise SnapshotRefusedError(
                f"{entry.table} would be backfilled in another encoding than {topic}'s: {first}",
                reason=first.setting,
            )
        missing = [c for c in shape.key_columns if c not in info.columns]
        if missing:
            raise SnapshotRefusedError(
                f"Debezium's key columns {missing} are not columns of {entry.table}"
            )
        backfill = backfill_topic(self._config.processor.pipeline, topic)
        kafka = self._config.kafka
        ensure_topics(
            self._admin,
            {backfill: counts[topic]},
            kafka.replication_factor,
            config=record_topic_config(kafka),
        )
        prepared = PreparedTable(info, (event.key, event.value), backfill)
        self._prepared[(entry.table, entry.request_id)] = prepared
        return prepared

    def _check_partitioner(self, topic: str, count: int, recent: list[RecentEvent]) -> None:
        """Refuse a topic whose latest events contradict ``source.partitioner``: its rows
        would go where their keys' changes do not (a few strays do not count)."""
        configured = self._config.source.partitioner
        found = contradiction(configured, [(e.key, e.partition) for e in recent], count)
        if found is not None:
            raise SnapshotRefusedError(
                f"{topic} was not partitioned by {configured} (source.partitioner): {found}",
                reason="partitioner",
            )

    def forget(self, entry: TableProgress) -> None:
        """``entry``'s table is done."""
        self._prepared.pop((entry.table, entry.request_id), None)

    def clear(self) -> None:
        """Leadership lost: what was learned may be stale when it comes back."""
        self._prepared.clear()


class RecentEvent(NamedTuple):
    """A change event seen before a backfill: where it is, and its bytes."""

    partition: int
    timestamp: int
    key: bytes
    value: bytes


def recent_events(consumer: Consumer, topic: str, partitions: int) -> list[RecentEvent]:
    """The newest change events (up to 50) of each partition of ``topic``, tombstones skipped."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = exact_end_offsets(consumer, tps)
    out = []
    for (_topic, partition), end in ends.items():
        for msg in read_range(consumer, topic, partition, max(0, end - 50), end):
            key, value = msg.key(), msg.value()
            if key is not None and value is not None:
                out.append(RecentEvent(partition, msg.timestamp()[1], key, value))
    return out
