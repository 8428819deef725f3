"""The PostgreSQL connector of the snapshot engine: read-only chunks, slot-confirmed watermarks."""

from __future__ import annotations

from typing import Any

import psycopg

from processor.snapshot.chunk_reader import ChunkReader, TableInfo
from processor.snapshot.connect_values import Column
from processor.snapshot.connector import Connector
from processor.snapshot.postgres.connect_schemas import key_and_row_fields
from processor.snapshot.postgres.reader import PostgresChunkReader, source_errors
from processor.snapshot.postgres.slot import slot_state
from processor.snapshot.postgres.values import column
from processor.snapshot.postgres.watermarks import PostgresWatermarkWriter
from processor.snapshot.slot_watch import SlotState
from processor.snapshot.watermarks import WatermarkWriter
from tidemark.core.config import Config


class PostgresConnector(Connector):
    """PostgreSQL as Debezium's PostgreSQL connector (``pgoutput``) captures it."""

    def __init__(self, config: Config) -> None:
        self._config = config

    def chunk_reader(self) -> ChunkReader:
        return PostgresChunkReader(self._config.source.session(read_only=True))

    def watermark_writer(self) -> WatermarkWriter:
        return PostgresWatermarkWriter(self._config)

    def columns(self, info: TableInfo) -> list[Column]:
        settings = self._config.source.value_settings()
        return [
            column(name, *kind, settings)
            for name, kind in zip(info.columns, info.types, strict=True)
        ]

    def key_and_row_fields(self, info: TableInfo) -> tuple[list[Any], list[Any]]:
        return key_and_row_fields(info, self._config.source.value_settings())

    def slot_state(self) -> SlotState:
        what = "reading the replication slot"
        with source_errors(what), psycopg.connect(**self._config.source.session()) as conn:
            return slot_state(conn, self._config.source.replication_slot)
