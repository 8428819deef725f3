"""A backfill row larger than the pipeline's records may be (issue 45, item 2).

The producer refuses a record above ``kafka.max_record_bytes`` (its ``message.max.bytes``,
as every topic Tidemark makes takes) before it leaves, whatever the broker would do: the
embedded broker enforces no limit. The reader took that refusal for Kafka being away,
and the table waited, read again and again, until the source outage deadline. Now the
table is aborted at once, with the reason and what to change.
"""

from __future__ import annotations

import dataclasses
import time

import psycopg
from psycopg import sql

from processor.snapshot.client import send_signal
from tests.integration.processes import Processor, wait_for
from tests.integration.test_snapshots import leading, notified, snapshot_config, uncaptured_table
from tidemark.core.config import MIN_RECORD_BYTES
from tidemark.devstack.stack import DevStack


def test_a_row_larger_than_a_record_aborts_its_table_at_once(stack: DevStack) -> None:
    base = snapshot_config(stack, "toolarge")
    config = dataclasses.replace(
        base, kafka=dataclasses.replace(base.kafka, max_record_bytes=MIN_RECORD_BYTES)
    )
    table = "iso_toolarge_t"
    uncaptured_table(config, table, 5)  # and row 0, streamed: the events' layout
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        # changed outside the captured schema: no event, whose size is Debezium's concern
        conn.execute(
            sql.SQL("ALTER TABLE {} SET SCHEMA stage").format(sql.Identifier("public", table))
        )
        conn.execute(
            sql.SQL("UPDATE {} SET name = repeat('x', %s) WHERE id = 3").format(
                sql.Identifier("stage", table)
            ),
            (MIN_RECORD_BYTES + (1 << 20),),
        )
        conn.execute(
            sql.SQL("ALTER TABLE {} SET SCHEMA public").format(sql.Identifier("stage", table))
        )
    processor = Processor(stack, config, "toolarge-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        started = time.monotonic()
        send_signal(config, "execute-snapshot", {"data-collections": [f"public.{table}"]}, "b-1")
        wait_for("aborted", lambda: notified(config, "ABORTED", "b-1"), timeout=60)
        assert time.monotonic() - started < config.snapshot.source_outage_deadline_s
        [note] = notified(config, "ABORTED", "b-1")
        assert "larger than the producer takes" in note["additional_data"]["error"], note
        assert processor.health().get("status") == "ok"
    finally:
        processor.stop()
