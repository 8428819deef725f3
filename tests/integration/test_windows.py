"""Window buffers in a real processor: rows that wait in RocksDB, and two crashes around them.

DDD-3 lists the crash cases of its watermark windows; the window-open case is in
``test_snapshots.py``. Here the data plane lags behind a signal-table window:
its chunk rows arrive before the change partition has passed the window, so they
wait in the window buffer. The processor is then SIGKILLed while rows wait (the
window closed, the buffer not empty), and again while the buffer is being
emitted (the batch that releases the rows is flushed, its state not committed).
After a clean restart each key ends as DDD-3's rule says: a row whose key
changed inside the window or after it is never emitted, the others are.

The records are written directly to the topics (Debezium-shaped change events
and backfill records with their window headers), so the test controls exactly
where the partition stands when the rows arrive; the broker, the processor
processes and their RocksDB state are real.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from processor.events.chunk_tag import ChunkTag
from processor.events.visibility import Window
from processor.snapshot.postgres.watermarks import PostgresWatermarkWriter
from tests.integration.processes import Processor, metric, pipeline_config, reconciled, wait_for
from tidemark.cli.verify import processor_lag
from tidemark.core.kafka import Acknowledgements, client_config, ensure_topics
from tidemark.core.topics import backfill_topic
from tidemark.devstack.stack import DevStack

TABLE = "iso_winbuf_t"


def event(op: str, key: int, name: str | None, position: int | None) -> bytes:
    source: dict[str, Any] = {
        "version": "3.6.3.Final",
        "connector": "postgresql",
        "name": "tidemark",
        "ts_ms": 1,
        "snapshot": "false" if position is not None else "incremental",
        "db": "postgres",
        "sequence": None if position is None else f'["{position}","{position}"]',
        "schema": "public",
        "table": TABLE,
        "txId": None if position is None else 700 + key,
        "lsn": position,
    }
    after = None if name is None else {"id": key, "name": name}
    return orjson.dumps({"before": None, "after": after, "source": source, "op": op, "ts_ms": 2})


def test_buffered_window_rows_survive_crashes_and_follow_ddd3s_rule(stack: DevStack) -> None:
    config = pipeline_config(stack, "winbuf")
    topic = f"{config.source.topic_prefix}.public.{TABLE}"
    backfill = backfill_topic("winbuf", topic)
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 1}, 1)
    producer = Producer(client_config(config.kafka, **{"enable.idempotence": True}))
    acks = Acknowledgements(producer)

    def send(target: str, key: int, value: bytes, headers: Any = None) -> None:
        producer.produce(
            target, value, orjson.dumps({"id": key}), 0, acks.on_delivery, headers=headers
        )
        acks.wait("test records")

    def changes(*rows: tuple[int, str, int]) -> None:
        for key, name, position in rows:
            send(topic, key, event("u", key, name, position))

    changes(*((k, f"change {k}", 100 + k) for k in range(1, 7)))  # offsets 0 to 5
    processor = Processor(stack, config, "winbuf-processor").start()
    try:
        wait_for("the backfill topic", lambda: processor_lag(config).get(backfill) == 0)
        # A window (200, 300) whose close the change partition passes at offset 9: the data
        # plane has read 6 changes, so the chunk's rows (keys 1 to 8) must wait.
        tag = ChunkTag(41, Window((200, 200), (300, 300), (9,)), "winbuf-1")
        for key in range(1, 9):
            send(backfill, key, event("r", key, f"chunk {key}", None), tag.headers())

        def buffered() -> float:
            return metric(processor.metrics(), "tidemark_window_buffered_rows", topic=topic)

        wait_for("8 buffered rows", lambda: buffered() == 8)
        assert not [e for e in reconciled(config, TABLE) if e.value and "chunk" in e.after["name"]]
        processor.kill()  # the window closed, the buffer not empty

        # Key 2 changes inside the window, key 3 after it, key 9 is new: offsets 6 to 8.
        changes((2, "in window", 250), (9, "new", 260), (3, "after window", 350))
        processor.start(failpoint="window-release:1")
        processor.crashed()  # the releasing batch's outputs are out, its state is not
        processor.start()
        wait_for("the buffer to empty", lambda: buffered() == 0)
        wait_for("the pipeline", lambda: not any(processor_lag(config).values()))
    finally:
        processor.stop()
    events = reconciled(config, TABLE)
    last = {e.key["id"]: e.after["name"] for e in events if e.after is not None}
    expected = {k: f"chunk {k}" for k in (1, 4, 5, 6, 7, 8)}
    expected.update({2: "in window", 3: "after window", 9: "new"})
    assert last == expected
    emitted = {(e.key["id"], e.after["name"]) for e in events if e.after is not None}
    assert (2, "chunk 2") not in emitted and (3, "chunk 3") not in emitted
    snapshots = [e for e in events if e.value and e.value["tidemark"]["reason"] == "snapshot"]
    # At least once: the crash mid-release may show the released rows twice, never less.
    assert {e.key["id"] for e in snapshots} == {1, 4, 5, 6, 7, 8}


def test_a_window_close_is_waited_for_past_its_commit_record(stack: DevStack) -> None:
    """The position the reader waits for Debezium to confirm after a window-close row must
    lie past that row's commit record. Under ``synchronous_commit = off`` (the development
    cluster's setting, and a common one) a commit returns before its record is written, so
    the WAL *write* position lags it: waiting for that let the reader note the change
    topics' ends before Debezium had the changes below the window."""
    config = pipeline_config(stack, "closepos")
    writer = PostgresWatermarkWriter(config)
    try:
        with psycopg.connect(**config.source.conninfo(), autocommit=True) as probe:
            for n in range(20):
                writer.insert(f"closepos-{n}", "snapshot-window-close", "{}")
                # Inserted WAL reaches past the row's commit record by now.
                inserted = probe.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
                past_commit = int(inserted.fetchone()[0])  # type: ignore[index]
                waited_for = writer.commit_position()
                assert waited_for >= past_commit, (n, waited_for, past_commit)
                writer.delete((f"closepos-{n}",))
    finally:
        writer.close()
