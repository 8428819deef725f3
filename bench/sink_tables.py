"""The sink's lag with many active tables: changes spread over N tables, one sink.

Starts the development stack (Tansu, PostgreSQL, Debezium) in a temporary folder, makes
``N`` tables ``bench_t<i>(id int primary key, seq bigint, v text)`` of ``--rows`` rows
each, and runs a ``tidemark process`` for them. Then, for each variant of the sink:

1. a continuous ``tidemark sink`` (``trigger_interval_s`` 1, Spark ``local[2]``, a
   warehouse of its own) starts and merges every table from its topic's beginning; the
   run waits until every table's committed offsets (read from its metadata files) reach
   its topic's end;
2. a writer updates rows at ``--rate`` changes a second for ``--seconds`` seconds: every
   50 ms one transaction in the next table (round robin), setting a global increasing
   ``seq``;
3. once the tables reach their topics' ends again, the sink is stopped, and each
   table's snapshots are read:
   a change's lag is from its transaction's commit in PostgreSQL to the commit time of
   the first snapshot of its table that holds its ``seq``.

Variants: ``scheduler-<C>`` is this tree's sink with ``sink.concurrent_tables`` C (one
per value of ``--concurrency``); ``before`` (with ``--before-tree PATH``) is the sink of
another checkout (for example the commit before the scheduler), run with ``PYTHONPATH``
at that tree. Reports lag p50/p95/max over the changes after ``--warmup`` seconds, the
sink's rounds (from its log: rows and seconds of each merge) and its CPU seconds.

Writes ``bench/results/sink_tables.json``.

    python bench/sink_tables.py [--tables 10,50] [--rate 5000] [--seconds 60]
                                [--concurrency 4] [--before-tree PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from results_file import write_results
from sink import lag_stats, stop_spark

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import yaml  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from psycopg import sql  # noqa: E402

from spark_sink.session import create_session  # noqa: E402
from spark_sink.writer import OFFSETS_PROPERTY  # noqa: E402
from tidemark.cli.verify import wait_caught_up  # noqa: E402
from tidemark.core.config import Config, ProcessorConfig, SinkConfig, dump_config  # noqa: E402
from tidemark.core.kafka import client_config, exact_end_offsets  # noqa: E402
from tidemark.core.ports import free_port  # noqa: E402
from tidemark.core.topics import output_topic  # noqa: E402
from tidemark.devstack.procs import pid_alive  # noqa: E402
from tidemark.devstack.stack import DevStack  # noqa: E402

TICK_S = 0.05
#: Prints the settings a tree's configuration knows, by section (run in that tree).
KNOWN_SETTINGS = (
    "import dataclasses, json, typing; from tidemark.core.config import Config; "
    "print(json.dumps({name: [f.name for f in dataclasses.fields(kind)] "
    "for name, kind in typing.get_type_hints(Config).items()}))"
)
MERGED = re.compile(r"merged offsets .* \((\d+) rows\) in ([0-9.]+) s")


class Writer:
    """Every :data:`TICK_S`, one transaction updating ``per_txn`` rows of the next table."""

    def __init__(self, config: Config, tables: list[str], rows: int, rate: float) -> None:
        self.config, self.tables, self.rows = config, tables, rows
        self.per_txn = max(1, min(rows, round(rate * TICK_S)))
        #: ``(seq, table, wall commit time)`` of every committed transaction.
        self.commits: list[tuple[int, str, float]] = []
        self.error: BaseException | None = None
        self.seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        try:
            with psycopg.connect(**self.config.owner_conninfo()) as conn:
                started = time.monotonic()
                tick = 0
                while not self._stop.is_set():
                    table = self.tables[tick % len(self.tables)]
                    self.seq += 1
                    first = (tick // len(self.tables)) * self.per_txn
                    ids = [(first + j) % self.rows for j in range(self.per_txn)]
                    statement = sql.SQL("UPDATE {} SET seq = %s, v = %s WHERE id = ANY(%s)")
                    with conn.transaction():
                        conn.execute(
                            statement.format(sql.Identifier(table)),
                            (self.seq, f"v{self.seq}", ids),
                        )
                    self.commits.append((self.seq, table, time.time()))
                    tick += 1
                    self._stop.wait(max(0.0, started + tick * TICK_S - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def config_text(config: Config, tree: str) -> str:
    """YAML of ``config``; for the sink of another ``tree``, only the settings it knows
    (it refuses any other), at this tree's values."""
    if not tree:
        return dump_config(config)
    known = json.loads(
        subprocess.run(
            [sys.executable, "-c", KNOWN_SETTINGS],
            env={**os.environ, "PYTHONPATH": tree},
            cwd=tree,  # ``-c`` puts the working folder first on the path
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    data = dataclasses.asdict(config)
    kept = {
        section: {k: v for k, v in values.items() if k in known[section]}
        for section, values in data.items()
        if section in known
    }
    return yaml.safe_dump(kept, sort_keys=False)


def table_offsets(warehouse: Path, table: str) -> dict[int, int]:
    """The offsets committed with ``table``'s newest snapshot that has them, read from its
    metadata files (a ``hadoop`` catalog: no Spark job beside the sink's)."""
    folder = warehouse / "public" / table / "metadata"
    try:
        version = (folder / "version-hint.text").read_text().strip()
        document = json.loads((folder / f"v{version}.metadata.json").read_text())
    except (OSError, ValueError):
        return {}
    snapshots = {s["snapshot-id"]: s for s in document.get("snapshots", [])}
    current = document.get("current-snapshot-id")
    while current in snapshots:
        summary = snapshots[current].get("summary", {})
        if OFFSETS_PROPERTY in summary:
            return {int(p): int(o) for p, o in json.loads(summary[OFFSETS_PROPERTY]).items()}
        current = snapshots[current].get("parent-snapshot-id")
    return {}


def reconciled_ends(config: Config, tables: list[str]) -> dict[str, dict[int, int]]:
    """Per table, the end offsets of its reconciled topic."""
    consumer = Consumer(client_config(config.kafka, **{"group.id": "bench-ends"}))
    try:
        topics = {t: output_topic("tidemark", f"tidemark.public.{t}") for t in tables}
        tps = [
            TopicPartition(topic, p)
            for topic in topics.values()
            for p in range(config.kafka.topic_partitions)
        ]
        ends = exact_end_offsets(consumer, tps)
    finally:
        consumer.close()
    return {
        t: {p: ends[(topic, p)] for p in range(config.kafka.topic_partitions)}
        for t, topic in topics.items()
    }


def merged_to(warehouse: Path, ends: dict[str, dict[int, int]]) -> bool:
    """Whether every table's committed offsets reach ``ends``."""
    for table, wanted in ends.items():
        have = table_offsets(warehouse, table)
        if any(have.get(p, 0) < end for p, end in wanted.items() if end > 0):
            return False
    return True


def cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants (the driver's JVM)."""
    total = 0.0
    pids = [pid]
    while pids:
        current = pids.pop()
        with contextlib.suppress(OSError):
            with open(f"/proc/{current}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            with open(f"/proc/{current}/task/{current}/children") as children:
                pids += [int(c) for c in children.read().split()]
    return total


def wait(what: str, check: Any, timeout: float, alive: Any, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if not alive():
            raise RuntimeError(f"{what}: the sink exited: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(1.0)


def run_variant(
    stack: DevStack,
    config: Config,
    tables: list[str],
    name: str,
    concurrency: int,
    tree: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    sink_config = dataclasses.replace(
        config,
        sink=dataclasses.replace(
            config.sink,
            # a catalog of its own: this process's Spark keeps a catalog's first settings
            catalog_name=re.sub(r"\W", "_", f"lag_{name}_{len(tables)}"),
            warehouse=str(stack.run_dir / f"wh-{name}-{len(tables)}"),
            metrics_port=0,
            concurrent_tables=concurrency,
        ),
    )
    text = config_text(sink_config, tree)
    path = stack.run_dir / f"sink-{name}-{len(tables)}.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    log_name = f"sink-{name}-{len(tables)}"
    env = {"PYTHONPATH": tree} if tree else {}
    cmd = [sys.executable, "-m", "tidemark.cli", "sink", "--config", str(path)]
    pid = stack.start_process(log_name, cmd, env)
    alive = lambda: pid_alive(pid)  # noqa: E731
    print(f"{name}, {len(tables)} tables: the sink catches up", flush=True)
    warehouse = Path(sink_config.sink.warehouse)
    log = stack.run_dir / f"{log_name}.log"
    before = reconciled_ends(config, tables)
    wait("the first catch-up", lambda: merged_to(warehouse, before), 1200, alive, log)
    log_from = log.stat().st_size
    cpu_before = cpu_seconds(pid)
    writer = Writer(config, tables, args.rows, args.rate)
    started = time.time()
    writer.start()
    time.sleep(args.seconds)
    writer.stop()
    if writer.error is not None:
        raise RuntimeError(f"the writer failed: {writer.error}")
    wait_caught_up(config, timeout=600)
    after = reconciled_ends(config, tables)
    wait("the drain", lambda: merged_to(warehouse, after), 1200, alive, log)
    drained_s = time.time() - started - args.seconds
    cpu = cpu_seconds(pid) - cpu_before
    stack.stop_process(log_name)
    with open(log, "rb") as logged:
        logged.seek(log_from)
        merges = MERGED.findall(logged.read().decode(errors="replace"))
    lags = lag_of(sink_config, tables, writer.commits, started + args.warmup)
    changes = sum(1 for c in writer.commits if c[2] >= started + args.warmup) * writer.per_txn
    return {
        "variant": name,
        "tables": len(tables),
        "concurrent_tables": concurrency if not tree else 1,
        "changes_per_s": round(len(writer.commits) * writer.per_txn / args.seconds),
        "measured_changes": changes,
        "lag_s": lag_stats(lags),
        "merges": len(merges),
        "merge_seconds": lag_stats([float(s) for _rows, s in merges]),
        "rows_per_merge": lag_stats([float(r) for r, _s in merges]),
        "drained_after_s": round(drained_s, 1),
        "sink_cpu_s": round(cpu, 1),
    }


def lag_of(
    config: Config, tables: list[str], commits: list[tuple[int, str, float]], since: float
) -> list[float]:
    """Per measured commit, from its commit in PostgreSQL to the first snapshot of its table
    that holds its ``seq``."""
    spark = create_session(config)
    catalog = config.sink.catalog_name
    holding: dict[str, list[tuple[float, int]]] = {}
    for table in tables:
        path = f"{catalog}.public.{table}"
        spark.sql(f"REFRESH TABLE {path}")
        rows = spark.sql(
            f"SELECT snapshot_id, committed_at FROM {path}.snapshots ORDER BY committed_at"  # noqa: S608
        ).collect()
        found = []
        for row in rows:
            at = row["committed_at"].replace(tzinfo=dt.UTC).timestamp()
            if at < since - 5:
                continue
            query = f"SELECT max(seq) AS s FROM {path} VERSION AS OF {row['snapshot_id']}"  # noqa: S608
            found.append((at, int(spark.sql(query).collect()[0]["s"] or 0)))
        holding[table] = found
    lags = []
    for seq, table, at in commits:
        if at < since:
            continue
        first = next((t for t, top in holding[table] if top >= seq), None)
        if first is None:
            raise RuntimeError(f"{table}: seq {seq} is in no snapshot")
        lags.append(first - at)
    return lags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", default="10,50", help="table counts, comma-separated")
    parser.add_argument("--rows", type=int, default=2000, help="rows of each table")
    parser.add_argument("--rate", type=float, default=5000.0, help="changes a second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--concurrency", default="4", help="concurrent_tables, comma-separated")
    parser.add_argument("--before-tree", default="", help="a checkout whose sink runs too")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    results: list[dict[str, Any]] = []
    variants = [(f"scheduler-{c}", int(c), "") for c in args.concurrency.split(",")]
    if args.before_tree:
        variants.insert(0, ("before", 1, str(Path(args.before_tree).resolve())))
    # This process's Spark outlives each table count's stack, so its scratch space too
    # (a stack sets SPARK_LOCAL_DIRS in its own folder, removed after its count).
    scratch = Path(tempfile.mkdtemp(prefix="bench-sink-tables-spark-"))
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    try:
        for count in (int(n) for n in args.tables.split(",")):
            run_dir = Path(tempfile.mkdtemp(prefix="bench-sink-tables-"))
            tables = [f"bench_t{i:03d}" for i in range(count)]
            base = Config(
                processor=ProcessorConfig(
                    pipeline="benchtables",
                    input_pattern=r"^tidemark\.public\.bench_t[0-9]+$",
                    state_dir=str(run_dir / "state"),
                    web_port=free_port(),
                ),
                sink=SinkConfig(
                    catalog_name="lag",
                    topic_pattern=r"^tidemark\.reconciled\.public\.bench_t[0-9]+$",
                    trigger_interval_s=1.0,
                ),
            )
            stack = DevStack(run_dir, base)
            try:
                stack.up()
                config = stack.config
                with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
                    for table in tables:
                        ident = sql.Identifier(table)
                        conn.execute(
                            sql.SQL(
                                "CREATE TABLE {} (id int PRIMARY KEY, seq bigint, v text)"
                            ).format(ident)
                        )
                        conn.execute(
                            sql.SQL(
                                "INSERT INTO {} SELECT g, 0, 'v0' FROM generate_series(0, %s) g"
                            ).format(ident),
                            (args.rows - 1,),
                        )
                cmd = [
                    sys.executable,
                    "-m",
                    "tidemark.cli",
                    "process",
                    "--config",
                    str(stack.config_path),
                ]
                stack.start_process("processor", cmd)
                wait_caught_up(config, timeout=600)
                for name, concurrency, tree in variants:
                    results.append(
                        run_variant(stack, config, tables, name, concurrency, tree, args)
                    )
                    print(results[-1], flush=True)
            finally:
                stack.down()
                shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        stop_spark()  # this process's Spark serves every table count
        shutil.rmtree(scratch, ignore_errors=True)
    write_results("sink_tables", results, rate=args.rate, seconds=args.seconds, rows=args.rows)


if __name__ == "__main__":
    main()
