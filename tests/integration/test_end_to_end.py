"""PostgreSQL -> Debezium -> Kafka -> processor -> Kafka -> Spark -> Iceberg, all real.

The source changes while the pipeline runs; after the stream caught up and the
sink drained the reconciled topics, every Iceberg table equals its source table.
A second round of changes proves that the sink resumes from the offsets it
committed with the first round's data.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import urllib.request

import psycopg
import pytest
from pyspark.sql import SparkSession

from tidemark.cli.demo import apply_burst, fill, print_results, sink_and_compare
from tidemark.cli.verify import wait_caught_up
from tidemark.devstack.stack import DevStack

CUSTOMERS = 150


@pytest.fixture(scope="module")
def sample(stack: DevStack) -> DevStack:
    fill(stack.config, random.Random(1), CUSTOMERS)
    return stack


def run_sink_once(stack: DevStack) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidemark.cli",
            "sink",
            "--once",
            "--config",
            str(stack.config_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_iceberg_tables_equal_the_source_after_changes_while_running(
    sample: DevStack, processor: int, spark: SparkSession
) -> None:
    config = sample.config
    rng = random.Random(2)
    # changes from two connections at once while everything runs
    worker = threading.Thread(
        target=apply_burst, args=(config, random.Random(3), 300, CUSTOMERS, 1_000_000)
    )
    worker.start()
    apply_burst(config, rng, 300, CUSTOMERS)
    worker.join()
    wait_caught_up(config)
    run_sink_once(sample)

    with psycopg.connect(**config.owner_conninfo()) as conn:
        conn.execute("UPDATE customers SET name = name || ' (renamed)' WHERE id % 3 = 0")
        conn.execute("DELETE FROM order_items WHERE order_id % 5 = 0")
        conn.execute("INSERT INTO customers VALUES (100000, 'late', NULL, true, NULL, now())")
    wait_caught_up(config)
    results = sink_and_compare(
        config, spark=spark
    )  # drains the second round in-process, then compares
    print_results(results)
    assert [r.table for r in results] == ["customers", "orders", "order_items"]
    assert all(r.source_rows > 0 for r in results)
    for result in results:
        assert result.equal, result

    with urllib.request.urlopen(f"http://127.0.0.1:{processor}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    assert 'tidemark_events_in_total{topic="tidemark.public.orders"}' in metrics
    assert 'tidemark_events_out_total{topic="tidemark.reconciled.public.orders"}' in metrics
    assert "tidemark_consumer_lag{" in metrics
