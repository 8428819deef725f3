"""Backfill throughput: Tidemark's incremental snapshot against Debezium's and COPY, in one run.

Starts the development stack (Tansu, a private PostgreSQL, Debezium) in a
temporary folder and creates two identical tables of ``--rows`` rows in a
schema Debezium does not capture, then moves them into ``public`` (rows that
exist in the source but never went through the change stream: what a backfill
is for). While a write workload updates random rows of the table being read:

- ``copy``: ``COPY (SELECT * FROM t) TO STDOUT``, the source's read limit;
- ``debezium-incremental``: Debezium's own incremental snapshot (signal table,
  chunk size 1024), from the signal to the last ``r`` event in its change topic;
- ``tidemark-backfill``: ``tidemark snapshot start`` against a running
  ``tidemark process``, from the signal until every chunk row has been decided
  by the data plane and its reconciled event produced and committed (the data
  plane's committed offsets reach the end of the backfill topic);
- ``tidemark-backfill-2-readers``, ``tidemark-backfill-signal-table`` and
  ``tidemark-backfill-signal-table-2-readers``: the same backfill of the same
  table with two reader processes, with DDD-3's signal-table watermarks, and
  with both, each by a pipeline of its own (fresh state).

Rows/s, seconds and the peak resident memory (VmHWM) of the process doing the
work (Debezium's JVM, which also streams; Tidemark's processor, and its chunk
reader process apart). Prints a table and writes ``bench/results/backfill.json``.

    python bench/backfill.py [--rows N] [--writes-per-s W]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import psycopg  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from psycopg import sql  # noqa: E402

from processor.snapshot.client import read_state, send_signal  # noqa: E402
from tidemark.cli.devstack.stack import DevStack  # noqa: E402
from tidemark.cli.verify import source_lsn, wait_debezium  # noqa: E402
from tidemark.config import Config, ProcessorConfig, SnapshotConfig, dump_config  # noqa: E402
from tidemark.kafka import client_config, data_messages, exact_end_offsets  # noqa: E402
from tidemark.ports import free_port  # noqa: E402
from tidemark.topics import backfill_topic, change_topic, dataplane_group  # noqa: E402

COLUMNS = (
    "id bigint PRIMARY KEY, customer text, status text, amount numeric(12,2), "
    "note text, updated_at timestamptz"
)
FILL = (
    "INSERT INTO {} SELECT g, 'customer-' || (g %% 997), "
    "(ARRAY['new','paid','shipped'])[g %% 3 + 1], g * 0.37, repeat('x', 16), now() "
    "FROM generate_series(1, %s) g"
)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Tidemark's chunk reader)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def create_tables(config: Config, names: list[str], rows: int) -> None:
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS stage")
        for name in names:
            staged = sql.Identifier("stage", name)
            conn.execute(sql.SQL("CREATE TABLE {} (" + COLUMNS + ")").format(staged))
            conn.execute(sql.SQL(FILL).format(staged), (rows,))
            conn.execute(sql.SQL("ANALYZE {}").format(staged))
            conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA public").format(staged))
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (0, 'first', 'new', 0, '', now())").format(
                    sql.Identifier("public", name)
                )
            )
    wait_debezium(config, source_lsn(config))


class Writes:
    """Updates of random rows, ``per_s`` transactions a second, until stopped."""

    def __init__(self, config: Config, table: str, rows: int, per_s: float) -> None:
        self.config, self.table, self.rows, self.per_s = config, table, rows, per_s
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writes:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        rng = random.Random(1)
        query = sql.SQL(
            "UPDATE {} SET amount = amount + 1, updated_at = now() WHERE id = %s"
        ).format(sql.Identifier("public", self.table))
        with psycopg.connect(**self.config.owner_conninfo(), autocommit=True) as conn:
            while not self._stop.is_set():
                conn.execute(query, (rng.randint(1, self.rows),))
                self.done += 1
                self._stop.wait(1 / self.per_s)


def run_copy(config: Config, table: str, rows: int) -> dict[str, Any]:
    started = time.perf_counter()
    size = 0
    with psycopg.connect(**config.owner_conninfo()) as conn, conn.cursor() as cur:
        query = sql.SQL("COPY (SELECT * FROM {}) TO STDOUT").format(sql.Identifier("public", table))
        with cur.copy(query) as copy:
            for block in copy:
                size += len(block)
    seconds = time.perf_counter() - started
    return {"program": "copy", "rows": rows + 1, "seconds": seconds, "bytes": size}


def run_debezium(stack: DevStack, table: str, rows: int, writes_per_s: float) -> dict[str, Any]:
    config = stack.config
    topic = f"{config.source.topic_prefix}.public.{table}"
    consumer = Consumer(
        client_config(config.kafka, **{"group.id": "bench-backfill", "enable.auto.commit": False})
    )
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = exact_end_offsets(consumer, tps)
    consumer.assign([TopicPartition(topic, p, ends[(topic, p)]) for p in range(partitions)])
    signal = {"data-collections": [f"public.{table}"], "type": "incremental"}
    seen, last = 0, 0.0
    with Writes(config, table, rows, writes_per_s) as writes:
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO public.debezium_signal (id, type, data) VALUES (%s, %s, %s)",
                ("bench-dbz", "execute-snapshot", orjson.dumps(signal).decode()),
            )
        started = time.perf_counter()
        # Debezium leaves out a row whose key changed while its chunk's window was open
        # (the change carries it), so the end is the last READ event: none for 10 s.
        while seen == 0 or time.perf_counter() - last < 10:
            for msg in data_messages(consumer.consume(10_000, 0.5)):
                value = msg.value()
                if value and b'"snapshot":"incremental"' in value:
                    seen += 1
                    last = time.perf_counter()
    consumer.close()
    pid = stack.process_pid("debezium")
    return {
        "program": "debezium-incremental",
        "rows": rows + 1,
        "read_events": seen,
        "seconds": last - started,
        "chunk_size": 1024,
        "writes": writes.done,
        "peak_rss_mb": peak_rss_mb(pid) if pid else None,
    }


def run_tidemark(
    stack: DevStack,
    table: str,
    rows: int,
    writes_per_s: float,
    program: str,
    snapshot: SnapshotConfig,
) -> dict[str, Any]:
    """One backfill of ``table`` by a processor of a pipeline of its own (fresh state)."""
    prefix = stack.config.source.topic_prefix
    pipeline = program.replace("tidemark-backfill", "benchbf")
    config = dataclasses.replace(
        stack.config,
        processor=ProcessorConfig(
            pipeline=pipeline,
            input_pattern=rf"^{prefix}\.public\.{table}$",
            state_dir=str(stack.run_dir / f"{pipeline}-state"),
            web_port=free_port(),
        ),
        snapshot=snapshot,
    )
    path = stack.run_dir / f"{pipeline}.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a password
    with os.fdopen(fd, "w") as out:
        out.write(dump_config(config))
    cmd = [sys.executable, "-m", "tidemark.cli", "process", "--config", str(path)]
    pid = stack.start_process(pipeline, cmd)
    try:
        wait_leader(config)
        with Writes(config, table, rows, writes_per_s) as writes:
            started = time.perf_counter()
            request = send_signal(
                config, "execute-snapshot", {"data-collections": [f"public.{table}"]}
            )
            read_done = wait_completed(config, request) - started
            wait_backfill_committed(
                config, backfill_topic(pipeline, change_topic(prefix, f"public.{table}"))
            )
            seconds = time.perf_counter() - started
        state = read_state(config)
        assert state is not None
        entry = next(t for t in state.tables if t.request_id == request)
        return {
            "program": program,
            "watermarks": config.snapshot.watermarks,
            "readers": config.snapshot.readers,
            "rows": entry.rows,
            "seconds": seconds,
            "read_seconds": read_done,
            "chunks": entry.chunks,
            "writes": writes.done,
            "peak_rss_mb": peak_rss_mb(pid),
            "reader_peak_rss_mb": sum(peak_rss_mb(child) for child in children(pid)),
        }
    finally:
        stack.stop_process(pipeline)


def wait_leader(config: Config) -> None:
    import urllib.request

    url = f"http://127.0.0.1:{config.processor.web_port}/health"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if orjson.loads(resp.read()).get("snapshots") == "leader":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the processor did not start coordinating snapshots")


def wait_backfill_committed(config: Config, topic: str) -> None:
    """Until the data plane has committed every record of ``topic`` (the change topic keeps
    receiving the write workload's changes, so its lag is never zero for long)."""
    group = dataplane_group(config.processor.pipeline)
    consumer = Consumer(
        client_config(config.kafka, **{"group.id": group, "enable.auto.commit": False})
    )
    try:
        count = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        tps = [TopicPartition(topic, p) for p in range(count)]
        ends = exact_end_offsets(consumer, tps)
        while True:
            committed = consumer.committed(tps, timeout=10)
            if all(tp.offset >= ends[(topic, tp.partition)] for tp in committed):
                return
            time.sleep(0.1)
    finally:
        consumer.close()


def wait_completed(config: Config, request: str) -> float:
    while True:
        state = read_state(config)
        if state is not None:
            mine = [t for t in state.tables if t.request_id == request]
            if mine and all(t.status in ("completed", "aborted") for t in mine):
                if any(t.status == "aborted" for t in mine):
                    raise RuntimeError(f"the snapshot was aborted: {mine[0].error}")
                return time.perf_counter()
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--writes-per-s", type=float, default=100.0)
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    stack = DevStack(run_dir, Config())
    stack.up()
    results: list[dict[str, Any]] = []
    try:
        create_tables(stack.config, ["bench_dbz", "bench_tm"], args.rows)
        results.append(run_copy(stack.config, "bench_tm", args.rows))
        results.append(run_debezium(stack, "bench_dbz", args.rows, args.writes_per_s))
        variants = {
            "tidemark-backfill": SnapshotConfig(),
            "tidemark-backfill-2-readers": SnapshotConfig(readers=2),
            "tidemark-backfill-signal-table": SnapshotConfig(watermarks="signal-table"),
            "tidemark-backfill-signal-table-2-readers": SnapshotConfig(
                watermarks="signal-table", readers=2
            ),
        }
        for program, snapshot in variants.items():
            results.append(
                run_tidemark(stack, "bench_tm", args.rows, args.writes_per_s, program, snapshot)
            )
    finally:
        stack.down()
        subprocess.run(["rm", "-rf", str(run_dir)], check=False)
    for result in results:
        result["rows_per_s"] = round(result["rows"] / result["seconds"])
    print(f"{'program':<42}{'rows':>10}{'seconds':>10}{'rows/s':>12}{'peak RSS MB':>14}")
    for r in results:
        rss = r.get("peak_rss_mb")
        print(
            f"{r['program']:<42}{r['rows']:>10}{r['seconds']:>10.1f}{r['rows_per_s']:>12,}"
            f"{(f'{rss:.0f}' if rss else '-'):>14}"
        )
    write_results("backfill", results, rows=args.rows, writes_per_s=args.writes_per_s)


if __name__ == "__main__":
    main()
