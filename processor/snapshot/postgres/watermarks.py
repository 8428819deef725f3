"""Signal-table watermarks (DDD-3): window-open and window-close rows written around a chunk read.

For sources without exact snapshots (and for PostgreSQL, with
``snapshot.watermarks: signal-table``), a chunk is placed against the change
stream by two rows the reader writes to Tidemark's signal table, each in a
transaction of its own. Per chunk, :class:`SignalTableWatermarks`:

1. notes where the signal table's change topic ends, then commits the
   window-open row;
2. lets the caller read the chunk (its transaction starts after that commit);
3. commits the window-close row and takes the WAL position after it;
4. waits until Debezium's replication slot has confirmed that position: since
   Debezium confirms only what Kafka has acknowledged, every change committed
   before the close row is in Kafka then;
5. notes each change-topic partition's end offset (the idle-partition rule of
   DESIGN.md: a partition read up to it has seen every change below the close),
   and finds both rows' positions in the signal table's change topic;
6. deletes the two rows (their delete events are no signals).

The result is a :class:`processor.events.visibility.Window`, which also carries the
chunk's own snapshot where the source has one (PostgreSQL: a transaction can
sit below the open row in the stream and still be invisible to the chunk's
read). The rows are no signals to the coordinator (:data:`WINDOW_TYPES`), and
they are written to Tidemark's signal table, never Debezium's, so Debezium's
own snapshots never see them.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg import sql

from processor.errors import ChunkError, SourceUnavailableError
from processor.events.change import Change
from processor.events.source_codec import SourceCodec
from processor.events.visibility import PgSnapshot, Window
from processor.snapshot.chunk_reader import connection_errors
from tidemark.config import Config
from tidemark.errors import InputError
from tidemark.kafka import exact_end_offsets, read_range
from tidemark.messages import RawMessage
from tidemark.schema_registry import SchemaCache
from tidemark.topics import change_topic

OPEN = "snapshot-window-open"
CLOSE = "snapshot-window-close"
WINDOW_TYPES = frozenset({OPEN, CLOSE})

_CONFIRMED = (
    "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = %s"
)


def confirmed_flush_lsn(conn: psycopg.Connection[Any], slot: str) -> int | None:
    """The position up to which the replication slot ``slot`` has been confirmed."""
    row = conn.execute(_CONFIRMED, (slot,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


@dataclass(frozen=True)
class OpenWindow:
    """A window whose open row is committed: its rows' ids and where the signal topic was."""

    open_id: str
    close_id: str
    signal_starts: dict[int, int]


class SignalTableWatermarks:
    """Writes and locates the watermark rows of a pipeline's chunks (one connection)."""

    def __init__(
        self,
        config: Config,
        consumer: Consumer,
        schemas: SchemaCache | None,
        confirm_timeout: float = 60.0,
    ) -> None:
        self._slot = config.source.replication_slot
        schema, table = config.snapshot.signal_table.split(".")
        self._insert = sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(
            sql.Identifier(schema, table)
        )
        self._delete = sql.SQL("DELETE FROM {} WHERE id IN (%s, %s)").format(
            sql.Identifier(schema, table)
        )
        self._topic = change_topic(config.source.topic_prefix, config.snapshot.signal_table)
        self._consumer = consumer
        self._codec = SourceCodec("debezium-upsert", "", schemas)
        self._confirm_timeout = confirm_timeout
        try:
            self._conn = psycopg.connect(**config.source.conninfo(), autocommit=True)
        except psycopg.Error as exc:
            raise SourceUnavailableError(
                f"cannot connect to the source for watermarks: {exc}"
            ) from None

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
        with _source_errors("the WAL position"):
            row = self._conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
        assert row is not None
        self._wait_confirmed(int(row[0]))
        partitions = self._partitions(change_topic)
        ends = exact_end_offsets(
            self._consumer, [TopicPartition(change_topic, p) for p in partitions]
        )
        low, high = self._positions(window)
        with _source_errors("deleting the watermark rows"):
            self._conn.execute(self._delete, (window.open_id, window.close_id))
        return Window(low, high, tuple(ends[(change_topic, p)] for p in partitions), snapshot)

    def close_connection(self) -> None:
        self._conn.close()

    def _write(self, row_id: str, kind: str, chunk: int) -> None:
        data = orjson.dumps({"chunk": chunk}).decode()
        with _source_errors(f"writing the {kind} row"):
            self._conn.execute(self._insert, (row_id, kind, data))

    def _wait_confirmed(self, lsn: int) -> None:
        deadline = time.monotonic() + self._confirm_timeout
        while True:
            with _source_errors("reading the replication slot"):
                confirmed = confirmed_flush_lsn(self._conn, self._slot)
            if confirmed is not None and confirmed >= lsn:
                return
            if time.monotonic() > deadline:
                raise SourceUnavailableError(
                    f"Debezium's replication slot {self._slot!r} did not confirm the "
                    f"window-close row within {self._confirm_timeout:.0f} s (confirmed: "
                    f"{confirmed}); is Debezium running, with a heartbeat, and is "
                    "source.replication_slot its slot.name?"
                )
            time.sleep(0.05)

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


@contextlib.contextmanager
def _source_errors(what: str) -> Iterator[None]:
    """A broken connection as :class:`SourceUnavailableError` (retried), any other SQL error as
    :class:`ChunkError`."""
    try:
        with connection_errors():
            yield
    except psycopg.Error as exc:
        raise ChunkError(f"signal-table watermarks, {what}: {exc}") from None
