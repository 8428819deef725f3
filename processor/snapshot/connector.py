"""What the snapshot engine needs from one kind of source database: its connector.

Debezium keeps one generic incremental-snapshot engine
(``AbstractIncrementalSnapshotChangeEventSource``) and a subclass per database.
Tidemark does the same: the coordinator, the reader pool, chunk events and
signal-table windows are generic, and everything that speaks to a database
comes from its :class:`Connector`:

- the catalog and the chunk reads (:class:`~processor.snapshot.chunk_reader.ChunkReader`);
- the writer of signal-table watermark rows
  (:class:`~processor.snapshot.watermarks.WatermarkWriter`);
- the value encoding: how each column is read and becomes the Connect value
  that Debezium's connector would write (:class:`~processor.snapshot.connect_values.Column`),
  and the schemas it declares for a table that has no event yet.

A second database is a new folder beside ``postgres/`` with one
:class:`Connector`; the application picks it. Connectors are sent to the
reader processes, so they hold configuration only (they pickle) and open
their connections in the methods below.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from processor.snapshot.chunk_reader import ChunkReader, TableInfo
from processor.snapshot.connect_values import Column
from processor.snapshot.slot_watch import SlotState
from processor.snapshot.watermarks import WatermarkWriter


class Connector(ABC):
    """One kind of source database."""

    @abstractmethod
    def chunk_reader(self) -> ChunkReader:
        """A new connection for catalog queries and chunk reads."""

    @abstractmethod
    def watermark_writer(self) -> WatermarkWriter:
        """A new connection that writes watermark rows to Tidemark's signal table."""

    @abstractmethod
    def columns(self, info: TableInfo) -> list[Column]:
        """How to read and encode each column of ``info``, as Debezium's connector does;
        :class:`~processor.errors.UnsupportedTypeError` for a type it cannot reproduce."""

    @abstractmethod
    def key_and_row_fields(self, info: TableInfo) -> tuple[list[Any], list[Any]]:
        """The Connect field schemas (the JSON converter's form) that Debezium's connector
        declares for the key and the row of ``info``, from the catalog alone, for a table
        with no event yet; :class:`~processor.errors.UnsupportedTypeError` where it cannot."""

    def slot_state(self) -> SlotState | None:
        """Debezium's replication slot now, or ``None`` for a database without one;
        :class:`~processor.errors.SourceUnavailableError` when the source cannot be
        reached."""
        return None
