"""Envelopes against real Debezium output: TOAST, refused sources, dead letters.

One processor of its own (pipeline ``env``) reads three tables:

- ``iso_env_docs`` (``debezium-upsert``): a large, incompressible text column is
  stored out of line (TOAST); an update of another column makes Debezium send
  the unchanged-TOAST placeholder, which the processor fills from state;
- ``iso_env_full`` (``debezium``, ``REPLICA IDENTITY FULL``): the placeholder is
  filled from the event's own ``before``;
- ``iso_env_bare`` (``debezium`` without ``REPLICA IDENTITY FULL``): its first
  update has no ``before``, so the source is refused with a clear message while
  the others go on.

Malformed messages written into a change topic go to the dead-letter topic with
headers naming where they came from and why.
"""

from __future__ import annotations

import random
import string
import time
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from psycopg import sql

from processor.events.change import TOAST_PLACEHOLDER
from processor.events.source_codec import SourceCodec
from processor.reconcile.envelopes import debezium_upsert
from state.batch import BatchState
from state.memory import MemoryPartitionStore
from tests.integration.processes import (
    Debezium,
    Processor,
    metric,
    pipeline_config,
    read_topic,
    reconciled,
    wait_for,
    without_table,
)
from tidemark.cli.verify import source_lsn, wait_caught_up, wait_debezium
from tidemark.core.kafka import client_config
from tidemark.core.messages import RawMessage
from tidemark.devstack.stack import DevStack

PREFIX = "tidemark.public."


def big_text(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters) for _ in range(20_000))


def test_toast_refusal_and_dead_letters(stack: DevStack) -> None:
    config = pipeline_config(
        stack,
        "env",
        envelopes={"public.iso_env_full": "debezium", "public.iso_env_bare": "debezium"},
    )
    bodies = {1: big_text(1), 2: big_text(2)}
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        for table in ("iso_env_docs", "iso_env_full"):
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, title text, body text)")
        conn.execute("ALTER TABLE iso_env_full REPLICA IDENTITY FULL")
        conn.execute("CREATE TABLE iso_env_bare (id int PRIMARY KEY, v int)")
        for table in ("iso_env_docs", "iso_env_full"):
            for key, body in bodies.items():
                conn.execute(f"INSERT INTO {table} VALUES (%s, 'first', %s)", (key, body))  # noqa: S608
            conn.execute(f"UPDATE {table} SET title = 'second'")  # noqa: S608 - body unchanged
        conn.execute("INSERT INTO iso_env_bare VALUES (1, 1)")
        conn.execute("UPDATE iso_env_bare SET v = 2")
    processor = Processor(stack, config, "env-processor").start()
    try:
        wait_caught_up(without_table(config, "iso_env_bare"))
        raw = read_topic(config, PREFIX + "iso_env_docs")
        assert any(TOAST_PLACEHOLDER.encode() in (r.value or b"") for r in raw), (
            "Debezium did not send the placeholder: the test would prove nothing"
        )
        for table in ("iso_env_docs", "iso_env_full"):
            events = [e for e in reconciled(config, table) if e.value is not None]
            assert [e.value["op"] for e in events if e.key == {"id": 1}] == ["c", "u"]
            for event in events:
                assert TOAST_PLACEHOLDER not in str(event.value)
                assert event.after is not None
                assert event.after["body"] == bodies[event.key["id"]]
            assert {e.after["title"] for e in events if e.value["op"] == "u"} == {"second"}

        # the bare table's topic is not waited for above: its refusal may come after the rest
        wait_for(
            "the refusal of iso_env_bare",
            lambda: (
                metric(
                    processor.metrics(), "tidemark_source_refused", topic=PREFIX + "iso_env_bare"
                )
                == 1
            ),
            timeout=60,
        )
        bare = reconciled(config, "iso_env_bare")
        assert [e.value["op"] for e in bare if e.value is not None] == [
            "c"
        ]  # stopped at the update
        assert "iso_env_bare stopped at partition" in processor.log.read_text()
        assert "REPLICA IDENTITY FULL" in processor.log.read_text()

        # Malformed messages in a live change topic: dead letters, and the stream goes on.
        producer = Producer(client_config(config.kafka))
        bad = [(b'{"id":7}', b"{not json"), (b'{"id":7}', b'{"op":"x"}'), (None, b"{}")]
        for key, value in bad:
            producer.produce(PREFIX + "iso_env_docs", value=value, key=key, partition=0)
        producer.flush(10)
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute("UPDATE iso_env_docs SET title = 'third' WHERE id = 1")
        wait_caught_up(without_table(config, "iso_env_bare"))
        dead = read_topic(config, "env.dlq")
        assert sorted((r.key or b"", r.value or b"") for r in dead) == sorted(
            (k or b"", v) for k, v in bad
        )
        for record in dead:
            assert record.headers["tidemark.source.topic"] == (PREFIX + "iso_env_docs").encode()
            assert record.headers["tidemark.source.partition"] == b"0"
            assert int(record.headers["tidemark.source.offset"]) >= 0
            assert record.headers["tidemark.error"]
        reasons = sorted(r.headers["tidemark.error.kind"] for r in dead)
        assert reasons == [b"malformed", b"no-key", b"unknown-op"]
        text = processor.metrics()
        topic = PREFIX + "iso_env_docs"
        assert metric(text, "tidemark_dead_letters_total", topic=topic, reason="malformed") == 1
        assert metric(text, "tidemark_dead_letters_total", topic=topic, reason="unknown-op") == 1
        assert metric(text, "tidemark_dead_letters_total", topic=topic, reason="no-key") == 1
        latest = [e for e in reconciled(config, "iso_env_docs") if e.key == {"id": 1}][-1]
        assert latest.after is not None and latest.after["title"] == "third"
        assert latest.after["body"] == bodies[1]

        # Debezium's own incremental snapshot: its READ events (lsn null, the close
        # watermark in `sequence`) are not mistaken for replays by the classic envelope.
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO debezium_signal VALUES ('env-1', 'execute-snapshot', %s)",
                ('{"data-collections": ["public.iso_env_full"], "type": "incremental"}',),
            )
        deadline = time.monotonic() + 90
        while True:
            full = [e for e in reconciled(config, "iso_env_full") if e.value is not None]
            reads = [e for e in full if e.value["op"] == "r"]
            if len(reads) == len(bodies) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert sorted(e.key["id"] for e in reads) == sorted(bodies)
        for event in reads:
            assert event.value["source"]["snapshot"] == "incremental"
            assert event.value["source"]["lsn"] is None
            assert event.value["tidemark"]["reason"] == "snapshot"
            assert event.after is not None and event.after["body"] == bodies[event.key["id"]]
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute("UPDATE iso_env_full SET title = 'after the snapshot' WHERE id = 2")
        wait_caught_up(without_table(config, "iso_env_bare"))
        last = [e for e in reconciled(config, "iso_env_full") if e.key == {"id": 2}][-1]
        assert last.after is not None and last.after["title"] == "after the snapshot"
    finally:
        processor.stop()


@pytest.mark.parametrize("mode", ["bytes", "hex", "base64-url-safe"])
def test_an_unchanged_toasted_bytea_in_each_binary_mode(stack: DevStack, mode: str) -> None:
    """What Debezium writes for an unchanged TOASTed ``bytea`` depends on
    ``binary.handling.mode``: the placeholder's bytes in base64 (``bytes``), the text
    placeholder (``hex``), which the processor sees and fills from the key's row; and NULL
    under ``base64-url-safe``, where the value is lost before Tidemark sees it (the README
    says so)."""
    table = f"iso_env_bin_{mode.replace('-', '_')}"
    ident = sql.Identifier(table)
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n int, b bytea)").format(ident))
        conn.execute(sql.SQL("ALTER TABLE {} ALTER b SET STORAGE EXTERNAL").format(ident))
    name = f"envbin{mode.replace('-', '')}"
    debezium = Debezium(stack, name, [f"public.{table}"], {"binary.handling.mode": mode}, "json")
    debezium.start()
    config = debezium.config
    try:
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            big = sql.SQL("decode(repeat(md5('x'), 200), 'hex')")  # 3,200 bytes, out of line
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0, {})").format(ident, big))
            conn.execute(sql.SQL("UPDATE {} SET n = 1 WHERE id = 1").format(ident))
        wait_debezium(config, source_lsn(config))
        topic = f"{name}.public.{table}"

        def both() -> list[Any] | None:
            found = [r for r in read_topic(config, topic) if r.value]
            return found if len(found) == 2 else None

        records = wait_for("both events", both)
    finally:
        debezium.stop()
    codec = SourceCodec("debezium-upsert", "", None)
    state = BatchState(MemoryPartitionStore())
    changes = [
        codec.decode(RawMessage(topic, r.partition, r.offset, r.key, r.value)) for r in records
    ]
    inserted, updated = sorted(changes, key=lambda c: c.version)
    assert inserted.after is not None and updated.after is not None
    if mode == "base64-url-safe":
        assert updated.after["b"] is None and not updated.toast
        return
    assert not inserted.toast and updated.toast, updated.after
    debezium_upsert(inserted, state, codec)
    emit = debezium_upsert(updated, state, codec)
    assert emit is not None and emit.after is not None
    assert emit.after["b"] == inserted.after["b"] and emit.after["n"] == 1
