"""Incremental snapshots end to end: real PostgreSQL, Debezium, broker and processor processes.

The tables start in a schema Debezium does not capture and are then moved into
``public``: their rows exist in the source but were never in the change stream,
which is the case a backfill is for (a table added to the captured set). One
change after the move gives the change topic the event Tidemark learns the
table's event layout from.

- While a writer updates, deletes and inserts rows, a snapshot started with
  ``tidemark snapshot start`` makes the reconciled topic converge to the table
  (I1), and per key the emitted versions never go back (I3, exact in read-only
  mode), whichever of a chunk row and a change reaches the data plane first.
- A snapshot started from Tidemark's signal table survives a SIGKILL of the
  processor and goes on from its last chunk (I4); pause (sent while no
  processor runs), resume and stop act through the CLI; a table that cannot be
  read is aborted and the queue goes on.
- DDD-3's test: chunks of 5 to 10 rows while a random workload (multi-row
  transactions, deletes and re-inserts, a composite key with a text column,
  TOASTed values, NULLs) writes to the same tables and the processor is killed
  twice mid-snapshot; per key the output follows the source's own history.
- A transaction is held between its commit record and its visibility while a
  signal-table window opens: the window's snapshot drops the chunk's older row,
  which positions alone would emit.
- In both watermark modes, updates that leave a TOASTed value untouched reach keys
  with no state (REPLICA IDENTITY DEFAULT, rows never streamed): each key's row is
  read again, nothing is dead-lettered, and with two SIGKILLs during the backfill
  the reconciled topic and the Iceberg table end equal to the source.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from psycopg import sql

from processor.events.change import TOAST_PLACEHOLDER
from processor.events.visibility import PgSnapshot
from processor.snapshot.client import read_state, send_signal
from processor.snapshot.postgres.positions import committed_position
from processor.snapshot.progress import TableProgress
from tests.integration.processes import (
    Debezium,
    Event,
    Processor,
    decoder,
    differences,
    final_rows,
    metric,
    pipeline_config,
    read_backfill,
    read_topic,
    reconciled,
    records_if_any,
    run_cli,
    wait_for,
)
from tests.integration.test_chunk_events import debezium_events, schema_part
from tests.integration.workload import Table, Workload
from tests.integration.workload import source_rows as source_rows_of
from tests.oracle import digest, positions, strip_resent
from tidemark.cli.verify import source_lsn, wait_caught_up, wait_debezium
from tidemark.core.config import Config, SnapshotConfig
from tidemark.core.kafka import client_config, partition_counts
from tidemark.core.partitioners import partitions_of
from tidemark.core.topics import backfill_topic
from tidemark.devstack.debezium import PUBLICATION
from tidemark.devstack.stack import DevStack


def snapshot_config(stack: DevStack, name: str, **snapshot: Any) -> Config:
    config = pipeline_config(stack, name, batch_size=500)
    return dataclasses.replace(config, snapshot=SnapshotConfig(**snapshot))


def tiny_chunks(
    stack: DevStack, name: str, watermarks: str, rows_per_second: int, **snapshot: Any
) -> Config:
    """A pipeline whose backfills read chunks of 5 to 10 rows at ``rows_per_second``."""
    return snapshot_config(
        stack,
        name,
        chunk_size=5,
        min_chunk_size=5,
        max_chunk_size=10,
        max_rows_per_second=rows_per_second,
        watermarks=watermarks,
        **snapshot,
    )


def assert_lake_equal(config: Config, spark: Any, catalog: str, table: str) -> None:
    """Run the sink (in this process, catalog ``catalog``) over ``table``'s reconciled
    topic to its end; its Iceberg table equals the source."""
    from spark_sink.job import Sink
    from spark_sink.session import create_session
    from tests.integration.test_sink import assert_equal, drain, sink_config

    settings = sink_config(config, catalog, [table])
    drain(Sink(settings, create_session(settings)))
    assert_equal(settings, spark, table)


def uncaptured_table(
    config: Config, name: str, rows: int, primary_key: bool = True, streamed_row: bool = True
) -> None:
    """``public.<name>``: rows 1 to ``rows``, never streamed by Debezium, and (``streamed_row``)
    row 0, streamed."""
    key = "PRIMARY KEY" if primary_key else ""
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS stage")
        staged = sql.Identifier("stage", name)
        conn.execute(
            sql.SQL("CREATE TABLE {} (id integer {}, name text, v integer NOT NULL)").format(
                staged, sql.SQL(key)
            )
        )
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, 'row ' || g, 0 FROM generate_series(1, %s) g").format(
                staged
            ),
            (rows,),
        )
        conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA public").format(staged))
        if streamed_row:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (0, 'row 0', 0)").format(
                    sql.Identifier("public", name)
                )
            )


def source_rows(config: Config, name: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    with psycopg.connect(**config.owner_conninfo()) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, name, v FROM {}").format(sql.Identifier("public", name))
        ).fetchall()
    return {(r[0],): {"id": r[0], "name": r[1], "v": r[2]} for r in rows}


class Writer:
    """Random transactions on ``public.<name>`` until stopped: updates, deletes, new rows."""

    def __init__(
        self, config: Config, name: str, keys: int, seed: int, new_from: int | None = None
    ) -> None:
        """Changes keys 1 to ``keys``; new rows from ``new_from`` (``keys + 1``) on."""
        self.config, self.table, self.keys = config, sql.Identifier("public", name), keys
        self.rng = random.Random(seed)
        self.touched: set[int] = {0}
        self.transactions = 0
        self._next_id = keys + 1 if new_from is None else new_from
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            with psycopg.connect(**self.config.owner_conninfo()) as conn:
                while not self._stop.is_set():
                    try:
                        with conn.transaction():
                            for _ in range(self.rng.randint(1, 3)):
                                self._statement(conn)
                    except psycopg.errors.DeadlockDetected:
                        continue
                    self.transactions += 1
                    self._stop.wait(0.003)
        except BaseException as exc:
            self.error = exc

    def _statement(self, conn: psycopg.Connection[Any]) -> None:
        draw = self.rng.random()
        if draw < 0.08:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, 'new', 0)").format(self.table), (self._next_id,)
            )
            self.touched.add(self._next_id)
            self._next_id += 1
            return
        key = self.rng.randint(1, self.keys)
        self.touched.add(key)
        if draw < 0.15:
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(self.table), (key,))
        else:
            conn.execute(
                sql.SQL("UPDATE {} SET v = v + 1, name = %s WHERE id = %s").format(self.table),
                (f"w{self.transactions}", key),
            )


def cli(processor: Processor, *args: str) -> str:
    """Run ``tidemark <args> --config <the processor's file>`` as a process; its stdout."""
    done = run_cli(processor, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def notifications(config: Config) -> list[dict[str, Any]]:
    topic = f"{config.processor.pipeline}.notifications"
    return [orjson.loads(r.value) for r in read_topic(config, topic) if r.value is not None]


def notified(config: Config, kind: str, request: str) -> list[dict[str, Any]]:
    return [
        n
        for n in notifications(config)
        if n["type"] == kind and n["additional_data"]["request_id"] == request
    ]


def notified_type(config: Config, kind: str) -> bool:
    return any(n["type"] == kind for n in notifications(config))


def progress(config: Config, table: str, request: str) -> TableProgress:
    """The progress of ``table`` in request ``request`` (nothing read yet, before it is queued)."""
    state = read_state(config)
    tables = state.tables if state is not None else []
    found = [t for t in tables if t.table == table and t.request_id == request]
    return found[0] if found else TableProgress(table, request)


def chunks_done(config: Config, table: str) -> int:
    return progress(config, table, "load-1").chunks


def leading(processor: Processor) -> bool:
    return processor.health().get("snapshots") == "leader"


def check_monotone(events: list[Event]) -> None:
    """Per key, in emission order: ``v`` never goes back, nothing follows a delete."""
    by_key: dict[tuple[Any, ...], list[Event]] = {}
    for event in sorted(events, key=lambda e: (e.partition, e.offset)):
        by_key.setdefault(tuple(event.key.values()), []).append(event)
    for key, history in by_key.items():
        seen: list[int] = []
        deleted = False
        for event in history:
            if event.value is None:
                continue  # the tombstone after a delete
            assert not deleted, f"{key}: an event after the key's delete"
            if event.after is None:
                deleted = True
                continue
            seen.append(event.after["v"])
        assert seen == sorted(seen), f"{key}: versions went back {seen}"


def test_backfill_converges_while_the_table_changes(stack: DevStack) -> None:
    name, keys = "iso_snap_items", 30_000
    config = snapshot_config(
        stack, "snap", chunk_size=1000, min_chunk_size=500, max_chunk_size=2000, readers=2
    )
    uncaptured_table(config, name, keys)
    processor = Processor(stack, config, "snap-processor").start()
    writer = Writer(config, name, keys, seed=7)
    try:
        wait_for("the coordinator", lambda: leading(processor))
        writer.start()
        time.sleep(1)
        out = cli(processor, "snapshot", "start", f"public.{name}", "--id", "backfill-1")
        assert "backfill-1" in out
        wait_for("the snapshot to complete", lambda: notified(config, "COMPLETED", "backfill-1"))
        time.sleep(1)  # changes after the snapshot too
        writer.stop()
        wait_caught_up(config)
        events = reconciled(config, name)
        expected = source_rows(config, name)
        assert final_rows(events) == expected, differences(config, name, events, expected)  # I1
        check_monotone(events)  # I3
        # Rows the stream never carried came from the backfill.
        untouched = set(range(1, keys + 1)) - writer.touched
        snapshot_keys = {
            e.key["id"]
            for e in events
            if e.value is not None and e.value["tidemark"]["reason"] == "snapshot"
        }
        assert untouched and untouched <= snapshot_keys
        scanned = notified(config, "TABLE_SCAN_COMPLETED", "backfill-1")
        rows_read = int(scanned[0]["additional_data"]["total_rows_scanned"])
        assert rows_read >= len(untouched)
        assert (
            metric(processor.metrics(), "tidemark_snapshot_rows_total", table=f"public.{name}")
            == rows_read
        )
        assert notified(config, "STARTED", "backfill-1") and notified(
            config, "IN_PROGRESS", "backfill-1"
        )
        assert read_topic(config, "snap.dlq") == []
        # Chunk rows went to the partition of their key's changes (Kafka's murmur2 partitioner).
        changes = {r.key: r.partition for r in read_topic(config, f"tidemark.public.{name}")}
        backfill = read_backfill(config, f"snap.backfill.tidemark.public.{name}")
        shared = [(r.partition, changes[r.key]) for r in backfill if r.key in changes]
        assert len(shared) > 100 and all(ours == theirs for ours, theirs in shared)
        dropped = metric(
            processor.metrics(),
            "tidemark_events_dropped_total",
            topic=f"snap.backfill.tidemark.public.{name}",
        )
        print(
            f"{writer.transactions} transactions during the snapshot; {rows_read} rows read; "
            f"{dropped:.0f} chunk rows dropped as older than state"
        )
    finally:
        processor.stop()


def test_snapshot_survives_a_crash_and_obeys_pause_resume_and_stop(stack: DevStack) -> None:
    name, rows = "iso_snapctl_a", 8000
    config = snapshot_config(
        stack,
        "snapctl",
        chunk_size=500,
        min_chunk_size=250,
        max_chunk_size=1000,
        max_rows_per_second=2000,
    )
    uncaptured_table(config, name, rows)
    uncaptured_table(config, "iso_snapctl_nokey", 10, primary_key=False)
    table = f"public.{name}"
    processor = Processor(stack, config, "snapctl-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        data = {"data-collections": ["public.iso_snapctl_nokey", table]}
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO public.tidemark_signal (id, type, data) VALUES (%s, %s, %s)",
                ("ctl-1", "execute-snapshot", orjson.dumps(data).decode()),
            )
        wait_for("chunks", lambda: progress(config, table, "ctl-1").rows >= 1500)
        processor.kill()
        at_kill = progress(config, table, "ctl-1").rows
        assert at_kill < rows
        cli(processor, "snapshot", "pause")  # no processor runs: acted on when one does
        processor.start()
        wait_for("the pause", lambda: notified_type(config, "PAUSED"))
        paused_at = progress(config, table, "ctl-1").rows
        time.sleep(2)
        assert at_kill <= progress(config, table, "ctl-1").rows == paused_at < rows
        status = cli(processor, "snapshot", "status")
        assert "(PAUSED)" in status and table in status and "running" in status
        cli(processor, "snapshot", "resume")
        wait_for("the snapshot to complete", lambda: notified(config, "COMPLETED", "ctl-1"))

        done = progress(config, table, "ctl-1")
        assert (done.status, done.rows) == ("completed", rows + 1)  # each row counted once (I4)
        backfilled = len(read_backfill(config, f"snapctl.backfill.tidemark.{table}"))
        # At most the reader's two parts in flight (1,000 rows at most each) read again.
        assert rows < backfilled <= rows + 1 + 2 * 1000
        assert len(notified(config, "STARTED", "ctl-1")) == 1
        refused = progress(config, "public.iso_snapctl_nokey", "ctl-1")
        assert refused.status == "aborted" and "no primary key" in (refused.error or "")

        cli(processor, "snapshot", "start", table, "--id", "ctl-2")
        wait_for("a second snapshot", lambda: progress(config, table, "ctl-2").rows > 0)
        cli(processor, "snapshot", "stop", table)
        wait_for(
            "the stop",
            lambda: [
                n
                for n in notifications(config)
                if n["type"] == "ABORTED"
                and n["additional_data"].get("aborted_request_id") == "ctl-2"
            ],
        )
        stopped = progress(config, table, "ctl-2")
        assert stopped.status == "aborted" and stopped.rows < rows
        status_json = orjson.loads(cli(processor, "snapshot", "status", "--json"))
        assert [t["status"] for t in status_json["tables"] if t["request_id"] == "ctl-2"] == [
            "aborted"
        ]

        wait_caught_up(config)
        events = reconciled(config, name)
        assert final_rows(events) == source_rows(config, name)
        check_monotone(events)
    finally:
        processor.stop()


def history_check(config: Config, table: str, events: list[Event]) -> None:
    """I3 against the source's own order: per key, the emitted rows are versions the change
    topic shows, moving forward in it (a chunk row is the row at its snapshot: one of
    them); at least once lets a crash send a run of them again, which goes back to rows
    already emitted (:func:`tests.oracle.strip_resent`), never to others."""
    decode = decoder(config)
    versions: dict[tuple[Any, ...], list[dict[str, Any] | None]] = {}
    for record in sorted(
        read_topic(config, f"tidemark.public.{table}"), key=lambda r: (r.partition, r.offset)
    ):
        if record.key is None or record.value is None:
            continue
        key = tuple(decode(record.key).values())
        after = decode(record.value)["after"]
        chain = versions.setdefault(key, [None])
        if after is not None:
            previous = chain[-1] or {}
            after = {c: previous.get(c) if v == TOAST_PLACEHOLDER else v for c, v in after.items()}
        chain.append(after)
    for key, emitted in emitted_by_key(events).items():
        history = [digest(row) for row in versions.get(key, [None])]
        indices = positions(history, [digest(row) for row in emitted])
        _forward, stale = strip_resent([i for i in indices if i >= 0])
        if -1 in indices or stale:
            # What a failure needs to be understood: where and why each row was emitted.
            outputs = [(e.partition, e.offset, e.value["tidemark"]) for e in events_of(events, key)]
            raise AssertionError(
                f"{table} {key}: emitted rows went back in history: positions {indices}; "
                f"outputs (partition, offset, tidemark) {outputs}"
            )


def events_of(events: list[Event], key: tuple[Any, ...]) -> list[Event]:
    """``key``'s events that carry a value, in partition and offset order."""
    ordered = sorted(events, key=lambda e: (e.partition, e.offset))
    return [e for e in ordered if e.value is not None and tuple(e.key.values()) == key]


def emitted_by_key(events: list[Event]) -> dict[tuple[Any, ...], list[dict[str, Any] | None]]:
    out: dict[tuple[Any, ...], list[dict[str, Any] | None]] = {}
    for event in sorted(events, key=lambda e: (e.partition, e.offset)):
        if event.value is not None:
            out.setdefault(tuple(event.key.values()), []).append(event.after)
    return out


def test_a_window_row_loses_to_a_commit_its_chunk_could_not_see_yet(stack: DevStack) -> None:
    """PostgreSQL writes a transaction's commit record before it makes the transaction
    visible. A transaction caught between the two when a window opens lies below the
    window's open row in the change stream, yet the chunk read inside the window does not
    see it: by positions alone its (older) row would win. A synchronous standby that never
    connects holds one such transaction there for as long as the test needs (only its own
    session waits: the cluster commits with ``synchronous_commit = off``); the window's
    snapshot must settle it."""
    name = "iso_late_commit"
    config = snapshot_config(
        stack,
        "late",
        chunk_size=100,
        min_chunk_size=100,
        max_chunk_size=100,
        watermarks="signal-table",
    )
    uncaptured_table(config, name, 20)
    processor = Processor(stack, config, "late-processor").start()
    conninfo = config.owner_conninfo()
    table = sql.Identifier("public", name)
    topic = f"{config.source.topic_prefix}.public.{name}"
    admin = psycopg.connect(**conninfo, autocommit=True)
    held = psycopg.connect(**conninfo, autocommit=True)
    waiting: threading.Thread | None = None

    def streamed(key: int) -> bool:
        decode = decoder(config)
        return any(
            r.value is not None
            and (decode(r.value).get("after") or {}).get("name") == f"late {key}"
            for r in read_topic(config, topic)
        )

    def hold(key: int) -> threading.Thread:
        update = sql.SQL("UPDATE {} SET name = %s, v = 1 WHERE id = %s").format(table)
        thread = threading.Thread(
            target=held.execute, args=(update, (f"late {key}", key)), daemon=True
        )
        thread.start()
        wait_for("the late commit in the change stream", lambda: streamed(key))
        return thread

    try:
        wait_for("the coordinator", lambda: leading(processor))
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'tidemark_test_no_standby'")
        admin.execute("SELECT pg_reload_conf()")
        held.execute("SET synchronous_commit = on")
        # The reload reaches each server process in its own time (the checkpointer tells
        # backends that a synchronous standby is wanted): until it has, a commit does not
        # wait, so a key is tried again until one commit is held.
        for key in (5, 6, 7, 8, 9):
            waiting = hold(key)
            select = sql.SQL("SELECT name FROM {} WHERE id = %s").format(table)
            if admin.execute(select, (key,)).fetchone() == (f"row {key}",):
                break  # committed in the WAL, not visible yet
            waiting.join(30)
            time.sleep(1)
        else:
            pytest.fail("no commit was held back by the synchronous standby setting")
        cli(processor, "snapshot", "start", f"public.{name}", "--id", "late-1")
        wait_for("the snapshot", lambda: notified(config, "COMPLETED", "late-1"))
    finally:
        admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        admin.execute("SELECT pg_reload_conf()")
        # Its wait ends; the transaction had committed.
        admin.execute("SELECT pg_cancel_backend(%s)", (held.info.backend_pid,))
        if waiting is not None:
            waiting.join(30)
        held.close()
        admin.close()
    try:
        wait_caught_up(config)
        events = reconciled(config, name)
        assert final_rows(events) == source_rows(config, name)  # I1
        check_monotone(events)  # I3
        history = [(e.after or {}).get("name") for e in events if e.key == {"id": key} and e.value]
        assert history == [f"late {key}"]  # the chunk's older row was dropped
        snapshot_rows = [
            e for e in events if e.value and e.value["tidemark"]["reason"] == "snapshot"
        ]
        assert len(snapshot_rows) == 20  # rows 0 to 20 but the held one
    finally:
        processor.stop()


@pytest.mark.parametrize(
    ("name", "watermarks", "readers"),
    [
        ("snapload", "read-only", 2),
        ("snapwin", "signal-table", 1),
    ],
)
def test_tiny_chunks_under_a_random_workload_with_crashes(
    stack: DevStack, name: str, watermarks: str, readers: int
) -> None:
    """DDD-3's test, in both watermark modes: chunks of 5 to 10 rows while inserts, updates,
    deletes and re-inserts (multi-row transactions, a composite key with a text column,
    TOASTed values, NULLs) hit the same tables, and the processor is killed twice in the
    middle of the snapshot. Read-only, two readers read parts of a table at once; with
    signal-table watermarks the first kill comes while a window is open (a failpoint in the
    chunk reader), DDD-3's first crash case."""
    config = tiny_chunks(stack, name, watermarks, 25, readers=readers)
    noise = sql.Identifier(f"iso_{name}_noise")
    kv, pair = Table(f"iso_{name}_kv"), Table(f"iso_{name}_pair", composite=True)
    workload = Workload(config, [kv, pair], seed=31, keys=90)
    workload.create_tables()
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {}() RETURNS text LANGUAGE sql VOLATILE AS "
                "$$ SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 100) $$"
            ).format(noise)
        )
        for table in (kv, pair):
            ident = sql.Identifier("public", table.name)
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN doc text").format(ident))
            conn.execute(sql.SQL("ALTER TABLE {} ALTER doc SET STORAGE EXTERNAL").format(ident))
            conn.execute(sql.SQL("ALTER TABLE {} ALTER doc SET DEFAULT {}()").format(ident, noise))
    workload.run_some(150)
    window_open = "window-open:4" if watermarks == "signal-table" else ""
    processor = Processor(stack, config, f"{name}-processor").start(failpoint=window_open)
    rng = random.Random(5)
    workload.start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        tables = [f"public.{kv.name}", f"public.{pair.name}"]
        cli(processor, "snapshot", "start", *tables, "--id", "load-1")
        if window_open:
            processor.crashed(timeout=120)
            processor.start()
            # The three chunks read before the kill stay done. (Read right after the
            # kill, the broker may show none: it reports a last stable offset of 0 while
            # the killed coordinator's transaction is open, until the next one fences it.)
            wait_for("the chunks before the kill", lambda: chunks_done(config, tables[0]) >= 3)
        for _ in range(2 - bool(window_open)):
            wait_for("chunks", lambda: progress(config, tables[0], "load-1").chunks > 0)
            time.sleep(rng.uniform(0.5, 3.0))
            processor.kill()
            processor.start()
        wait_for("the snapshot", lambda: notified(config, "COMPLETED", "load-1"), timeout=180)
        time.sleep(1)
    finally:
        workload.stop()
    try:
        wait_caught_up(config)
        assert len(notified(config, "STARTED", "load-1")) == 1
        for table in (kv, pair):
            entry = progress(config, f"public.{table.name}", "load-1")
            assert entry.status == "completed" and entry.chunks > 5
            events = reconciled(config, table.name)
            assert final_rows(events) == source_rows_of(config, table)  # I1
            history_check(config, table.name, events)  # I2, I3
            toasted = [
                e for e in events if e.value is not None and TOAST_PLACEHOLDER in str(e.value)
            ]
            assert not toasted
        assert read_topic(config, f"{name}.dlq") == []
        print(f"{workload.transactions} transactions during a snapshot with two kills")
    finally:
        processor.stop()


def test_a_filter_that_fails_aborts_its_table_and_nothing_else(stack: DevStack) -> None:
    """A filter with a syntax error, and one with a type error, on real tables: each of those
    tables is aborted with PostgreSQL's reason and an ABORTED notification, the table after
    them is read, and the processor neither stops nor restarts (it used to crash on the
    filter, and every instance after it, in turn, as each became the coordinator)."""
    config = snapshot_config(stack, "snapbad", chunk_size=200, min_chunk_size=100)
    for name in ("iso_snapbad_syntax", "iso_snapbad_type", "iso_snapbad_ok"):
        uncaptured_table(config, name, 300)
    processor = Processor(stack, config, "snapbad-processor").start()
    pid = processor.pid
    try:
        wait_for("the coordinator", lambda: leading(processor))
        data = {
            "data-collections": [
                "public.iso_snapbad_syntax",
                "public.iso_snapbad_type",
                "public.iso_snapbad_ok",
            ],
            "additional-conditions": [
                {"data-collection": "public.iso_snapbad_syntax", "filter": "id = = 3"},
                {"data-collection": "public.iso_snapbad_type", "filter": "name > 3"},
            ],
        }
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO public.tidemark_signal (id, type, data) VALUES (%s, %s, %s)",
                ("bad-1", "execute-snapshot", orjson.dumps(data).decode()),
            )
        wait_for("the good table", lambda: notified(config, "COMPLETED", "bad-1"))
        for name, words in (("iso_snapbad_syntax", "syntax error"), ("iso_snapbad_type", "text")):
            aborted = progress(config, f"public.{name}", "bad-1")
            assert aborted.status == "aborted" and words in (aborted.error or ""), aborted
        reasons = [n["additional_data"] for n in notified(config, "ABORTED", "bad-1")]
        assert len(reasons) == 2
        assert progress(config, "public.iso_snapbad_ok", "bad-1").rows == 301
        assert processor.pid == pid and processor.health().get("status") == "ok"
    finally:
        processor.stop()


def test_a_backfill_in_another_encoding_than_its_topic_is_refused_naming_the_setting(
    stack: DevStack,
) -> None:
    """Debezium runs with ``decimal.handling.mode=string``; the processor is left at the
    connector's default (``precise``). The table's backfill is refused before its first
    row: ABORTED with a reason that names the setting, counted in the refusal metric, and
    nothing in its backfill topic; set as the connector has it, the backfill completes."""
    name = "iso_snapenc_t"
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, amount numeric(10, 2))")
    connector = {"decimal.handling.mode": "string"}
    debezium = Debezium(stack, "snapenc", [f"public.{name}"], connector, "json").start()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {name} SELECT g, g * 1.25 FROM generate_series(1, 50) g")
        wait_debezium(debezium.config, source_lsn(debezium.config))
        config = own_pipeline(stack, debezium, name)
        defaults = dataclasses.replace(
            config, source=dataclasses.replace(config.source, debezium={})
        )
        backfill = f"snapenc.backfill.snapenc.public.{name}"
        refused = backfill_once(stack, defaults, f"public.{name}", "enc-1", "ABORTED")
        reason = progress(defaults, f"public.{name}", "enc-1").error or ""
        assert "decimal.handling.mode=precise" in reason, reason
        assert "set source.debezium.decimal.handling.mode" in reason, reason
        assert (
            metric(
                refused,
                "tidemark_snapshot_refused_total",
                table=f"public.{name}",
                reason="decimal.handling.mode",
            )
            == 1
        )
        assert not read_topic(defaults, backfill)
        matching = dataclasses.replace(
            defaults, source=dataclasses.replace(defaults.source, debezium=connector)
        )
        backfill_once(stack, matching, f"public.{name}", "enc-2", "COMPLETED")
        assert len(read_backfill(defaults, backfill)) == 50
    finally:
        debezium.stop()


def test_a_decimal_scale_changed_after_the_last_event_is_backfilled_at_the_new_scale(
    stack: DevStack,
) -> None:
    """``numeric(10,2)`` becomes ``numeric(12,4)`` after the table's last event, with no
    change streamed since: Debezium's last event still declares scale 2. Then, between two
    chunks of its backfill, ``numeric(14,6)``, and a key not read yet gets six decimals.
    Every row read goes out under a schema that declares the scale its digits have (not
    1.25 read as 125.00 under the old one), the rows read after the second change are not
    rounded to the scale learned before it, and the reconciled topic decodes to the
    source's values."""
    name = "iso_snapscale_t"
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, price numeric(10, 2))")
    debezium = Debezium(stack, "snapscale", [f"public.{name}"], {}, "json").start()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {name} SELECT g, g * 1.25 FROM generate_series(1, 60) g")
        wait_debezium(debezium.config, source_lsn(debezium.config))
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {name} ALTER price TYPE numeric(12, 4)")
        config = own_pipeline(stack, debezium, name)
        config = dataclasses.replace(
            config,
            snapshot=dataclasses.replace(
                config.snapshot,
                chunk_size=5,
                min_chunk_size=5,
                max_chunk_size=5,
                max_rows_per_second=10,
                readers=1,
            ),
        )
        table = f"public.{name}"
        processor = Processor(stack, config, "snapscale-processor").start()
        try:
            wait_for("the coordinator", lambda: leading(processor))
            send_signal(config, "execute-snapshot", {"data-collections": [table]}, "scale-1")
            wait_for("a chunk", lambda: progress(config, table, "scale-1").chunks > 0)
            with backfill_paused(config, table, "scale-1"):
                with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
                    conn.execute(f"ALTER TABLE {name} ALTER price TYPE numeric(14, 6)")
                    conn.execute(f"UPDATE {name} SET price = 1.234567 WHERE id = 60")
            wait_for("the backfill", lambda: notified(config, "COMPLETED", "scale-1"))
        finally:
            processor.stop()
        with psycopg.connect(**stack.config.owner_conninfo()) as conn:
            source = dict(conn.execute(f"SELECT id, price FROM {name}").fetchall())
        prefix = config.source.topic_prefix
        rows = read_backfill(config, f"{config.processor.pipeline}.backfill.{prefix}.{table}")
        assert len(rows) == 60
        read = {
            orjson.loads(r.key or b"")["payload"]["id"]: declared_decimal(r.value) for r in rows
        }
        assert {key: value for key, (value, _scale) in read.items()} == source
        assert {scale for _value, scale in read.values()} == {4, 6}
        outputs = read_topic(config, f"{prefix}.reconciled.{table}")
        last = {orjson.loads(r.key or b"")["payload"]["id"]: r.value for r in outputs}
        assert {key: declared_decimal(value)[0] for key, value in last.items()} == source
    finally:
        debezium.stop()


def declared_decimal(value: bytes | None) -> tuple[Any, int]:
    """The ``price`` of a JSON Debezium event with its schema, read at the scale that schema
    declares, and that scale."""
    import base64
    import decimal

    document = orjson.loads(value or b"")
    after = next(f for f in document["schema"]["fields"] if f["field"] == "after")
    price = next(f for f in after["fields"] if f["field"] == "price")
    scale = int(price["parameters"]["scale"])
    unscaled = int.from_bytes(base64.b64decode(document["payload"]["after"]["price"]), "big")
    return decimal.Decimal(unscaled).scaleb(-scale), scale


def own_pipeline(stack: DevStack, debezium: Debezium, table: str) -> Config:
    """A pipeline named as ``debezium`` reading only ``public.<table>`` of its topics, with
    the connector's settings."""
    prefix = debezium.config.source.topic_prefix
    base = pipeline_config(stack, prefix, batch_size=500)
    only = dataclasses.replace(base.processor, input_pattern=rf"^{prefix}\.public\.{table}$")
    return dataclasses.replace(debezium.config, processor=only, snapshot=base.snapshot)


def backfill_once(stack: DevStack, config: Config, table: str, request: str, outcome: str) -> str:
    """Run a processor until its backfill of ``table`` ends in ``outcome`` and its data plane
    caught up; its metrics."""
    processor = Processor(stack, config, f"{config.processor.pipeline}-{request}").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        send_signal(config, "execute-snapshot", {"data-collections": [table]}, request)
        wait_for(outcome, lambda: notified(config, outcome, request))
        wait_caught_up(config)
        return processor.metrics()
    finally:
        processor.stop()


def test_a_backfill_of_a_table_whose_primary_key_changed_is_refused(stack: DevStack) -> None:
    """The primary key becomes ``(id, region)`` after the table's last event: the rows read
    would be keyed by the events' ``id`` alone, and rows of two regions merged into one.
    The backfill is refused with both keys named; once an event with the new key has
    streamed, it runs."""
    name = "iso_snaprekey_t"
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, region text, v text)")
    debezium = Debezium(stack, "snaprekey", [f"public.{name}"], {}, "json").start()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {name} SELECT g, 'eu', 'v' || g FROM generate_series(1, 20) g"
            )
            conn.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_pkey")
            conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id, region)")
            conn.execute(f"INSERT INTO {name} VALUES (1, 'us', 'other region')")
        wait_debezium(debezium.config, source_lsn(debezium.config))
        config = own_pipeline(stack, debezium, name)
        table = f"public.{name}"
        backfill_once(stack, config, table, "rekey-1", "COMPLETED")
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_pkey")
            conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id, region, v)")
        seen = backfill_once(stack, config, table, "rekey-2", "ABORTED")
        reason = progress(config, table, "rekey-2").error or ""
        assert "['id', 'region']" in reason and "['id', 'region', 'v']" in reason, reason
        assert metric(seen, "tidemark_snapshot_refused_total", table=table, reason="primary-key")
    finally:
        debezium.stop()


def test_a_debezium_resnapshot_after_a_lost_slot_repairs_what_changed_meanwhile(
    stack: DevStack,
) -> None:
    """The documented recovery after a lost replication slot: a new connector without
    offsets snapshots the table again. Its rows carry ``sequence: [null, X]``; they must
    win over the state of the changes streamed before the slot was lost, so the rows
    changed while nothing streamed reach the reconciled topic (as ``(0, X)`` they were
    dropped as older than state). A delete made meanwhile is not in a snapshot: it stays
    missing, as the guarantees page says."""
    name = "iso_resnap_t"
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, v text)")
    debezium = Debezium(stack, "resnap", [f"public.{name}"], {}, "json").start()
    config = own_pipeline(stack, debezium, name)
    processor = Processor(stack, config, "resnap-processor").start()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {name} SELECT g, 'v' || g FROM generate_series(1, 20) g")
            conn.execute(f"UPDATE {name} SET v = 'streamed' WHERE id <= 5")
        wait_for("the streamed rows", lambda: len(final_rows(reconciled(config, name))) == 20)
        debezium.stop()  # drops the slot: what it streams next is gone
        (stack.run_dir / "resnap-debezium" / "debezium-offsets.dat").unlink()
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE {name} SET v = 'while the slot was lost' WHERE id <= 3")
            conn.execute(f"INSERT INTO {name} VALUES (21, 'new meanwhile')")
            conn.execute(f"DELETE FROM {name} WHERE id = 20")
        debezium = Debezium(stack, "resnap", [f"public.{name}"], {}, "json").start()
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE {name} SET v = 'after' WHERE id = 4")
        with psycopg.connect(**stack.config.owner_conninfo()) as conn:
            source = {(r[0],): r[1] for r in conn.execute(f"SELECT id, v FROM {name}")}

        def repaired() -> bool:
            rows = {k: row["v"] for k, row in final_rows(reconciled(config, name)).items()}
            return rows == {**source, (20,): "v20"}

        wait_for("the snapshot's rows", repaired)
        nulls = [
            e
            for e in read_topic(config, f"resnap.public.{name}")
            if e.value and b"[null," in e.value
        ]
        assert len(nulls) >= 20, "the new connector's snapshot rows carry [null, X]"
    finally:
        processor.stop()
        debezium.stop()


def test_a_truncate_deletes_the_tables_rows_in_every_partition(stack: DevStack) -> None:
    truncate_applied(stack, "json")


def truncate_applied(stack: DevStack, fmt: str) -> Config:
    """Debezium with ``skipped.operations: none`` writes a truncate event (no key, no rows)
    into one partition of the table's topic, whose keys are in all of them. Under
    ``debezium-upsert`` every row written before the truncate is deleted in the reconciled
    topic, whichever partition it is in, and the rows written after it stay."""
    name = f"iso_trunc_{fmt}_t"
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, v text)")
    settings = {"skipped.operations": "none"}
    debezium = Debezium(stack, f"trunc{fmt}", [f"public.{name}"], settings, fmt).start()
    # The stack's publication was made by a connector that skips truncates; its other
    # connectors skip them whatever it publishes.
    publish(stack, "insert, update, delete, truncate")
    config = own_pipeline(stack, debezium, name)
    assert config.envelope_of(f"{config.source.topic_prefix}.public.{name}") == "debezium-upsert"
    processor = Processor(stack, config, f"trunc-{fmt}-processor").start()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {name} SELECT g, 'v' || g FROM generate_series(1, 40) g")
            wait_for("the rows", lambda: len(final_rows(reconciled(config, name))) == 40)
            conn.execute(f"TRUNCATE {name}")
            conn.execute(f"INSERT INTO {name} VALUES (41, 'after the truncate')")

        def truncated() -> bool:
            return list(final_rows(reconciled(config, name))) == [(41,)]

        wait_for("the truncate applied", truncated)
        events = reconciled(config, name)
        assert len({e.partition for e in events}) > 1, "the table's keys span partitions"
        deletes = [e for e in events if e.value is not None and e.value["op"] == "d"]
        assert sorted(e.key["id"] for e in deletes) == list(range(1, 41))
        assert {e.value["tidemark"]["reason"] for e in deletes} == {"truncate"}
        topic = f"{config.source.topic_prefix}.public.{name}"
        assert metric(processor.metrics(), "tidemark_truncated_rows_total", topic=topic) == 40
        assert records_if_any(config, f"{config.processor.pipeline}.dlq") == []
    finally:
        processor.stop()
        debezium.stop()
        publish(stack, "insert, update, delete")
    return config


def publish(stack: DevStack, operations: str) -> None:
    """Set what the development stack's publication publishes."""
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"ALTER PUBLICATION {PUBLICATION} SET (publish = '{operations}')")


def test_a_backfill_goes_where_the_topics_partitioner_put_its_keys_or_is_refused(
    stack: DevStack,
) -> None:
    """The bridge produces with librdkafka's default partitioner (CRC32), as a Debezium
    embedded in a librdkafka program would. A processor left at murmur2 counts the
    contradiction in the data plane and refuses the backfill, naming crc32; one configured
    with crc32 backfills every row into the partition of its key's changes."""
    name = "iso_snappart_t"
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, v text)")
    debezium = Debezium(stack, "snappart", [f"public.{name}"], {}, "json", "crc32").start()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {name} SELECT g, 'v' || g FROM generate_series(1, 200) g")
        wait_debezium(debezium.config, source_lsn(debezium.config))
        config = own_pipeline(stack, debezium, name)
        murmur2 = dataclasses.replace(
            config, source=dataclasses.replace(config.source, partitioner="murmur2")
        )
        seen = backfill_once(stack, murmur2, f"public.{name}", "part-1", "ABORTED")
        reason = progress(config, f"public.{name}", "part-1").error or ""
        assert "not partitioned by murmur2 (source.partitioner)" in reason, reason
        assert reason.endswith("; crc32 fits"), reason
        table = f"public.{name}"
        assert metric(seen, "tidemark_snapshot_refused_total", table=table, reason="partitioner")
        topic = f"snappart.public.{name}"
        assert metric(seen, "tidemark_partitioner_mismatches_total", topic=topic) > 0
        backfill = f"snappart.backfill.{topic}"
        assert not read_topic(config, backfill)
        seen = backfill_once(stack, config, table, "part-2", "COMPLETED")
        assert metric(seen, "tidemark_partitioner_mismatches_total", topic=topic) == 0
        changes = {r.key: r.partition for r in read_topic(config, topic)}
        rows = read_backfill(config, backfill)
        assert len(rows) == 200
        assert all(changes[r.key] == r.partition for r in rows)
        assert len({r.partition for r in rows}) == config.kafka.topic_partitions
    finally:
        debezium.stop()


def test_a_malformed_newest_record_of_the_topic_does_not_abort_a_backfill(
    stack: DevStack,
) -> None:
    """The long lifetime run aborted a backfill: a poison record was the newest of its
    table's change topic, and the backfill learned the events' form from it ("cannot
    learn the events of ...: unexpected character"). One bad message stops nothing else:
    the backfill learns from the newest record it can read."""
    name = "iso_poisoned_t"
    config = snapshot_config(stack, "poisoned")
    uncaptured_table(config, name, 200)
    topic = f"{config.source.topic_prefix}.public.{name}"
    wait_debezium(config, source_lsn(config))
    producer = Producer(client_config(config.kafka))
    key = b'{"id": -1}'
    # where the partitioner puts its key (the backfill learned its events' form from it),
    # and in another partition too (it judged the topic's partitioner by it)
    [home] = partitions_of(config.source.partitioner, [key], config.kafka.topic_partitions)
    for partition in (home, (home + 1) % config.kafka.topic_partitions):
        producer.produce(topic, b"{not json", key, partition)
    assert producer.flush(30) == 0
    processor = Processor(stack, config, "poisoned-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        cli(processor, "snapshot", "start", f"public.{name}", "--id", "poisoned-1")
        wait_for(
            "the backfill",
            lambda: (
                notified(config, "COMPLETED", "poisoned-1")
                or notified(config, "ABORTED", "poisoned-1")
            ),
        )
        assert not notified(config, "ABORTED", "poisoned-1"), processor.log.read_text()[-2000:]
        wait_caught_up(config)
        assert final_rows(reconciled(config, name)) == source_rows(config, name)
    finally:
        processor.stop()


def test_a_table_with_no_event_yet_is_backfilled_as_debezium_would_write_it(
    stack: DevStack,
) -> None:
    """As after ``snapshot.mode=no_data``: the table's rows were never streamed (filled in
    another schema, then moved), so it has no event and no topic. The backfill builds its
    events from the catalog and another table's event, and creates the topic as that
    table's. Once the rows change, Debezium's own events of them are the backfilled ones:
    the same key bytes and partition, the same schema byte for byte, the same row."""
    name = "iso_quiet_rows"
    config = snapshot_config(stack, "quiet")
    uncaptured_table(config, "iso_quiet_other", 0)  # another table's event: one row
    uncaptured_table(config, name, 300, streamed_row=False)
    topic = f"{config.source.topic_prefix}.public.{name}"
    admin = AdminClient(client_config(config.kafka))
    assert topic not in admin.list_topics(timeout=10).topics
    processor = Processor(stack, config, "quiet-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        cli(processor, "snapshot", "start", f"public.{name}", "--id", "quiet-1")
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "quiet-1"))
        assert not notified(config, "ABORTED", "quiet-1"), processor.log.read_text()[-2000:]
        wait_caught_up(config)
        assert final_rows(reconciled(config, name)) == source_rows(config, name)
    finally:
        processor.stop()
    assert partition_counts(admin, [topic]) == {topic: 3}
    ours = {
        tuple(orjson.loads(r.key)["payload"].values()): (r.partition, r.key, r.value)
        for r in read_backfill(config, backfill_topic(config.processor.pipeline, topic))
        if r.key is not None and r.value is not None
    }
    assert len(ours) == 300
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET v = v").format(sql.Identifier("public", name)))
    wait_debezium(config, source_lsn(config))
    theirs = debezium_events(config, topic)
    assert theirs.keys() == ours.keys()
    for key, (partition, key_bytes, value) in ours.items():
        their_partition, their_key, their_value = theirs[key]
        assert (partition, key_bytes) == (their_partition, their_key)
        assert schema_part(value) == schema_part(their_value) != b""
        assert (
            orjson.loads(value)["payload"]["after"] == orjson.loads(their_value)["payload"]["after"]
        )


def test_the_topics_of_a_whole_request_are_made_at_once(stack: DevStack) -> None:
    """A request for tables with no topic yet (never streamed) makes every one of their
    change and backfill topics when it arrives: the data plane subscribes to them all in
    one rebalance, not one a table while each waits for the one before."""
    # Each table takes 3 s, so one topic a table would reach the data plane in turns.
    config = tiny_chunks(stack, "bulk", "read-only", rows_per_second=10)
    uncaptured_table(config, "iso_bulk_other", 0)  # another table's event: one row
    names = [f"iso_bulk_t{i}" for i in range(4)]
    for name in names:
        uncaptured_table(config, name, 30, streamed_row=False)
    processor = Processor(stack, config, "bulk-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        wait_for("the first subscription", lambda: "input topics: " in processor.log.read_text())
        before = processor.log.read_text().count("input topics: ")
        tables = [f"public.{n}" for n in names]
        cli(processor, "snapshot", "start", *tables, "--id", "bulk-1")
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "bulk-1"), timeout=180)
        assert not notified(config, "ABORTED", "bulk-1"), processor.log.read_text()[-2000:]
        changes = processor.log.read_text().split("input topics: ")[before + 1 :]
        assert changes, "no subscription change"
        first = changes[0].splitlines()[0]
        assert all(f"public.{n}," in first or first.endswith(f"public.{n}") for n in names), first
        wait_caught_up(config)
        for name in names:
            assert final_rows(reconciled(config, name)) == source_rows(config, name)
    finally:
        processor.stop()


class ToastWriter(Writer):
    """Updates that leave the TOASTed ``doc`` untouched (Debezium sends its placeholder
    under REPLICA IDENTITY DEFAULT), now and then a new ``doc``, a delete or a new row."""

    def _statement(self, conn: psycopg.Connection[Any]) -> None:
        draw = self.rng.random()
        key = self.rng.randint(1, self.keys)
        self.touched.add(key)
        if draw < 0.04:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, 0, repeat(md5(%s), 200))").format(self.table),
                (self._next_id, str(self._next_id)),
            )
            self.touched.add(self._next_id)
            self._next_id += 1
        elif draw < 0.08:
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(self.table), (key,))
        elif draw < 0.14:
            conn.execute(
                sql.SQL("UPDATE {} SET doc = repeat(md5(%s), 200) WHERE id = %s").format(
                    self.table
                ),
                (f"w{self.transactions}", key),
            )
        else:
            conn.execute(
                sql.SQL("UPDATE {} SET n = n + 1 WHERE id = %s").format(self.table), (key,)
            )


@pytest.mark.parametrize(
    ("name", "watermarks"), [("snaptoast", "read-only"), ("snaptoastwin", "signal-table")]
)
def test_unchanged_toast_values_of_keys_with_no_state_are_read_again(
    stack: DevStack, spark: Any, name: str, watermarks: str
) -> None:
    """A table with REPLICA IDENTITY DEFAULT and TOASTed values whose rows Debezium never
    streamed (as after ``snapshot.mode=no_data``): updates that leave ``doc`` untouched reach
    keys with no state. None is dead-lettered: each key's row is read again from the source,
    before and during a backfill of the table, with two SIGKILLs of the processor; the
    reconciled topic and the Iceberg table end equal to the source."""
    config = tiny_chunks(stack, name, watermarks, 20)  # the kills come while it reads
    table = f"iso_{name}_doc"
    toasted_table(config, table, 80)
    writer = ToastWriter(config, table, keys=80, seed=17)
    processor = Processor(stack, config, f"{name}-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        writer.start()
        # Before any backfill: each partial update's key is read again on its own.
        wait_for("keys read again", lambda: read_again_requests(config) >= 3, timeout=120)
        cli(processor, "snapshot", "start", f"public.{table}", "--id", "load-1")
        for _ in range(2):
            wait_for("chunks", lambda: progress(config, f"public.{table}", "load-1").chunks > 0)
            time.sleep(random.uniform(0.5, 2.0))
            processor.kill()
            processor.start()
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "load-1"), timeout=240)
        writer.stop()
        wait_caught_up(config)

        def settled() -> bool:
            # the last keys asked for are read after the writer stopped
            return final_rows(reconciled(config, table)) == doc_rows(config, table)

        wait_for("the reconciled topic equal to the source", settled, timeout=120)
        events = reconciled(config, table)
        assert not [e for e in events if e.value is not None and TOAST_PLACEHOLDER in str(e.value)]
        assert read_topic(config, f"{name}.dlq") == []
        asked = read_again_requests(config)
        print(f"{writer.transactions} transactions; {asked} read-again requests")
    finally:
        writer.stop()
        processor.stop()
    assert_lake_equal(config, spark, f"toast{watermarks[:4]}", table)


def test_keys_whose_read_again_was_refused_are_asked_again_and_repaired(stack: DevStack) -> None:
    """Debezium runs with ``decimal.handling.mode=string``, the processor at the default: the
    read-again requests for keys whose unchanged TOAST values no state can fill are
    refused, and the keys stay pending. The processor keeps asking (here every 2 s, then
    twice as long each time); once restarted with the connector's setting, its requests
    succeed and the keys' rows come out equal to the source's."""
    name = "iso_snapask_t"
    connector = {"decimal.handling.mode": "string"}
    debezium = Debezium(stack, "snapask", [f"public.{name}"], connector, "json").start()
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS stage")
        conn.execute(
            f"CREATE TABLE stage.{name} (id int PRIMARY KEY, amount numeric(10, 2), doc text)"
        )
        conn.execute(f"ALTER TABLE stage.{name} ALTER doc SET STORAGE EXTERNAL")
        conn.execute(
            f"INSERT INTO stage.{name} SELECT g, g * 1.25, repeat(md5(g::text), 200) "
            "FROM generate_series(1, 20) g"
        )
        conn.execute(f"ALTER TABLE stage.{name} SET SCHEMA public")  # rows never streamed
        conn.execute(f"UPDATE {name} SET amount = amount + 1 WHERE id <= 5")
    config = own_pipeline(stack, debezium, name)
    retry = dataclasses.replace(config.processor, read_again_retry_s=2)
    wrong = dataclasses.replace(
        config, processor=retry, source=dataclasses.replace(config.source, debezium={})
    )
    processor = Processor(stack, wrong, "snapask-processor").start()
    try:

        def refused() -> float:
            return metric(
                processor.metrics(),
                "tidemark_snapshot_refused_total",
                table=f"public.{name}",
                reason="decimal.handling.mode",
            )

        wait_for("a refused request asked again", lambda: refused() >= 2, timeout=120)
        assert len(final_rows(reconciled(config, name))) == 0  # nothing but pending keys
        processor.stop()
        right = dataclasses.replace(wrong, source=config.source)
        processor = Processor(stack, right, "snapask-processor-fixed").start()
        with psycopg.connect(**stack.config.owner_conninfo()) as conn:
            source = {
                (r[0],): {"id": r[0], "amount": str(r[1]), "doc": r[2]}
                for r in conn.execute(f"SELECT id, amount, doc FROM {name} WHERE id <= 5")
            }
        wait_for(
            "the keys' rows", lambda: final_rows(reconciled(config, name)) == source, timeout=120
        )
        assert read_topic(config, "snapask.dlq") == []
    finally:
        processor.stop()
        debezium.stop()


def toasted_table(config: Config, name: str, rows: int) -> None:
    """``public.<name>`` (id, n, doc): rows 1 to ``rows`` with TOASTed ``doc`` values, never
    streamed by Debezium, under REPLICA IDENTITY DEFAULT: an update that leaves ``doc``
    untouched carries a placeholder that no state can fill."""
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS stage")
        staged = sql.Identifier("stage", name)
        conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n int, doc text)").format(staged)
        )
        conn.execute(sql.SQL("ALTER TABLE {} ALTER doc SET STORAGE EXTERNAL").format(staged))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 0, repeat(md5(g::text), 200) "
                "FROM generate_series(1, %s) g"
            ).format(staged),
            (rows,),
        )
        conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA public").format(staged))


def read_again_requests(config: Config) -> int:
    """Signals the data plane sent to read keys again."""
    records = read_topic(config, f"{config.processor.pipeline}.signals")
    return sum(1 for r in records if r.value is not None and b"read-again-" in r.value)


def doc_rows(config: Config, name: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    with psycopg.connect(**config.owner_conninfo()) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, n, doc FROM {}").format(sql.Identifier("public", name))
        ).fetchall()
    return {(r[0],): {"id": r[0], "n": r[1], "doc": r[2]} for r in rows}


@contextlib.contextmanager
def backfill_paused(config: Config, table: str, request: str) -> Iterator[TableProgress]:
    """The snapshot paused for the block, and ``table``'s progress in ``request`` then:
    still running, nothing read meanwhile. Paused means quiet: the coordinator records the
    part being read before it sends PAUSED, and with one reader a progress record that says
    paused follows that part. Resumed after the block."""
    assert config.snapshot.readers == 1
    pause = send_signal(config, "pause-snapshot", {"type": "incremental"})

    def quiet() -> bool:
        state = read_state(config)
        return bool(notified(config, "PAUSED", pause)) and state is not None and state.paused

    wait_for("the pause", quiet)
    entry = progress(config, table, request)
    assert entry.status == "running", f"the backfill is not running when paused: {entry}"
    yield entry
    assert progress(config, table, request).chunks == entry.chunks, "read while paused"
    send_signal(config, "resume-snapshot", {"type": "incremental"})


def test_columns_added_and_dropped_during_a_backfill_shape_the_rows_read_after(
    stack: DevStack, spark: Any
) -> None:
    """``ALTER TABLE ... ADD COLUMN``, ``DROP COLUMN`` and ``ALTER ... TYPE bigint`` while a
    table is backfilled under a concurrent workload (the first while chunks are read, the
    others while the backfill is paused with rows left to read, so that its end cannot come
    first): the first part read after each finds the columns changed and is read again with
    the new columns, rows read after each change carry the new columns (and
    types) as Debezium's events do, the backfill completes, and the reconciled topic and the
    Iceberg table end equal to the source."""
    config = snapshot_config(
        stack,
        "snapddl",
        chunk_size=20,
        min_chunk_size=20,
        max_chunk_size=20,
        # Each change below is made while the backfill is paused (backfill_paused): how long
        # a change takes no longer counts. Read before each pause: the chunks waited for,
        # and those read while the pause goes out, 1 or 2 at this rate here (3 to 7 per
        # wait at 60 and 120 rows/s), against some 25 chunks left after the last pause.
        max_rows_per_second=30,
    )
    table = "iso_snapddl_t"
    uncaptured_table(config, table, 1000)
    ident = sql.Identifier("public", table)
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN note text DEFAULT NULL").format(ident))
        conn.execute(sql.SQL("UPDATE {} SET note = 'n' || id WHERE id > 0").format(ident))
    processor = Processor(stack, config, "snapddl-processor").start()
    writer = Writer(config, table, keys=1000, seed=23)
    try:
        wait_for("the coordinator", lambda: leading(processor))
        writer.start()
        cli(processor, "snapshot", "start", f"public.{table}", "--id", "load-1")
        chunks = lambda: progress(config, f"public.{table}", "load-1").chunks  # noqa: E731
        paused = lambda: backfill_paused(config, f"public.{table}", "load-1")  # noqa: E731
        wait_for("chunks", lambda: chunks() >= 3)
        # The first change comes while the backfill reads (far from its end, so no pause is
        # needed): an ALTER that waits for a chunk's lock, or a chunk that waits for it.
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN extra integer").format(ident))
            conn.execute(sql.SQL("UPDATE {} SET extra = id * 10 WHERE id % 3 = 0").format(ident))
        added_at = chunks()
        wait_for("chunks after the new column", lambda: chunks() >= added_at + 3)
        with paused() as at, psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN note").format(ident))
        dropped_at = at.chunks
        wait_for("chunks after the dropped column", lambda: chunks() >= dropped_at + 2)
        # A type whose Connect schema differs (int32 to int64), while no change brings an
        # event of it: the table's latest event still declares int32.
        with paused() as at, psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            writer.stop()
            conn.execute(sql.SQL("ALTER TABLE {} ALTER v TYPE bigint").format(ident))
        retyped_at = at.chunks
        wait_for("chunks after the new type", lambda: chunks() >= retyped_at + 2)
        # Rows two chunks past the last key read are read after this update, with values
        # that only int64 holds (paused, no part is being read: every key past last_key is
        # unread; the two chunks are to spare).
        with paused() as read, psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            unread = (read.last_key or [0])[0] + 40
            assert unread < 900, f"the backfill read too far ({read}) to test the new type"
            conn.execute(
                sql.SQL("UPDATE {} SET v = v + 5000000000 WHERE id > %s").format(ident), [unread]
            )
        print(
            f"paused at chunks {added_at}, {dropped_at}, {retyped_at}, {read.chunks}; "
            f"keys read to {read.last_key} of {read.maximum_key} before the last change"
        )
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "load-1"), timeout=180)
        wait_caught_up(config)
        entry = progress(config, f"public.{table}", "load-1")
        assert entry.status == "completed", entry
        # Parts of 20 rows when planned (rows the writer adds meanwhile may grow one) across
        # every change: a part planned while the type change held its lock once saw the
        # table empty and spanned the rest of it ("823 rows in 10 chunks").
        assert entry.chunks >= entry.rows / 30, entry
        events = reconciled(config, table)
        order = [("id", "name", "note", "v"), ("extra", "id", "name", "note", "v")]
        order.append(("extra", "id", "name", "v"))
        steps: dict[int, list[int]] = {}  # per partition, the shape of each row read
        for e in events:
            if e.value and e.value["tidemark"]["reason"] == "snapshot":
                steps.setdefault(e.partition, []).append(order.index(tuple(sorted(e.after))))
        # rows follow the table's columns: per partition the shapes come in that order
        assert all(seq == sorted(seq) for seq in steps.values()), steps
        assert {i for seq in steps.values() for i in seq} == {0, 1, 2}, steps
        change_topic = f"{config.source.topic_prefix}.public.{table}"
        big = []  # backfill rows read after v became bigint: declared as Debezium does now
        backfilled = backfill_topic(config.processor.pipeline, change_topic)
        for record in read_backfill(config, backfilled):
            doc = orjson.loads(record.value or b"null")
            if doc and doc["payload"]["after"]["v"] >= 5_000_000_000:
                after = next(f for f in doc["schema"]["fields"] if f["field"] == "after")
                big.append(next(f["type"] for f in after["fields"] if f["field"] == "v"))
        assert big and set(big) == {"int64"}, big
        with psycopg.connect(**config.owner_conninfo()) as conn:
            rows = conn.execute(
                sql.SQL("SELECT id, name, v, extra FROM {}").format(ident)
            ).fetchall()
        expected = {(r[0],): {"id": r[0], "name": r[1], "v": r[2], "extra": r[3]} for r in rows}
        final = {key: {c: row.get(c) for c in order[2]} for key, row in final_rows(events).items()}
        assert final == expected
    finally:
        writer.stop()
        processor.stop()
    assert_lake_equal(config, spark, "ddl", table)


def _moved_event(template: bytes, v: int, txid: int, lsn: int) -> bytes:
    """Debezium's event ``template`` (JSON with its schema) as an update to ``v`` by
    transaction ``txid`` (32 bits, as Debezium reports it) written at WAL position ``lsn``."""
    event = orjson.loads(template)
    payload = event["payload"]
    payload["op"], payload["before"] = "u", None
    payload["after"] = dict(payload["after"], v=v)
    payload["source"].update(txId=txid, lsn=lsn, sequence=orjson.dumps([str(lsn)] * 2).decode())
    return orjson.dumps(event)


def test_changes_2_31_transactions_from_a_backfill_are_placed_by_their_position(
    stack: DevStack,
) -> None:
    """A key backfilled, then untouched while the source runs through 2^31 transaction ids
    or more, is decided by WAL positions, not by its 32-bit txId extended around the
    chunk's snapshot. Debezium's own events of a real backfill's keys are sent again as
    updates whose txIds lie 2^31 + 10 ids after the chunk's xmax (key 1: the extension
    alone took it for an old change, in the chunk, and dropped it) and 2^31 + 1000 ids
    before the source's current id (key 2: a second backfill's extension alone took it
    for a change in its future, and dropped the key's row), at the source's current WAL
    position (the ids are the test's; their positions are where Debezium would put them)."""
    name = "iso_snapwrap_t"
    config = snapshot_config(stack, "snapwrap")
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id integer PRIMARY KEY, name text, v integer)")
        conn.execute(f"INSERT INTO {name} SELECT g, 'row ' || g, 0 FROM generate_series(1, 3) g")
    processor = Processor(stack, config, "snapwrap-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        cli(processor, "snapshot", "start", f"public.{name}", "--id", "wrap-1")
        wait_for("the first backfill", lambda: notified(config, "COMPLETED", "wrap-1"))
        wait_caught_up(config)
        rows = read_backfill(config, f"snapwrap.backfill.tidemark.public.{name}")
        chunk = PgSnapshot.parse(rows[0].headers["tidemark.snapshot"].decode())
        assert chunk.positioned, chunk
        templates = {
            orjson.loads(r.key)["payload"]["id"]: r
            for r in read_topic(config, f"tidemark.public.{name}")
            if r.key is not None and r.value is not None
        }
        with psycopg.connect(**config.source.conninfo(), autocommit=True) as conn:
            lsn = committed_position(conn)
            found = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())").fetchone()
            now = int(found[0])  # type: ignore[index]
        moved = {
            1: (111, (chunk.xmax + 2**31 + 10) % 2**32, lsn),
            2: (222, (now - 2**31 - 1000) % 2**32, lsn + 1),
        }
        producer = Producer(client_config(config.kafka))
        for key, (v, txid, at) in moved.items():
            record = templates[key]
            value = _moved_event(record.value or b"", v, txid, at)
            topic = f"tidemark.public.{name}"
            producer.produce(topic, value, record.key, partition=record.partition)
        assert producer.flush(30) == 0

        def latest(key: int) -> dict[str, Any] | None:
            events = [e for e in reconciled(config, name) if e.key["id"] == key]
            return events[-1].value if events else None

        for key, (v, _txid, _at) in moved.items():
            wait_for(f"key {key}'s change", lambda k=key, v=v: (latest(k) or {}).get("after", {})
                     .get("v") == v)  # fmt: skip
        cli(processor, "snapshot", "start", f"public.{name}", "--id", "wrap-2")
        wait_for("the second backfill", lambda: notified(config, "COMPLETED", "wrap-2"))
        wait_caught_up(config)
        for key in moved:
            last = latest(key)
            assert last is not None and last["tidemark"]["reason"] == "snapshot", (key, last)
            assert last["after"]["v"] == 0  # the source's row, read again
    finally:
        processor.stop()
