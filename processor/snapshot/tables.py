"""Whether a table can be backfilled, and what reading it needs, worked out before its first chunk.

A table is refused (:class:`~processor.errors.SnapshotRefusedError`, which
aborts that table with its reason while the queue goes on) when:

- its topic uses the ``debezium`` envelope (chunk rows are decided against per-key
  state), or ``upsert`` on rows that do not carry what a backfill needs: Debezium's
  ``ExtractNewRecordState`` with each change's transaction id (``add.fields`` with
  ``txId``) and deletes as rows (``delete.tombstone.handling.mode=rewrite``), read
  under read-only watermarks (an ``upsert`` topic's changes are placed by offset,
  which a signal-table window cannot bound), and learned from its own events;
- its topic holds no event yet (or does not exist yet), and no other table of the
  connector has one to build its events' layout from with the catalog
  (:mod:`processor.snapshot.template_event`), or the catalog alone cannot give it;
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

import logging
import re
from dataclasses import dataclass
from typing import NamedTuple

import orjson
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from processor.errors import ChunkError, SnapshotRefusedError, SourceUnavailableError
from processor.events.change import FLAT_DELETED, FLAT_TXID
from processor.snapshot.chunk_events import TableShape
from processor.snapshot.chunk_reader import ChunkReader, TableInfo
from processor.snapshot.connect_values import Column
from processor.snapshot.connector import Connector
from processor.snapshot.progress import TableProgress
from processor.snapshot.template_event import template_event
from tidemark.core.avro_wire import MAGIC
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError
from tidemark.core.kafka import (
    ensure_topics,
    newest_records,
    partition_counts,
    queue_topic_config,
)
from tidemark.core.partitioners import contradiction
from tidemark.core.schema_registry import SchemaCache
from tidemark.core.topics import backfill_topic, change_topic

log = logging.getLogger(__name__)
#: Other tables' topics searched for an event to build a quiet table's from.
_SIBLINGS_TRIED = 20


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
        #: Tables whose columns changed under their backfill: what they were before.
        self._changed_from: dict[tuple[str, str], TableInfo] = {}

    def make_topics(self, entries: list[TableProgress], reader: ChunkReader) -> None:
        """Make the topics of a request's tables at once: the change topics of those
        Debezium has not written to yet (captured tables the pipeline reads, each of the
        partitions of another table's topic, as :meth:`prepare` makes one) and every
        table's backfill topic. The data plane then subscribes to all of them in one
        rebalance, where making each when its table's turn comes cost one rebalance a
        table. A table that cannot be backfilled is left to :meth:`prepare`, which
        refuses it with its reason."""
        prefix = self._config.source.topic_prefix
        inputs = re.compile(self._config.input_pattern())
        topics = {
            e.table: change_topic(prefix, e.table)
            for e in entries
            if inputs.fullmatch(change_topic(prefix, e.table))
            and self._backfilled(change_topic(prefix, e.table))
        }
        counts = partition_counts(self._admin, list(topics.values()))
        missing = []
        for entry in entries:
            topic = topics.get(entry.table)
            if topic is None or topic in counts:
                continue
            try:
                if reader.table_info(entry.table, entry.surrogate_key).captured:
                    missing.append(topic)
            except ChunkError:
                continue
        replication = self._config.kafka.replication_factor
        if missing:
            sibling = self._sibling_event(missing[0])
            if sibling is not None:
                ensure_topics(self._admin, dict.fromkeys(missing, sibling.partitions), replication)
                counts.update(dict.fromkeys(missing, sibling.partitions))
                log.info(
                    "created %d change topics (%d partitions, as %s) for tables with no event yet",
                    len(missing),
                    sibling.partitions,
                    sibling.topic,
                )
        pipeline = self._config.processor.pipeline
        backfills = {backfill_topic(pipeline, t): counts[t] for t in topics.values() if t in counts}
        if backfills:
            kafka = self._config.kafka
            ensure_topics(self._admin, backfills, replication, config=queue_topic_config(kafka))

    def _backfilled(self, topic: str) -> bool:
        """Whether ``topic``'s envelope lets it be backfilled under these watermarks (the
        refusals :meth:`prepare` makes before reading anything)."""
        envelope = self._config.envelope_of(topic)
        if envelope == "debezium":
            return False
        return not (envelope == "upsert" and self._config.snapshot.watermarks == "signal-table")

    def prepare(self, entry: TableProgress, reader: ChunkReader) -> PreparedTable:
        """Check that ``entry``'s table can be backfilled and learn how its events look."""
        found = self._prepared.get((entry.table, entry.request_id))
        if found is not None:
            return found
        topic = change_topic(self._config.source.topic_prefix, entry.table)
        envelope = self._config.envelope_of(topic)
        if envelope == "debezium":
            raise SnapshotRefusedError(
                f"{entry.table} uses the debezium envelope; incremental snapshots need "
                "debezium-upsert, or upsert for rows flattened by ExtractNewRecordState "
                "(per-key state decides chunk rows against changes)"
            )
        flattened = envelope == "upsert"
        if flattened and self._config.snapshot.watermarks == "signal-table":
            raise SnapshotRefusedError(
                f"{entry.table} uses the upsert envelope, whose changes are placed by their "
                "offsets, which a signal-table window cannot bound; backfill it under "
                "snapshot.watermarks read-only",
                reason="flattened",
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
        count = partition_counts(self._admin, [topic]).get(topic)
        recent = [] if count is None else recent_events(self._probe, topic, count)
        # A record no envelope reads (poison, a hostile write) is a dead letter of the data
        # plane; it must not decide how the backfill's rows look, nor where keys go.
        recent = [e for e in recent if self._readable(e)]
        if count is not None:
            self._check_partitioner(topic, count, recent)
        latest = max(recent, key=lambda e: e.timestamp, default=None)
        if latest is None and flattened:
            raise SnapshotRefusedError(
                f"{topic} holds no event yet, and a flattened topic's rows are learned from "
                "its own events; change one row of the table and signal again"
            )
        if latest is None:  # a quiet table: an event built from the catalog
            event, count = self._quiet_table_event(topic, info, count)
        else:
            assert count is not None  # its events were read
            event = (latest.key, latest.value)
        shape = self._learn(topic, event)
        _check_form(topic, shape, flattened)
        before = self._changed_from.pop((entry.table, entry.request_id), None)
        changed = self._retyped(info, before, shape) or _rescaled(columns, shape)
        if shape.row_columns != info.columns or changed:
            # The table's columns changed after its last event (ALTER TABLE): its rows get
            # the event Debezium writes for the new columns, built from the catalog.
            if flattened:
                raise SnapshotRefusedError(
                    f"{topic}: the table's columns changed since its last event, and a "
                    "flattened topic's rows are learned from its own events; change one row "
                    "of the table and signal again"
                )
            event = self._built_event(topic, info, event, "its columns changed since its last")
            shape = self._learn(topic, event)
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
        if info.primary and set(shape.key_columns) != set(info.primary):
            raise SnapshotRefusedError(
                f"{entry.table}'s primary key is {sorted(info.primary)}, but {topic}'s events "
                f"are keyed by {sorted(shape.key_columns)}: the key changed after the table's "
                "last event (or the connector sets message.key.columns). Its rows would be "
                "merged on the old key; change one row (so that an event with the new key "
                "streams) and re-key the table (Guarantees: primary keys that change)",
                reason="primary-key",
            )
        backfill = backfill_topic(self._config.processor.pipeline, topic)
        kafka = self._config.kafka
        ensure_topics(
            self._admin,
            {backfill: count},
            kafka.replication_factor,
            config=queue_topic_config(kafka),
        )
        prepared = PreparedTable(info, event, backfill)
        self._prepared[(entry.table, entry.request_id)] = prepared
        return prepared

    def _retyped(self, info: TableInfo, before: TableInfo | None, shape: TableShape) -> bool:
        """Whether a column whose type changed since ``before`` is declared by ``shape``
        (an event written before the change) otherwise than Debezium declares it now."""
        if before is None:
            return False
        was = dict(zip(before.columns, before.types, strict=True))
        retyped = [c for c, t in zip(info.columns, info.types, strict=True) if was.get(c, t) != t]
        declared = shape.declared()
        if not retyped or declared is None:  # schemaless events declare no type
            return False
        try:
            _key, row = self._connector.key_and_row_fields(info)
        except TidemarkError:
            return True  # the built event is refused with the reason
        now = {f["field"]: (f["type"], f.get("name")) for f in row}
        return any(declared.get(c) != now[c] for c in retyped)

    def _readable(self, event: RecentEvent) -> bool:
        try:
            TableShape.learn(event.key, event.value, self._schemas)
        except (TidemarkError, ValueError):
            return False
        return True

    def _learn(self, topic: str, event: tuple[bytes, bytes]) -> TableShape:
        try:
            return TableShape.learn(*event, self._schemas)
        except (TidemarkError, ValueError) as exc:
            raise SnapshotRefusedError(f"cannot learn the events of {topic}: {exc}") from None

    def _built_event(
        self, topic: str, info: TableInfo, template: tuple[bytes, bytes], why: str
    ) -> tuple[bytes, bytes]:
        """The event Debezium writes for ``info``'s table now, in the form of ``template``
        (an event of the connector), its field schemas from the catalog."""
        try:
            key_fields, row_fields = self._connector.key_and_row_fields(info)
            return template_event(
                template, topic, (info.schema, info.table), key_fields, row_fields
            )
        except TidemarkError as exc:
            raise SnapshotRefusedError(
                f"{topic}: {why} event, and {exc}; change one row of the table and signal again"
            ) from None

    def _quiet_table_event(
        self, topic: str, info: TableInfo, count: int | None
    ) -> tuple[tuple[bytes, bytes], int]:
        """The event Debezium would write for a table that has none yet
        (:mod:`processor.snapshot.template_event`), and its topic's partition count. A topic
        Debezium has not created yet is created here like the one of the other table whose
        event is the template, so that Debezium's later events share its partitions."""
        if count is None and (
            not info.captured or not re.fullmatch(self._config.input_pattern(), topic)
        ):
            raise SnapshotRefusedError(
                f"no change topic {topic}: Debezium has not captured {info.name} yet, "
                "and cannot (no publication holds the table), or the pipeline does not "
                "read that topic"
            )
        sibling = self._sibling_event(topic)
        if sibling is None:
            raise SnapshotRefusedError(
                f"{topic} holds no Debezium event yet, and no other table of the connector "
                "has one to learn the events' layout from; change one row of the table (or "
                "let Debezium's initial snapshot run) and signal again"
            )
        event = self._built_event(topic, info, (sibling.key, sibling.value), "it holds no")
        if count is None:
            count = sibling.partitions
            ensure_topics(self._admin, {topic: count}, self._config.kafka.replication_factor)
            log.info(
                "created %s (%d partitions, as %s) for a table with no event yet",
                topic,
                count,
                sibling.topic,
            )
        return event, count

    def _sibling_event(self, topic: str) -> _Sibling | None:
        """The newest event of another table of the connector."""
        inputs = re.compile(self._config.input_pattern())
        listed = self._admin.list_topics(timeout=10).topics
        names = sorted(n for n in listed if n != topic and inputs.fullmatch(n))
        for name in names[:_SIBLINGS_TRIED]:
            partitions = len(listed[name].partitions)
            events = recent_events(self._probe, name, partitions)
            for event in sorted(events, key=lambda e: -e.timestamp):
                if _is_change_event(event.value):
                    return _Sibling(name, partitions, event.key, event.value)
        return None

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

    def changed(self, entry: TableProgress) -> None:
        """``entry``'s table changed (ALTER TABLE): learn it again, knowing what it was."""
        prepared = self._prepared.pop((entry.table, entry.request_id), None)
        if prepared is not None:
            self._changed_from[(entry.table, entry.request_id)] = prepared.info

    def clear(self) -> None:
        """Leadership lost: what was learned may be stale when it comes back."""
        self._prepared.clear()
        self._changed_from.clear()


def _check_form(topic: str, shape: TableShape, flattened: bool) -> None:
    """Refuse a topic whose events are not in the form its envelope reads, and flattened rows
    that lack a change's transaction id or a delete's row."""
    if not flattened:
        if shape.flat is not None:
            raise SnapshotRefusedError(
                f"{topic} holds rows, not Debezium's change events: read it with the upsert "
                "envelope (processor.envelopes) if Debezium's ExtractNewRecordState made them"
            )
        return
    if shape.flat is None:
        raise SnapshotRefusedError(
            f"{topic} holds Debezium's change events: read it with the debezium-upsert envelope"
        )
    missing = []
    if FLAT_TXID not in shape.flat:
        missing.append(f"each change's transaction id ({FLAT_TXID})")
    if FLAT_DELETED not in shape.flat:
        missing.append(f"deletes as rows ({FLAT_DELETED})")
    if missing:
        raise SnapshotRefusedError(
            f"{topic} holds flattened rows without {' or '.join(missing)}, which a backfill "
            "needs to place its rows against the changes; give Debezium's "
            "ExtractNewRecordState add.fields=op,txId,lsn,source.ts_ms (txId is the one "
            "needed) and delete.tombstone.handling.mode=rewrite",
            reason="flattened",
        )


def _is_change_event(value: bytes) -> bool:
    """Whether ``value`` is one of Debezium's change events (Avro: taken as one)."""
    if value[:1] == MAGIC:
        return True
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    if isinstance(document, dict) and "payload" in document:
        document = document["payload"]
    return isinstance(document, dict) and isinstance(document.get("source"), dict)


class _Sibling(NamedTuple):
    """Another table's event of the connector, and its topic's partition count."""

    topic: str
    partitions: int
    key: bytes
    value: bytes


class RecentEvent(NamedTuple):
    """A change event seen before a backfill: where it is, and its bytes."""

    partition: int
    timestamp: int
    key: bytes
    value: bytes


def recent_events(consumer: Consumer, topic: str, partitions: int) -> list[RecentEvent]:
    """The newest change events (about 50) of each partition of ``topic``, tombstones
    skipped."""
    out = []
    for msg in newest_records(consumer, topic, partitions, 50):
        key, value = msg.key(), msg.value()
        if key is not None and value is not None:
            out.append(RecentEvent(msg.partition() or 0, msg.timestamp()[1], key, value))
    return out


def _rescaled(columns: list[Column], shape: TableShape) -> bool:
    """Whether a decimal column's precision or scale is not the one ``shape`` (an event
    written before an ``ALTER``) declares: the rows read now have the catalog's digits,
    which the event's schema would read at its own scale (1.2500 as 125.00)."""
    declared = shape.decimal_scales()
    return any(
        c.decimal is not None and declared.get(c.name, c.decimal) != c.decimal for c in columns
    )
