"""Avro end to end: real Debezium bytes from Confluent's AvroConverter, through the processor.

A stack of its own runs Debezium with the Avro converter, whose Java registry
client registers the change topics' schemas in the stack's registry over HTTP.
The processor resolves them by id, reconciles, and writes Avro with its output
schema registered under the output topic's subjects. The test decodes the
reconciled topics with those schemas and compares every column, logical types
included, with PostgreSQL's own values. A backfill of an Avro source writes
chunk rows with Debezium's own key bytes, schema ids and values.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from processor.snapshot.client import read_state, send_signal
from spark_sink.job import Sink
from spark_sink.session import create_session
from tests.integration.processes import (
    Processor,
    decoder,
    metric,
    pipeline_config,
    read_backfill,
    read_topic,
    reconciled,
)
from tests.integration.test_chunk_events import SETTINGS, compare_under_settings
from tests.integration.test_flattened import backfill_flattened
from tests.integration.test_snapshots import truncate_applied
from tidemark.cli.verify import compare_table, wait_caught_up
from tidemark.core.config import Config, DevConfig, ProcessorConfig
from tidemark.core.kafka import client_config
from tidemark.core.ports import free_port
from tidemark.core.schema_registry import HttpRegistry, SchemaCache
from tidemark.devstack.stack import DevStack

EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - timestamp without time zone
TABLE = """CREATE TABLE kinds (
    id integer PRIMARY KEY, small smallint, big bigint, amount numeric(12, 3),
    ratio double precision, flag boolean, name text, at timestamptz, local_at timestamp,
    day date, u uuid, doc jsonb, blob bytea)"""


@pytest.fixture(scope="module")
def avro_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    run_dir = tmp_path_factory.mktemp("avro-stack")
    base = Config(
        processor=ProcessorConfig(web_port=free_port(), state_dir=str(run_dir / "state")),
        dev=DevConfig(debezium_format="avro"),
    )
    stack = DevStack(run_dir, base)
    stack.up()
    try:
        yield stack
    finally:
        stack.down()


def kinds_row(i: int, null_names: bool = False) -> tuple[Any, ...]:
    """Row ``i`` (0 to 27) of a ``kinds`` table: every column type of ``TABLE``."""
    return (
        i,
        i - 3,
        2**40 + i,
        decimal.Decimal(f"{i}.125"),
        i / 7,
        i % 2 == 0,
        None if null_names and i % 4 == 0 else f"name-{i}",
        dt.datetime(2026, 1, i + 1, 10, 30, 15, 123456, tzinfo=dt.UTC),
        dt.datetime(2025, 12, i + 1, 8, 0, 0, 654321),  # noqa: DTZ001
        dt.date(2024, 2, i + 1),
        uuid.UUID(int=i),
        psycopg.types.json.Jsonb({"i": i, "tags": ["a", "b"]}),
        bytes([i, 0, 255]),
    )


def from_debezium(column: str, value: Any) -> Any:
    """The Python value of a column as Debezium's Avro converter encodes it."""
    if value is None:
        return None
    if column == "at":
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if column == "local_at":
        return EPOCH + dt.timedelta(microseconds=value)
    if column == "day":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if column == "u":
        return uuid.UUID(value)
    if column == "doc":
        return json.loads(value)
    return value


def test_avro_changes_reconcile_with_registered_output_schemas(avro_stack: DevStack) -> None:
    # a schema id the registry answers 404 for is asked again for 3 s, then dead-lettered
    kafka = dataclasses.replace(avro_stack.config.kafka, schema_registry_unknown_after_s=3.0)
    config = dataclasses.replace(avro_stack.config, kafka=kafka)
    assert config.kafka.schema_registry_url.startswith("http://127.0.0.1:")
    rows = [kinds_row(i) for i in range(1, 9)]
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(TABLE)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO kinds VALUES (" + ", ".join(["%s"] * 13) + ")", rows)
        conn.execute("UPDATE kinds SET amount = amount * 2, name = NULL WHERE id % 3 = 0")
        conn.execute("DELETE FROM kinds WHERE id = 8")
    processor = Processor(avro_stack, config, "avro-processor").start()
    try:
        wait_caught_up(config)
        events = reconciled(config, "kinds")
        with psycopg.connect(**config.owner_conninfo()) as conn:
            cur = conn.execute("SELECT * FROM kinds ORDER BY id")
            names = [c.name for c in cur.description or []]
            source = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
        final: dict[int, dict[str, Any] | None] = {}
        for event in events:
            final[event.key["id"]] = event.after
        assert final.pop(8) is None  # deleted: delete event, then a tombstone
        decoded = {
            key: {c: from_debezium(c, v) for c, v in after.items()}
            for key, after in final.items()
            if after is not None
        }
        assert decoded == source
        updates = [e for e in events if e.value is not None and e.value["op"] == "u"]
        assert {e.key["id"] for e in updates} == {3, 6}
        for event in updates:
            assert event.value is not None and event.value["before"] is not None
            assert event.value["before"]["name"] == f"name-{event.key['id']}"  # from state
            assert event.value["tidemark"]["envelope"] == "debezium-upsert"

        url = config.kafka.schema_registry_url
        with urllib.request.urlopen(url + "/subjects", timeout=5) as resp:
            subjects = json.loads(resp.read())
        assert "tidemark.reconciled.public.kinds-value" in subjects
        assert "tidemark.reconciled.public.kinds-key" in subjects

        # An Avro message whose schema id the registry does not know: an outage for
        # schema_registry_unknown_after_s (a follower may lag), then a dead letter.
        producer = Producer(client_config(config.kafka))
        key = read_topic(config, "tidemark.public.kinds")[0].key
        producer.produce("tidemark.public.kinds", value=b"\x00\x00\x00\x27\x10\x02", key=key)
        producer.flush(10)
        wait_caught_up(config)
        dead = read_topic(config, f"{config.processor.pipeline}.dlq")
        assert [r.headers["tidemark.error.kind"] for r in dead] == [b"schema"]
        assert b"schema id 10000 is not registered" in dead[0].headers["tidemark.error"]
        text = processor.metrics()
        assert (
            metric(
                text, "tidemark_dead_letters_total", topic="tidemark.public.kinds", reason="schema"
            )
            == 1
        )
    finally:
        processor.stop()


def test_the_sink_merges_avro_events_with_their_types(
    avro_stack: DevStack, spark: SparkSession
) -> None:
    """The reconciled Avro topic of the test above, decoded through the registry by the sink:
    the Iceberg table equals the source, column by column, with Debezium's logical types."""
    config = sink_caught_up(
        avro_stack, avro_stack.config, "avrolake", "tidemark.reconciled.public.kinds"
    )
    types = dict(spark.table("avrolake.public.kinds").dtypes)
    assert types == {
        "id": "int",
        "small": "int",
        "big": "bigint",
        "amount": "decimal(12,3)",
        "ratio": "double",
        "flag": "boolean",
        "name": "string",
        "at": "timestamp",
        "local_at": "timestamp_ntz",
        "day": "date",
        "u": "string",
        "doc": "string",
        "blob": "binary",
    }
    result = compare_table(config, spark, "public", "kinds")
    assert result.equal, result
    assert result.source_rows == 7


def sink_caught_up(stack: DevStack, base: Config, catalog: str, topic: str) -> Config:
    """Run the sink over ``topic`` into catalog ``catalog`` (a warehouse of its own) until
    it has read everything written so far; its configuration."""
    config = dataclasses.replace(
        base,
        sink=dataclasses.replace(
            base.sink,
            catalog_name=catalog,
            warehouse=str(stack.run_dir / f"{catalog}-warehouse"),
            topics=[topic],
            metrics_port=0,
        ),
    )
    sink = Sink(config, create_session(config))
    targets = sink.ends()
    while sink.run_batch(targets):
        pass
    assert not sink.stopped
    return config


def test_avro_backfill_rows_are_debeziums_own(avro_stack: DevStack) -> None:
    """A backfill on an Avro source: chunk rows carry Debezium's key bytes, schema ids and
    values (compared with Debezium's own events of the same rows), and the reconciled
    topic ends equal to the table."""
    config = pipeline_config(avro_stack, "avrobf")
    name = "iso_avrobf_kinds"
    rows = [kinds_row(i, null_names=True) for i in range(0, 9)]
    marks = ", ".join(["%s"] * 13)
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS stage")
        conn.execute(TABLE.replace("kinds", f"stage.{name}"))
        with conn.cursor() as cur:  # rows Debezium never streams ...
            cur.executemany(f"INSERT INTO stage.{name} VALUES ({marks})", rows[1:])  # noqa: S608
        conn.execute(f"ALTER TABLE stage.{name} SET SCHEMA public")
        conn.execute(f"INSERT INTO {name} VALUES ({marks})", rows[0])  # noqa: S608 - ... and one
    processor = Processor(avro_stack, config, "avrobf-processor").start()
    try:
        deadline = time.monotonic() + 60
        while processor.health().get("snapshots") != "leader":
            assert time.monotonic() < deadline, "no coordinator"
            time.sleep(0.3)
        send_signal(config, "execute-snapshot", {"data-collections": [f"public.{name}"]}, "avro-1")
        deadline = time.monotonic() + 120

        def completed() -> bool:  # a new leader first writes a record of no tables
            state = read_state(config)
            return state is not None and [t.status for t in state.tables] == ["completed"]

        while not completed():
            assert time.monotonic() < deadline, "the snapshot did not complete"
            time.sleep(0.3)
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE {name} SET id = id")  # noqa: S608 - Debezium's event of every row
        wait_caught_up(config)

        decode = decoder(config)
        theirs = {
            r.key: (r.partition, r.value)
            for r in read_topic(config, f"tidemark.public.{name}")
            if r.value is not None and decode(r.value)["op"] == "u"
        }
        ours = read_backfill(config, f"avrobf.backfill.tidemark.public.{name}")
        assert len(ours) == len(theirs) == 9
        for record in ours:
            partition, value = theirs[record.key]  # the same key bytes (schema id included)
            assert record.partition == partition and record.value is not None and value is not None
            assert record.value[:5] == value[:5]  # the same value schema id
            mine, debezium = decode(record.value), decode(value)
            assert mine["after"] == debezium["after"]
            assert (mine["op"], mine["source"]["snapshot"]) == ("r", "incremental")

        final = {e.key["id"]: e.after for e in reconciled(config, name)}
        with psycopg.connect(**config.owner_conninfo()) as conn:
            cur = conn.execute(f"SELECT * FROM {name}")  # noqa: S608
            names = [c.name for c in cur.description or []]
            source = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
        decoded = {
            key: {c: from_debezium(c, v) for c, v in after.items()}
            for key, after in final.items()
            if after is not None
        }
        assert decoded == source
    finally:
        processor.stop()


def test_chunk_rows_follow_debeziums_value_settings_in_avro(avro_stack: DevStack) -> None:
    registry = SchemaCache(HttpRegistry(avro_stack.config.kafka.schema_registry_url))
    compare_under_settings(avro_stack, "avro", registry, SETTINGS["avro"], "iso_modes_avro")


def test_a_flattened_avro_topic_is_backfilled_in_its_own_form(avro_stack: DevStack) -> None:
    """``ExtractNewRecordState`` over Avro: the chunk rows carry the schema id of
    Debezium's own flattened rows (``test_flattened.py`` for JSON)."""
    backfill_flattened(avro_stack, "flatavro", "avro")


def test_a_truncate_of_an_avro_table_empties_its_iceberg_table(
    avro_stack: DevStack, spark: SparkSession
) -> None:
    """A truncate of a table with Avro events: its rows are deleted in the reconciled topic
    (``test_snapshots.py`` has the same for JSON), then the sink's Iceberg table holds what
    the source table holds, the one row written after the truncate."""
    base = truncate_applied(avro_stack, "avro")
    name = "iso_trunc_avro_t"
    topic = f"{base.source.topic_prefix}.reconciled.public.{name}"
    config = sink_caught_up(avro_stack, base, "truncatelake", topic)
    result = compare_table(config, spark, "public", name)
    assert result.equal, result
    assert result.source_rows == 1
