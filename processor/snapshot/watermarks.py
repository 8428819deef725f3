"""Signal-table watermarks (DDD-3): window-open and window-close rows written around a chunk read.

For sources without exact snapshots (and for PostgreSQL, with
``snapshot.watermarks: signal-table``), a chunk is placed against the change
stream by two rows the reader writes to Tidemark's signal table, each in a
transaction of its own. Per chunk, :class:`SignalTableWatermarks`:

1. notes where the signal table's change topic ends, then commits the
   window-open row;
2. lets the caller read the chunk (its transaction starts after that commit);
3. commits the window-close row and waits until the change stream has
   captured it (:meth:`WatermarkWriter.wait_captured`): every change
   committed before the close row is in Kafka then;
4. notes each change-topic partition's end offset (the idle-partition rule: a
   partition read up to it has seen every change below the close), and finds
   both rows' positions in the signal table's change topic;
5. deletes the two rows (their delete events are no signals).

The result is a :class:`processor.events.visibility.Window`, which also
carries the chunk's own snapshot where the source has one (PostgreSQL: a
transaction can sit below the open row in the stream and still be invisible
to the chunk's read). The rows are no signals to the coordinator
(:data:`processor.snapshot.signals.WINDOW_TYPES`), and they are written to
Tidemark's signal table, never Debezium's, so Debezium's own snapshots never
see them. What touches the database is the connector's
:class:`WatermarkWriter`; the rest reads Kafka and is the same for every one.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass

import orjson
from confluent_kafka import Consumer, TopicPartition

from processor.errors import ChunkError
from processor.events.change import Change
from processor.events.source_codec import SourceCodec
from processor.events.visibility import PgSnapshot, Window
from processor.snapshot.signals import CLOSE, OPEN
from tidemark.core.config import Config
from tidemark.core.errors import InputError
from tidemark.core.kafka import exact_end_offsets, read_range
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache
from tidemark.core.topics import change_topic


class WatermarkWriter(ABC):
    """What signal-table watermarks need from a source database (one connection)."""

    @abstractmethod
    def insert(self, row_id: str, kind: str, data: str) -> None:
        """Commit one row ``(id, type, data)`` to Tidemark's signal table."""

    @abstractmethod
    def wait_captured(self) -> None:
        """Return once the change stream holds every change committed so far: Debezium
        has written each of them to Kafka."""

    @abstractmethod
    def delete(self, row_ids: tuple[str, ...]) -> None:
        """Delete the rows ``row_ids`` from the signal table."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""


@dataclass(frozen=True)
class OpenWindow:
    """A window whose open row is committed: its rows' ids and where the signal topic was."""

    open_id: str
    close_id: str
    signal_starts: dict[int, int]


class SignalTableWatermarks:
    """Writes and locates the watermark rows of a pipeline's chunks."""

    def __init__(
        self,
        config: Config,
        writer: WatermarkWriter,
        consumer: Consumer,
        schemas: SchemaCache | None,
    ) -> None:
        self._writer = writer
        self._topic = change_topic(config.source.topic_prefix, config.snapshot.signal_table)
        self._consumer = consumer
        self._codec = SourceCodec("debezium-upsert", "", schemas)

    def open(self, chunk: int) -> OpenWindow:
        """Commit the window-open row of ``chunk``."""
        tag = f"{chunk}-{uuid.uuid4().hex[:12]}"
        window = OpenWindow(f"{tag}-open", f"{tag}-close", self._signal_ends())
        self._write(window.open_id, OPEN, chunk)
        return window

    def close(
        self, window: OpenWindow, chunk: int, change_topic: str, snapshot: PgSnapshot | None
    ) -> Window:
        """Commit the window-close row; once Debezium has it in Kafka, the window's bounds
        (with ``snapshot``, the one the chunk was read in, where the source has one)."""
        self._write(window.close_id, CLOSE, chunk)
        self._writer.wait_captured()
        partitions = self._partitions(change_topic)
        ends = exact_end_offsets(
            self._consumer, [TopicPartition(change_topic, p) for p in partitions]
        )
        low, high = self._positions(window)
        self._writer.delete((window.open_id, window.close_id))
        return Window(low, high, tuple(ends[(change_topic, p)] for p in partitions), snapshot)

    def close_connection(self) -> None:
        self._writer.close()

    def _write(self, row_id: str, kind: str, chunk: int) -> None:
        self._writer.insert(row_id, kind, orjson.dumps({"chunk": chunk}).decode())

    def _partitions(self, topic: str) -> list[int]:
        listed = self._consumer.list_topics(topic, timeout=10).topics.get(topic)
        if listed is None or listed.error is not None or not listed.partitions:
            return []
        return sorted(listed.partitions)

    def _signal_ends(self) -> dict[int, int]:
        partitions = self._partitions(self._topic)
        tps = [TopicPartition(self._topic, p) for p in partitions]
        return {p: end for (_t, p), end in exact_end_offsets(self._consumer, tps).items()}

    def _positions(self, window: OpenWindow) -> tuple[tuple[int, int], tuple[int, int]]:
        """The change-stream positions of the window's two rows, from the signal topic."""
        wanted = {window.open_id, window.close_id}
        found: dict[str, tuple[int, int]] = {}
        ends = self._signal_ends()
        for partition, end in ends.items():
            start = window.signal_starts.get(partition, 0)
            for msg in read_range(self._consumer, self._topic, partition, start, end):
                raw = RawMessage(self._topic, partition, msg.offset() or 0, msg.key(), msg.value())
                if raw.value is None:
                    continue
                try:
                    change: Change = self._codec.decode(raw)
                except InputError:
                    continue
                row_id = (change.after or {}).get("id")
                if change.op == "c" and row_id in wanted:
                    found[row_id] = change.version
        if len(found) < 2:
            raise ChunkError(
                f"the watermark rows of a window are not in {self._topic}: does Debezium "
                "capture Tidemark's signal table?"
            )
        return found[window.open_id], found[window.close_id]
