"""``tidemark demo``: the whole pipeline on embedded components, verified.

Starts the broker and a private PostgreSQL, fills a sample database, runs real
Debezium into Kafka, the processor and the Spark sink, applies a burst of
inserts, updates and deletes while everything runs, then compares every source
table with its Iceberg table. Exit code 0 only when they all match. Everything
it started is stopped at the end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from tidemark.cli.verify import TableComparison, compare_table, wait_caught_up
from tidemark.core.config import Config
from tidemark.core.ports import free_port
from tidemark.devstack.stack import DevStack

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCHEMA_SQL = """
CREATE TABLE customers (
    id integer PRIMARY KEY, name text NOT NULL, email text, vip boolean NOT NULL,
    balance numeric(12, 2), created_at timestamptz NOT NULL);
CREATE TABLE orders (
    id bigint PRIMARY KEY, customer_id integer NOT NULL, amount numeric(10, 2) NOT NULL,
    status text NOT NULL, ordered_on date NOT NULL, note jsonb);
CREATE TABLE order_items (
    order_id bigint NOT NULL, line smallint NOT NULL, sku uuid NOT NULL, qty integer NOT NULL,
    price double precision, PRIMARY KEY (order_id, line));
"""
TABLES = ("customers", "orders", "order_items")
STATUSES = ("new", "paid", "shipped", "returned")


def say(text: str) -> None:
    """Progress for the person watching."""
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def run_demo(base: Config, run_dir: Path, customers: int = 500, burst: int = 1500) -> int:
    """Run the demo; 0 when every Iceberg table equals its source table."""
    run_dir = run_dir.resolve()
    base = dataclasses.replace(
        base,
        processor=dataclasses.replace(
            base.processor, state_dir=str(run_dir / "state"), web_port=free_port()
        ),
        sink=dataclasses.replace(base.sink, warehouse=str(run_dir / "warehouse")),
    )
    stack = DevStack(run_dir, base)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    rng = random.Random(7)
    try:
        say(f"starting the Kafka broker and PostgreSQL (logs in {run_dir})")
        stack.start_infrastructure()
        config = stack.config
        say(f"filling the sample database: {', '.join(TABLES)}")
        fill(config, rng, customers)
        say("starting Debezium (initial snapshot, then streaming)")
        stack.start_debezium()
        say(
            f"starting the processor (metrics on http://127.0.0.1:{config.processor.web_port}"
            "/metrics)"
        )
        stack.start_process(
            "processor",
            [sys.executable, "-m", "tidemark.cli", "process", "--config", str(stack.config_path)],
        )
        say(f"applying a burst of {burst} inserts, updates and deletes while it runs")
        counts = apply_burst(config, rng, burst, customers)
        say("burst applied: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        say("waiting until Debezium and the processor have caught up")
        wait_caught_up(config)
        say("running the Spark sink (drains every reconciled topic into Iceberg)")
        results = sink_and_compare(config)
        print_results(results)
        ok = all(r.equal for r in results)
        say("every Iceberg table equals its source table" if ok else "MISMATCH: see above")
        return 0 if ok else 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        say("stopping everything the demo started")
        stopped = stack.down()
        say("stopped: " + ", ".join(stopped))


def _interrupt(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def fill(config: Config, rng: random.Random, customers: int) -> None:
    """Create and fill the sample tables."""
    with psycopg.connect(**config.owner_conninfo()) as conn:
        conn.execute(SCHEMA_SQL)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO customers VALUES (%s, %s, %s, %s, %s, now() - %s * interval '1 hour')",
                [
                    (
                        i,
                        f"customer {i}",
                        f"c{i}@example.com",
                        i % 7 == 0,
                        round(rng.uniform(-100, 10_000), 2),
                        rng.randint(0, 5000),
                    )
                    for i in range(1, customers + 1)
                ],
            )
            for order_id in range(1, customers * 2 + 1):
                _insert_order(cur, rng, order_id, customers)


def _insert_order(
    cur: psycopg.Cursor[Any], rng: random.Random, order_id: int, customers: int
) -> None:
    cur.execute(
        "INSERT INTO orders VALUES (%s, %s, %s, %s, current_date - %s, %s)",
        (
            order_id,
            rng.randint(1, customers),
            round(rng.uniform(1, 999), 2),
            rng.choice(STATUSES),
            rng.randint(0, 400),
            Jsonb({"gift": rng.random() < 0.2, "tags": ["demo"]}),
        ),
    )
    cur.executemany(
        "INSERT INTO order_items VALUES (%s, %s, gen_random_uuid(), %s, %s)",
        [
            (order_id, line, rng.randint(1, 5), rng.uniform(0.5, 99))
            for line in range(1, rng.randint(1, 4) + 1)
        ],
    )


def apply_burst(
    config: Config, rng: random.Random, operations: int, customers: int, first_order: int = 0
) -> dict[str, int]:
    """Random inserts, updates and deletes in small transactions."""
    counts = {"inserts": 0, "updates": 0, "deletes": 0}
    next_order = first_order or customers * 2 + 1
    with psycopg.connect(**config.owner_conninfo()) as conn:
        done = 0
        while done < operations:
            with conn.transaction(), conn.cursor() as cur:
                for _ in range(rng.randint(1, 8)):
                    roll = rng.random()
                    if roll < 0.35:
                        _insert_order(cur, rng, next_order, customers)
                        next_order += 1
                        counts["inserts"] += 1
                    elif roll < 0.8:
                        _update(cur, rng, customers)
                        counts["updates"] += 1
                    else:
                        cur.execute(
                            "DELETE FROM order_items WHERE order_id = %s",
                            (rng.randint(1, next_order),),
                        )
                        cur.execute(
                            "DELETE FROM orders WHERE id = %s", (rng.randint(1, next_order),)
                        )
                        counts["deletes"] += 1
                    done += 1
    return counts


def _update(cur: psycopg.Cursor[Any], rng: random.Random, customers: int) -> None:
    kind = rng.randint(0, 2)
    if kind == 0:
        cur.execute(
            "UPDATE customers SET balance = balance + %s, vip = NOT vip WHERE id = %s",
            (round(rng.uniform(-50, 50), 2), rng.randint(1, customers)),
        )
    elif kind == 1:
        cur.execute(
            "UPDATE orders SET status = %s, note = note || '{\"touched\": true}' WHERE id = %s",
            (rng.choice(STATUSES), rng.randint(1, customers * 2)),
        )
    else:
        cur.execute(
            "UPDATE order_items SET qty = qty + 1 WHERE order_id = %s",
            (rng.randint(1, customers * 2),),
        )


def sink_and_compare(
    config: Config,
    schema: str = "public",
    tables: tuple[str, ...] = TABLES,
    spark: SparkSession | None = None,
) -> list[TableComparison]:
    """Run the sink once, then compare each source table with its Iceberg table."""
    from spark_sink.job import run_sink
    from spark_sink.session import create_session, stop_session

    session = spark if spark is not None else create_session(config)
    try:
        run_sink(config, once=True, spark=session)
        return [compare_table(config, session, schema, table) for table in tables]
    finally:
        if spark is None:
            stop_session(session)


def print_results(results: list[TableComparison]) -> None:
    """The comparison as a table."""
    print(
        f"\n{'table':<14}{'source rows':>12}{'iceberg rows':>14}{'missing':>9}{'extra':>7}"
        f"{'different':>11}  result"
    )
    for r in results:
        print(
            f"{r.table:<14}{r.source_rows:>12}{r.lake_rows:>14}{r.missing:>9}{r.extra:>7}"
            f"{r.different:>11}  {'MATCH' if r.equal else 'MISMATCH'}"
        )
    print(flush=True)
