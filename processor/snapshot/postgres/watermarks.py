"""Signal-table watermark rows in PostgreSQL, and when Debezium has captured them.

PostgreSQL's side of :mod:`processor.snapshot.watermarks`: rows are inserted
and deleted in Tidemark's signal table, each in a transaction of its own (an
autocommit connection). A row is captured once Debezium's replication slot has
confirmed a WAL position at or past the row's commit: Debezium confirms only
what Kafka has acknowledged.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from processor.errors import SourceUnavailableError
from processor.snapshot.postgres.positions import committed_position, confirmed_flush_lsn
from processor.snapshot.postgres.reader import source_errors
from processor.snapshot.watermarks import WatermarkWriter
from tidemark.core.config import Config


class PostgresWatermarkWriter(WatermarkWriter):
    """Writes watermark rows to the signal table; waits for the replication slot."""

    def __init__(self, config: Config, confirm_timeout: float = 60.0) -> None:
        self._slot = config.source.replication_slot
        table = sql.Identifier(*config.snapshot.signal_table.split("."))
        self._insert = sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(table)
        self._delete = sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(table)
        self._confirm_timeout = confirm_timeout
        try:
            session = config.source.session(read_only=False)  # it writes its signal table
            self._conn = psycopg.connect(**session, autocommit=True)
        except psycopg.Error as exc:
            raise SourceUnavailableError(
                f"cannot connect to the source for watermarks: {exc}"
            ) from None

    def insert(self, row_id: str, kind: str, data: str) -> None:
        with source_errors(f"signal-table watermarks, writing the {kind} row"):
            self._conn.execute(self._insert, (row_id, kind, data))

    def commit_position(self) -> int:
        """A position past the commit of every row this writer has written
        (:func:`committed_position`)."""
        with source_errors("signal-table watermarks, the WAL position"):
            return committed_position(self._conn)

    def wait_captured(self) -> None:
        """Wait until the replication slot has confirmed every row written so far: then
        every change committed before them is in Kafka."""
        lsn = self.commit_position()
        deadline = time.monotonic() + self._confirm_timeout
        while True:
            with source_errors("signal-table watermarks, reading the replication slot"):
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

    def delete(self, row_ids: tuple[str, ...]) -> None:
        with source_errors("signal-table watermarks, deleting the rows"):
            self._conn.execute(self._delete, (list(row_ids),))

    def close(self) -> None:
        self._conn.close()
