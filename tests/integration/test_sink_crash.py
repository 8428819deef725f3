"""The sink killed (SIGKILL) while it reads, during a MERGE, and between a commit and the next
batch; restarted each time, it loses and duplicates nothing. The same with the warehouse on
an S3-compatible server and the tables in a JDBC catalog, where maintenance then removes
the files the killed MERGE left. Then a continuous sink serves its metrics and stops
cleanly on SIGTERM.

Effectively once is checked on the table's history, not only on its final rows: every
snapshot that carries offsets advances them, so no batch was merged twice, and a crash
before a commit leaves no trace in the table.
"""

from __future__ import annotations

import dataclasses
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from spark_sink.job import Sink
from spark_sink.maintenance import maintain_table
from spark_sink.session import create_session
from spark_sink.writer import OFFSETS_PROPERTY, parse_offsets
from tests.integration.object_store import CREDENTIALS, ObjectStore
from tests.integration.processes import Processor, SinkProcess, metric, pipeline_config, wait_for
from tidemark.cli.verify import compare_table, wait_caught_up
from tidemark.core.config import Config
from tidemark.core.ports import free_port
from tidemark.devstack.stack import DevStack

TABLE = "iso_sinkcrash_items"
TOPIC = f"tidemark.reconciled.public.{TABLE}"
#: The table of the warehouse on object storage.
LAKE_TABLE = "iso_sinkcrash_lake"


@pytest.fixture(scope="module")
def config(stack: DevStack) -> Iterator[Config]:
    pipeline = pipeline_config(stack, "sinkcrash")
    with psycopg.connect(**pipeline.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, qty int, note text)")
        conn.execute(
            f"INSERT INTO {TABLE} SELECT i, i % 17, 'note ' || i FROM generate_series(1, 24000) i"  # noqa: S608
        )
        conn.execute(f"UPDATE {TABLE} SET qty = qty + 100 WHERE id % 5 = 0")  # noqa: S608
        conn.execute(f"DELETE FROM {TABLE} WHERE id % 11 = 0")  # noqa: S608
        conn.execute(f"CREATE TABLE {LAKE_TABLE} (id int PRIMARY KEY, qty int, note text)")
        conn.execute(
            f"INSERT INTO {LAKE_TABLE} SELECT i, i % 13, 'lake ' || i "  # noqa: S608
            "FROM generate_series(1, 9000) i"
        )
    processor = Processor(stack, pipeline, "sinkcrash-processor").start()
    try:
        wait_caught_up(pipeline)
        yield dataclasses.replace(
            pipeline,
            sink=dataclasses.replace(
                pipeline.sink,
                catalog_name="crash",
                warehouse=str(stack.run_dir / "crash-warehouse"),
                topics=[TOPIC],
                topic_pattern="",
                max_records_per_partition=3000,
                metrics_port=free_port(),
                trigger_interval_s=1.0,
            ),
        )
    finally:
        processor.stop()


def table_dir(config: Config) -> Path:
    return Path(config.sink.warehouse) / "public" / TABLE


def history(spark: SparkSession) -> list[dict[int, int]]:
    """The offsets of every snapshot that carries them, oldest first."""
    spark.sql("REFRESH TABLE crash.public." + TABLE)
    rows = spark.sql(
        f"SELECT summary['{OFFSETS_PROPERTY}'] AS o FROM crash.public.{TABLE}.snapshots "
        "ORDER BY committed_at"
    ).collect()
    return [parse_offsets(r["o"]) for r in rows if r["o"] is not None]


def assert_advancing(offsets: list[dict[int, int]]) -> None:
    """Each commit moves some partition forward and none back: no batch merged twice."""
    for before, after in zip(offsets, offsets[1:], strict=False):
        assert all(after.get(p, 0) >= o for p, o in before.items()), (before, after)
        assert after != before, f"a batch was merged twice: {after}"


def test_killed_anywhere_the_sink_resumes_without_loss_or_duplicates(
    stack: DevStack, config: Config, spark: SparkSession
) -> None:
    sink = SinkProcess(stack, config, "crash-sink")

    # 1. between a commit and the next batch: the second commit happened, nothing after it
    assert sink.start("--once", failpoint="sink-committed:2").wait() == -signal.SIGKILL
    create_session(config)  # the test's session learns the catalog
    committed = history(spark)
    assert len(committed) == 2
    assert_advancing(committed)

    # 2. while the executors read a batch: no trace in the table
    assert sink.start("--once", failpoint="sink-read:1500").wait() == -signal.SIGKILL
    assert "merged offsets" not in sink.output()
    assert history(spark) == committed

    # 3. during a MERGE: data files written, the commit not yet made
    metadata = sorted((table_dir(config) / "metadata").glob("*.metadata.json"))
    data = set((table_dir(config) / "data").glob("*.parquet"))
    sink.start("--once")
    wait_for(
        "the MERGE's first data file",
        lambda: set((table_dir(config) / "data").glob("*.parquet")) - data,
        timeout=180,
    )
    sink.kill()
    assert sorted((table_dir(config) / "metadata").glob("*.metadata.json")) == metadata, (
        "the MERGE committed before the kill: the crash missed its window"
    )
    assert history(spark) == committed

    # 4. a clean run drains the rest
    assert sink.start("--once").wait() == 0
    offsets = history(spark)
    assert_advancing(offsets)
    assert offsets[: len(committed)] == committed
    result = compare_table(config, spark, "public", TABLE)
    assert result.equal, result
    # and a run with nothing new commits nothing
    assert sink.start("--once").wait() == 0
    assert history(spark) == offsets


def test_on_object_storage_a_killed_sink_resumes_and_maintenance_removes_its_leftovers(
    stack: DevStack, config: Config, spark: SparkSession
) -> None:
    """The warehouse on ``s3://`` through Iceberg's S3FileIO, the credentials only in the
    sink's environment: killed after a commit and during a MERGE, with a column added in
    between, it resumes without loss or duplicates; maintenance lists the table's objects
    by prefix and deletes those the killed MERGE left."""
    store = ObjectStore(stack.run_dir / "object-store").start()
    try:
        store.client().create_bucket(Bucket="lake")
        owner = config.owner_conninfo()
        with psycopg.connect(**owner, autocommit=True) as conn:
            conn.execute("CREATE DATABASE iceberg_lake")
        sink_config = dataclasses.replace(
            config,
            sink=dataclasses.replace(
                config.sink,
                catalog_name="s3lake",
                catalog_type="jdbc",
                catalog_uri=f"jdbc:postgresql://{owner['host']}:{owner['port']}/iceberg_lake",
                catalog_user=owner["user"],
                warehouse="s3://lake/warehouse",
                catalog_properties=store.properties(),
                topics=[f"tidemark.reconciled.public.{LAKE_TABLE}"],
                max_records_per_partition=1000,
            ),
        )
        # The test's own Spark started long before this server: its reader gets keys as
        # catalog properties (placeholders; the server checks none).
        reader = dataclasses.replace(
            sink_config,
            sink=dataclasses.replace(
                sink_config.sink,
                catalog_password=owner["password"],
                catalog_properties={
                    **store.properties(),
                    "s3.access-key-id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
                    "s3.secret-access-key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                    "client.region": CREDENTIALS["AWS_REGION"],
                },
            ),
        )
        env = {**CREDENTIALS, "TIDEMARK_SINK__CATALOG_PASSWORD": owner["password"]}
        name = f"s3lake.public.{LAKE_TABLE}"
        prefix = f"warehouse/public/{LAKE_TABLE}/"

        def lake_history() -> list[dict[int, int]]:
            spark.sql(f"REFRESH TABLE {name}")
            rows = spark.sql(
                f"SELECT summary['{OFFSETS_PROPERTY}'] AS o FROM {name}.snapshots "
                "ORDER BY committed_at"
            ).collect()
            return [parse_offsets(r["o"]) for r in rows if r["o"] is not None]

        def objects(kind: str) -> set[str]:
            return store.keys("lake", prefix + kind + "/")

        sink = SinkProcess(stack, sink_config, "s3-sink")
        # 1. killed right after its first commit
        assert sink.start("--once", failpoint="sink-committed:1", env=env).wait() == -signal.SIGKILL
        create_session(reader)  # the test's session learns the catalog
        committed = lake_history()
        assert len(committed) == 1
        assert objects("data") and objects("metadata")

        # 2. a column added at the source; then killed during a MERGE whose commit waits
        # on the catalog's row, held by the test: data, manifests and the new metadata
        # written, the catalog not yet pointed at them
        with psycopg.connect(**owner, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {LAKE_TABLE} ADD COLUMN grade text")
            conn.execute(f"UPDATE {LAKE_TABLE} SET grade = 'g' || qty WHERE id % 4 = 0")  # noqa: S608
        wait_caught_up(config)
        before = objects("metadata") | objects("data")
        catalog_db = dict(owner, dbname="iceberg_lake")
        waiting = (
            "SELECT pid FROM pg_stat_activity WHERE datname = 'iceberg_lake' "
            "AND wait_event_type = 'Lock' AND query LIKE 'UPDATE%%'"
        )
        with (
            psycopg.connect(**catalog_db) as catalog,
            psycopg.connect(**catalog_db, autocommit=True) as watch,
        ):
            held = catalog.execute(
                "SELECT table_namespace FROM iceberg_tables WHERE table_name = %s FOR UPDATE",
                (LAKE_TABLE,),
            ).fetchall()
            assert held == [("public",)], held
            sink.start("--once", env=env)
            pids = wait_for(
                "the MERGE's commit, held",
                lambda: watch.execute(waiting).fetchall(),
                timeout=180,
            )
            sink.kill()
            # PostgreSQL notices a dead client only when it next writes to it: a commit
            # left waiting would still be made once the row is free (with its offsets, so
            # no batch twice). End it, as the server does when it notices.
            watch.execute("SELECT pg_terminate_backend(%s)", pids[0])
            catalog.rollback()
        left = (objects("metadata") | objects("data")) - before
        assert {k.rsplit(".", 1)[-1] for k in left} >= {"json", "parquet", "avro"}, left
        assert lake_history() == committed

        # 3. a clean run drains the rest, the new column with it
        assert sink.start("--once", env=env).wait() == 0
        offsets = lake_history()
        assert_advancing(offsets)
        assert offsets[:1] == committed
        result = compare_table(reader, spark, "public", LAKE_TABLE)
        assert result.equal, result
        log = sink.output()
        assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in log and owner["password"] not in log

        # 4. maintenance on object storage: compaction, expiry, and the killed MERGE's
        # objects found by prefix and deleted (any file a second old counts here)
        table = Sink(reader, spark).table(reader.sink.topics[0])
        done = maintain_table(
            dataclasses.replace(reader.sink, orphan_file_age_hours=1 / 3600, min_input_files=2),
            spark,
            table,
        )
        assert done.failed == {} and done.conflicted == {}, done
        assert done.orphan_files >= len(left) > 0
        assert not left & objects("data")
        result = compare_table(reader, spark, "public", LAKE_TABLE)
        assert result.equal, result
    finally:
        store.stop()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def test_a_continuous_sink_reports_its_lag_and_stops_on_sigterm(
    stack: DevStack, config: Config, spark: SparkSession
) -> None:
    port = config.sink.metrics_port
    labels: dict[str, Any] = {"table": f"crash.public.{TABLE}"}

    def caught_up() -> float:
        """Batches merged so far, once no partition lags (0 before)."""
        text = _try_scrape(port)
        lag = sum(
            metric(text, "tidemark_sink_lag", topic=TOPIC, partition=str(p)) for p in range(3)
        )
        batches = metric(text, "tidemark_sink_batches_total", **labels)
        return batches if text and lag == 0 and batches else 0

    sink = SinkProcess(stack, config, "crash-sink-live").start()
    try:
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE {TABLE} SET note = 'warm-up' WHERE id = 1")  # noqa: S608
        wait_caught_up(config)
        batches = wait_for("the sink to catch up", caught_up, timeout=300)
        merged = metric(scrape(port), "tidemark_sink_rows_merged_total", **labels)
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE {TABLE} SET note = 'live' WHERE id <= 500")  # noqa: S608
        wait_caught_up(config)
        live = 500 - 500 // 11  # the rows updated: ids up to 500 but the deleted ones
        wait_for(
            "the live rows merged",
            lambda: (
                metric(_try_scrape(port), "tidemark_sink_rows_merged_total", **labels) - merged
                == live
            ),
        )
        text = scrape(port)
        assert caught_up() > batches
        assert metric(text, "tidemark_sink_committed_offset", topic=TOPIC, partition="0") > 0
        assert metric(text, "tidemark_sink_batch_seconds_count", **labels) >= 2
        started = time.monotonic()
        sink.terminate()
        assert sink.wait(120) == 0
        assert "stopping after the batch in flight" in sink.output()
        assert time.monotonic() - started < 60
    finally:
        if sink.alive():
            sink.kill()
    create_session(config)  # the test's session learns the catalog
    spark.sql(f"REFRESH TABLE crash.public.{TABLE}")  # its cached metadata predates the sink's
    result = compare_table(config, spark, "public", TABLE)
    assert result.equal, result


def _try_scrape(port: int) -> str:
    try:
        return scrape(port)
    except OSError:
        return ""
