"""The two channels that bring snapshot signals to the coordinator, with the same meaning.

- The Kafka signal topic ``<pipeline>.signals``: ``tidemark snapshot ...`` and
  the API write ``{"id", "type", "data"}`` records there. The coordinator's
  group consumer owns its single partition (that is what makes it the leader)
  and hands its records to :meth:`SignalChannels.from_topic`.
- Tidemark's signal table in the source, read from its change topic
  (:meth:`SignalChannels.from_table`): an insert of ``(id, type, data)`` is a
  signal, as in Debezium's signal table; updates, deletes, snapshot reads and
  the rows of signal-table windows are not.

How far each channel has been read is kept in the snapshot progress record
(``signal_offsets``), so a new leader goes on where the last one stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import orjson
from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.errors import SignalError
from processor.events.change import Change
from processor.events.source_codec import SourceCodec
from processor.snapshot.signals import WINDOW_TYPES, Signal, parse_signal
from tidemark.core.config import Config
from tidemark.core.errors import InputError
from tidemark.core.kafka import consumer_config, data_messages, exact_end_offsets, partition_counts
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache
from tidemark.core.topics import change_topic, reader_group, signal_topic

log = logging.getLogger(__name__)

#: Per channel topic, per partition: the next offset to read.
Offsets = dict[str, dict[int, int]]


class SignalChannels:
    """Signals from the signal topic and from the signal table's change topic."""

    def __init__(self, config: Config, admin: AdminClient, schemas: SchemaCache | None) -> None:
        pipeline = config.processor.pipeline
        self.topic = signal_topic(pipeline)
        self.table_topic = change_topic(config.source.topic_prefix, config.snapshot.signal_table)
        self._admin = admin
        #: Reads the signal table's change topic by assignment (only the leader does).
        self._rows = Consumer(
            consumer_config(
                config.kafka,
                reader_group(pipeline, "snapshots-rows"),
                **{"enable.partition.eof": False},
            )
        )
        self._codec = SourceCodec("debezium-upsert", "", schemas)
        self._rows_assigned = False
        self._next_check = 0.0

    def from_topic(self, msg: Message, offsets: Offsets) -> Signal | None:
        """The signal in a record of the signal topic (``id`` optional); notes it as read."""
        offset = msg.offset() or 0
        default_id = f"kafka-{msg.partition()}-{offset}"
        try:
            doc = orjson.loads(msg.value() or b"")
            if not isinstance(doc, dict):
                raise SignalError("a signal record must be a JSON object")
            data = doc.get("data")
            text = orjson.dumps(data) if isinstance(data, dict) else data
            signal = parse_signal(str(doc.get("id") or default_id), str(doc.get("type")), text)
        except (SignalError, ValueError) as exc:
            log.warning("signal topic %s@%d ignored: %s", self.topic, offset, exc)
            signal = None
        offsets.setdefault(self.topic, {})[0] = offset + 1
        return signal

    def from_table(self, offsets: Offsets) -> Iterator[Signal | None]:
        """Each new event of the signal table's change topic, as a signal (``None``: not
        one), noted as read before it is given."""
        topic = self.table_topic
        if not self._rows_assigned:
            now = time.monotonic()
            if now < self._next_check:
                return
            self._next_check = now + 5.0
            counts = partition_counts(self._admin, [topic])
            if topic not in counts:
                return
            read = offsets.setdefault(topic, {})
            self._rows.assign(
                [TopicPartition(topic, p, read.get(p, 0)) for p in range(counts[topic])]
            )
            self._rows_assigned = True
        for msg in data_messages(self._rows.consume(100, 0)):
            partition, offset = msg.partition() or 0, msg.offset() or 0
            offsets.setdefault(topic, {})[partition] = offset + 1
            yield self._row_signal(msg)

    def table_ends(self, probe: Consumer) -> dict[int, int]:
        """Where the signal table's change topic ends now, per partition: rows written
        before a pipeline first ran are history, not requests."""
        topic = self.table_topic
        counts = partition_counts(self._admin, [topic])
        if topic not in counts:
            return {}
        tps = [TopicPartition(topic, p) for p in range(counts[topic])]
        return {p: end for (_t, p), end in exact_end_offsets(probe, tps).items()}

    def release(self) -> None:
        """Leadership lost: stop reading the signal table."""
        self._rows.unassign()
        self._rows_assigned = False

    def close(self) -> None:
        self._rows.close()

    def _row_signal(self, msg: Message) -> Signal | None:
        raw = RawMessage(
            msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()
        )
        if raw.value is None:
            return None
        try:
            change: Change = self._codec.decode(raw)
        except InputError as exc:
            log.warning("signal table event ignored: %s", exc)
            return None
        if change.op != "c" or change.after is None:
            return None  # only inserts are requests; snapshots, updates and deletes of rows are not
        row = change.after
        if row.get("type") in WINDOW_TYPES:
            return None  # a chunk's watermark, not a request
        try:
            return parse_signal(str(row.get("id") or ""), str(row.get("type")), row.get("data"))
        except SignalError as exc:
            log.warning("signal table row ignored: %s", exc)
            return None
