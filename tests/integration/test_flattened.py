"""Topics flattened by Debezium's ``ExtractNewRecordState``, read with the ``upsert`` envelope.

Real Debezium runs the transform. With the transaction id among its added fields
and deletes written as rows, a table is backfilled under a concurrent workload:
its chunk rows are flat rows of the same fields, in the same order and (with
schemas) the same schema bytes as Debezium's own events, the same key bytes in
the same partitions, and the reconciled topic converges to the table. With the
transform's defaults, the backfill is refused before its first row, naming the
settings that would make it possible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from tests.integration.processes import (
    Debezium,
    Processor,
    decoder,
    final_rows,
    metric,
    read_backfill,
    read_topic,
    reconciled,
    wait_for,
)
from tests.integration.test_snapshots import (
    Writer,
    backfill_once,
    cli,
    leading,
    notified,
    own_pipeline,
    progress,
    uncaptured_table,
)
from tidemark.cli.verify import source_lsn, wait_caught_up, wait_debezium
from tidemark.core.avro_wire import HEADER, MAGIC
from tidemark.core.config import Config, SnapshotConfig
from tidemark.core.partitioners import partition_of
from tidemark.core.topics import backfill_topic, dead_letter_topic
from tidemark.devstack.stack import DevStack

UNWRAP = {
    "transforms": "unwrap",
    "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
}
#: What a backfill needs of the transform: each change's transaction id, deletes as rows.
BACKFILLABLE = {
    **UNWRAP,
    "transforms.unwrap.add.fields": "op,txId,lsn,source.ts_ms",
    "transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
}


def flat_pipeline(stack: DevStack, debezium: Debezium, table: str, **snapshot: Any) -> Config:
    """``own_pipeline`` reading its one topic with the ``upsert`` envelope."""
    config = own_pipeline(stack, debezium, table)
    processor = dataclasses.replace(config.processor, envelope="upsert")
    return dataclasses.replace(config, processor=processor, snapshot=SnapshotConfig(**snapshot))


def split(decode: Callable[[bytes], Any], value: bytes) -> tuple[bytes, dict[str, Any]]:
    """A value's bytes up to its row (Avro: the schema id; JSON: the schema, nothing when
    schemaless) and the row, decoded."""
    if value[:1] == MAGIC:
        return value[: HEADER.size], decode(value)
    document = orjson.loads(value)
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        return value[: value.index(b'"payload":') + len(b'"payload":')], document["payload"]
    return b"", document


@pytest.mark.parametrize("fmt", ["json", "json-schemaless"])
def test_a_flattened_topic_is_backfilled_in_its_own_form(stack: DevStack, fmt: str) -> None:
    backfill_flattened(stack, "flatload" if fmt == "json" else "flatbare", fmt)


def backfill_flattened(stack: DevStack, name: str, fmt: str) -> None:
    """Backfill ``iso_<name>_t`` through a Debezium of ``fmt`` that flattens its events,
    under a concurrent workload, and compare the rows with Debezium's own."""
    table = f"iso_{name}_t"
    debezium = Debezium(stack, name, [f"public.{table}"], BACKFILLABLE, fmt).start()
    processor = None
    writer = None
    try:
        config = flat_pipeline(
            stack, debezium, table, chunk_size=40, min_chunk_size=40, max_chunk_size=40
        )
        decode = decoder(config)
        uncaptured_table(config, table, 400)  # rows 1 to 400 never streamed; row 0 streamed
        wait_debezium(config, source_lsn(config))
        processor = Processor(stack, config, f"{name}-processor").start()
        wait_for("the coordinator", lambda: leading(processor))
        writer = Writer(config, table, keys=200, seed=7, new_from=401)  # 201-400 stay
        writer.start()
        cli(processor, "snapshot", "start", f"public.{table}", "--id", "load-1")
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "load-1"), timeout=180)
        writer.stop()
        wait_caught_up(config)
        assert progress(config, f"public.{table}", "load-1").status == "completed"

        events = reconciled(config, table)
        snapshot_rows = [
            e for e in events if e.value and e.value["tidemark"]["reason"] == "snapshot"
        ]
        assert len(snapshot_rows) >= 200, len(snapshot_rows)  # at least the rows left alone
        assert all(e.value and e.value["op"] == "r" for e in snapshot_rows)
        ident = sql.Identifier("public", table)
        with psycopg.connect(**config.owner_conninfo()) as conn:
            rows = conn.execute(sql.SQL("SELECT id, name, v FROM {}").format(ident)).fetchall()
        expected = {(r[0],): {"id": r[0], "name": r[1], "v": r[2]} for r in rows}
        final = {
            key: {c: v for c, v in row.items() if not c.startswith("__")}
            for key, row in final_rows(events).items()
        }
        assert final == expected
        dead = read_topic(config, dead_letter_topic(config.processor.pipeline))
        assert not dead, dead[:3]

        # Debezium's own events of the same rows: touch every row the backfill read last.
        change_topic = f"{name}.public.{table}"
        ours = {}
        backfilled = backfill_topic(config.processor.pipeline, change_topic)
        for record in read_backfill(config, backfilled):
            assert record.key is not None and record.value is not None
            ours[record.key] = record
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {} SET v = v").format(ident))
        wait_debezium(config, source_lsn(config))
        theirs = {r.key: r for r in read_topic(config, change_topic) if r.key and r.value}
        compared = 0
        for key, record in ours.items():
            their = theirs[key]  # the same key bytes
            assert record.partition == their.partition == partition_of("murmur2", key, 3)
            our_head, our_row = split(decode, record.value or b"")
            their_head, their_row = split(decode, their.value or b"")
            assert our_head == their_head  # the same schema (id), byte for byte
            assert list(our_row) == list(their_row)  # the same fields, in the same order
            assert our_row["__op"] == "r" and our_row["__deleted"] == "false"
            assert our_row["__txId"] is None and our_row["__lsn"] is None
            row = {c: v for c, v in our_row.items() if not c.startswith("__")}
            if row == expected.get((row["id"],)):  # not changed since it was read
                assert row == {c: v for c, v in their_row.items() if not c.startswith("__")}
                compared += 1
        # Every row the workload left alone (201 to 400 at least) is compared, however long
        # the backfill took; before, the workload touched every key and the count varied.
        untouched = set(range(1, 401)) - writer.touched
        assert len(untouched) >= 200 and compared >= len(untouched), (compared, len(untouched))
    finally:
        if writer is not None:
            writer.stop()
        if processor is not None:
            processor.stop()
        debezium.stop()


def test_a_flattened_topic_without_transaction_ids_is_refused_naming_the_settings(
    stack: DevStack,
) -> None:
    """The transform's defaults: no ``__txId``, deletes as tombstones. The backfill is
    ABORTED before its first row, with a reason that names ``add.fields`` and the delete
    mode, counted under ``reason="flattened"``."""
    table = "iso_flatdef_t"
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, name text)")
    debezium = Debezium(stack, "flatdef", [f"public.{table}"], UNWRAP, "json").start()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} SELECT g, 'n' || g FROM generate_series(1, 20) g")
        wait_debezium(debezium.config, source_lsn(debezium.config))
        config = flat_pipeline(stack, debezium, table)
        refused = backfill_once(stack, config, f"public.{table}", "def-1", "ABORTED")
        reason = progress(config, f"public.{table}", "def-1").error or ""
        assert "add.fields=op,txId,lsn,source.ts_ms" in reason, reason
        assert "delete.tombstone.handling.mode=rewrite" in reason, reason
        labels = {"table": f"public.{table}", "reason": "flattened"}
        assert metric(refused, "tidemark_snapshot_refused_total", **labels) == 1
        backfill = backfill_topic(config.processor.pipeline, f"flatdef.public.{table}")
        assert not read_topic(config, backfill)
    finally:
        debezium.stop()
