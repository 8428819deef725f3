"""WAL positions of a PostgreSQL source: where every commit so far lies, and how far
Debezium's replication slot has confirmed."""

from __future__ import annotations

from typing import Any

import psycopg

_CONFIRMED = (
    "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = %s"
)


def committed_position(conn: psycopg.Connection[Any]) -> int:
    """A WAL position at or past the commit record of every transaction committed so far:
    the insert position. Not ``pg_current_wal_lsn()``, the write position: a commit under
    ``synchronous_commit = off`` returns before its record is written, so the write
    position can lie behind changes already committed, and a slot that confirmed it may
    not have them."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def confirmed_flush_lsn(conn: psycopg.Connection[Any], slot: str) -> int | None:
    """The position up to which the replication slot ``slot`` has been confirmed."""
    row = conn.execute(_CONFIRMED, (slot,)).fetchone()
    return None if row is None or row[0] is None else int(row[0])
