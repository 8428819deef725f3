"""Schemaless JSON (Debezium's ``JsonConverter`` with ``schemas.enable=false``) through the
processor and the sink: the types are inferred from the values, which is lossy, as the README
says. A stack of its own runs Debezium in that format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import psycopg
import pytest
from pyspark.sql import SparkSession

from spark_sink.job import Sink
from spark_sink.session import create_session
from tests.integration.processes import Processor
from tidemark.cli.verify import source_rows, wait_caught_up
from tidemark.core.config import Config, DevConfig, ProcessorConfig
from tidemark.core.ports import free_port
from tidemark.devstack.stack import DevStack


@pytest.fixture(scope="module")
def schemaless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Config]:
    run_dir = tmp_path_factory.mktemp("schemaless-stack")
    base = Config(
        processor=ProcessorConfig(web_port=free_port(), state_dir=str(run_dir / "state")),
        dev=DevConfig(debezium_format="json-schemaless"),
    )
    stack = DevStack(run_dir, base)
    stack.up()
    try:
        with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE loose (id int PRIMARY KEY, name text, ok boolean, "
                "ratio double precision, doc jsonb, amount numeric(8, 2), later text)"
            )
            conn.execute(
                "INSERT INTO loose SELECT i, 'n' || i, i % 2 = 0, i / 4.0, "
                "jsonb_build_object('i', i), i * 1.5, NULL FROM generate_series(1, 40) i"
            )
            conn.execute("UPDATE loose SET later = 'now ' || id WHERE id > 30")
            conn.execute("DELETE FROM loose WHERE id % 10 = 0")
        processor = Processor(stack, stack.config, "schemaless-processor").start()
        try:
            wait_caught_up(stack.config)
            yield dataclasses.replace(
                stack.config,
                sink=dataclasses.replace(
                    stack.config.sink,
                    catalog_name="loose",
                    warehouse=str(run_dir / "warehouse"),
                    topics=["tidemark.reconciled.public.loose"],
                    metrics_port=0,
                ),
            )
        finally:
            processor.stop()
    finally:
        stack.down()


def test_schemaless_events_become_a_table_with_inferred_types(
    schemaless: Config, spark: SparkSession
) -> None:
    sink = Sink(schemaless, create_session(schemaless))
    targets = sink.ends()
    while sink.run_batch(targets):
        pass
    assert not sink.stopped
    table = spark.table("loose.public.loose")
    # integers as bigint; a decimal arrives as Debezium's base64 text: lossy, as documented
    assert dict(table.dtypes) == {
        "id": "bigint",
        "name": "string",
        "ok": "boolean",
        "ratio": "double",
        "doc": "string",
        "amount": "string",
        "later": "string",  # null in the first events: typed by its first value
    }
    columns, rows = source_rows(schemaless, "public", "loose")
    source = {r[0]: dict(zip(columns, r, strict=True)) for r in rows}
    lake = {r["id"]: r.asDict() for r in table.collect()}
    assert sorted(lake) == sorted(source)
    for key, row in source.items():
        got = lake[key]
        assert (got["name"], got["ok"], got["ratio"]) == (row["name"], row["ok"], row["ratio"])
        assert got["later"] == row["later"]
        assert got["doc"] is not None and '"i"' in got["doc"]
        assert got["amount"] is not None and got["amount"] != str(row["amount"])
