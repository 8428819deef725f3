"""Debezium's replication slot as PostgreSQL sees it (:mod:`processor.snapshot.slot_watch`):
the WAL it holds back, and whether PostgreSQL may drop that WAL. Reading
``pg_replication_slots`` needs no grant."""

from __future__ import annotations

from typing import Any

import psycopg

from processor.snapshot.slot_watch import SlotState

_SLOT = (
    "SELECT active, pg_current_wal_insert_lsn() - restart_lsn, wal_status, safe_wal_size "
    "FROM pg_replication_slots WHERE slot_name = %s"
)


def slot_state(conn: psycopg.Connection[Any], slot: str) -> SlotState:
    """The state of the replication slot ``slot`` now."""
    row = conn.execute(_SLOT, (slot,)).fetchone()
    if row is None:
        return SlotState(exists=False)
    active, retained, status, safe = row
    return SlotState(
        exists=True,
        active=bool(active),
        retained_wal_bytes=max(0, int(retained or 0)),
        wal_status=status or "",
        safe_wal_bytes=None if safe is None else int(safe),
    )
