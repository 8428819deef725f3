"""Debezium's replication slot as the processor shows it (issue 45, item 8),
on a private PostgreSQL cluster of its own: read through the processor's least-privilege
role, its retained WAL growing, and the slot lost once ``max_slot_wal_keep_size`` is
passed and a checkpoint ran."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from prometheus_client import REGISTRY

from processor.snapshot import slot_watch
from processor.snapshot.postgres.connector import PostgresConnector
from processor.snapshot.slot_watch import SlotState
from tidemark.core.config import Config, SourceConfig
from tidemark.devstack import postgres

SLOT = "debezium_watched"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[postgres.PostgresCluster]:
    (tmp_path / "run").mkdir()
    started = postgres.start_cluster(tmp_path / "run")
    try:
        yield started
    finally:
        postgres.stop_cluster(started.data_dir, started.os_user)


def wal_written(conn: psycopg.Connection, segments: int) -> None:
    """Write about ``segments`` WAL segments (16 MiB each) and checkpoint after each."""
    conn.execute("CREATE TABLE IF NOT EXISTS filler (v text)")
    for _ in range(segments):
        conn.execute("INSERT INTO filler SELECT repeat('x', 2000) FROM generate_series(1, 9000)")
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")


def test_the_slots_wal_and_its_loss_are_shown(cluster: postgres.PostgresCluster) -> None:
    with psycopg.connect(**cluster.conninfo(), autocommit=True) as admin:  # type: ignore[arg-type]
        admin.execute("CREATE TABLE public.tidemark_signal (id text, type text, data text)")
        password = postgres.create_processor_role(cluster, "public.tidemark_signal")
        source = SourceConfig(**cluster.processor_login(password), replication_slot=SLOT)
        connector = PostgresConnector(dataclasses.replace(Config(), source=source))
        assert connector.slot_state() == SlotState(exists=False)

        admin.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        first = connector.slot_state()
        assert first.exists and not first.active and first.wal_status == "reserved"
        assert first.safe_wal_bytes is None  # max_slot_wal_keep_size unlimited
        wal_written(admin, 2)
        held = connector.slot_state()
        assert held.retained_wal_bytes > first.retained_wal_bytes + 16 * 2**20
        assert held.wal_status in ("reserved", "extended")

        admin.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '16MB'")
        admin.execute("SELECT pg_reload_conf()")
        wal_written(admin, 4)
        lost = connector.slot_state()
        assert lost.exists and lost.wal_status == "lost", lost

    slot_watch.watch(SLOT, connector.slot_state)
    shown = {
        status: REGISTRY.get_sample_value(
            "tidemark_source_slot_wal_status", {"slot": SLOT, "status": status}
        )
        for status in slot_watch.WAL_STATUSES
    }
    assert shown == {"reserved": 0, "extended": 0, "unreserved": 0, "lost": 1}
    assert REGISTRY.get_sample_value("tidemark_source_slot_missing", {"slot": SLOT}) == 0

    postgres.stop_cluster(cluster.data_dir, cluster.os_user)
    failures = REGISTRY.get_sample_value("tidemark_source_slot_read_failures_total") or 0
    slot_watch.watch(SLOT, connector.slot_state)  # the source away: counted, not raised
    assert REGISTRY.get_sample_value("tidemark_source_slot_read_failures_total") == failures + 1
