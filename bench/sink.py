"""The Spark sink: MERGE throughput against a plain append, and end-to-end lag, in one run.

Starts the embedded broker (Tansu) and PostgreSQL of the development stack in a
temporary folder, and Spark ``local[2]`` in this process (the sink's own
session, :func:`spark_sink.session.create_session`, a hadoop catalog in the
folder). Throughput: one reconciled topic of 3 partitions is loaded with
``--events`` changes over ``--keys`` keys, in the processor's exact output
format (Debezium JSON with schema, the ``tidemark`` block, a tombstone after
each delete; a key lives in one partition, ``id % 3``): the first change of a
key inserts it, later ones update it, or delete it one time in ten (a deleted
key comes back with an insert). Then, each in a fresh Iceberg table of its own,
on the same topic:

- ``merge-fresh-<B>``: Tidemark's sink (:class:`spark_sink.job.Sink`,
  ``max_records_per_partition`` B) merges every event into a new table,
  ``run_batch`` to the topic's end as ``tidemark sink --once`` does;
- ``merge-into-<P>-<B>``: the same into a table that already holds ``--prefill``
  rows (ids 0 to P-1; the changes' keys are spread over that range), written by
  one Spark ``INSERT INTO ... SELECT ... FROM range(P)`` first;
- ``append-ceiling-<B>``: the same batches read and decoded the same way
  (``Sink.batch_frame``), the ``__tidemark_*`` columns dropped, then a plain
  Iceberg append per batch: no newest-per-key, no MERGE (every record becomes a
  row, a delete one with its key only). What MERGE costs on top of read+decode.

Each reports seconds, events/s (changes; ``records`` counts the tombstones too),
batch durations and the data files each batch wrote (``added-data-files`` of its
snapshot, and ``deleted-data-files``: the files a copy-on-write MERGE rewrote),
and fails when the final table's row count or ``sum(qty)`` differs from what the
generator computed (newest wins, deletes applied). A short merge into a scratch
table warms the JVM up first.

End-to-end lag: Debezium (JSON), a ``tidemark process`` and a continuous
``tidemark sink`` (``trigger_interval_s`` 1, its own Spark) on the table
``bench_lag(id int primary key, seq bigint, v text)`` of ``--lag-rows`` rows.
A writer updates rows at ``--rate`` changes/s in transactions every 50 ms, each
setting a global increasing ``seq``; a prober in this process (its own Spark
session on the sink's warehouse) looks at the table's current snapshot every
``--probe-interval`` s (a metadata read) and, when it changed, runs ``REFRESH
TABLE`` and ``SELECT max(seq)`` at that snapshot: when each ``seq`` is first
visible in Iceberg. Lag p50/p95/max over the steady window (after a warm-up of
``--lag-warmup`` seconds), the rate achieved, and the sink's batches (from its
log and the table's snapshots). ``snapshot_lag_s`` is the same lag to the commit
time of the first snapshot holding each ``seq`` (read after the run), and
``reconciled_lag_s`` the part before the sink (Debezium and the processor), from
a consumer of the reconciled topic.

Prints a table and writes ``bench/results/sink.json`` (``--output-dir``: elsewhere).

    python bench/sink.py [--events N] [--keys K] [--batch-sizes B,B] [--prefill P]
                         [--lag-seconds S] [--rate R] [--only throughput|lag]
                         [--spark-conf KEY=VALUE] [--output-dir DIR] [--keep-dir]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

import results_file
from results_file import write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import psycopg  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from processor.events.json_codec import output_schema  # noqa: E402
from spark_sink.history import MERGE_ONLY  # noqa: E402
from spark_sink.job import Sink  # noqa: E402
from spark_sink.layout import resolve  # noqa: E402
from spark_sink.reader import plan, sample  # noqa: E402
from spark_sink.schema import Spec, union  # noqa: E402
from spark_sink.session import create_session  # noqa: E402
from spark_sink.writer import DELETED, OFFSET, OFFSETS_PROPERTY, TIME, Table  # noqa: E402
from tidemark.cli.verify import wait_caught_up  # noqa: E402
from tidemark.core.config import Config, ProcessorConfig, SinkConfig  # noqa: E402
from tidemark.core.kafka import client_config, ensure_topics, exact_end_offsets  # noqa: E402
from tidemark.core.ports import free_port  # noqa: E402
from tidemark.core.topics import output_topic  # noqa: E402
from tidemark.devstack.procs import pid_alive  # noqa: E402
from tidemark.devstack.stack import DevStack  # noqa: E402

PREFIX = "bench"
TOPIC = output_topic(PREFIX, f"{PREFIX}.public.items")
NAME = "public.items"  #: the table's name in ``sink.tables``
PARTITIONS = 3
DELETE_RATIO = 0.1
EPOCH_US = 1_700_000_000_000_000
#: The table's columns, as the sink plans them from the events' schema.
SPECS = [
    Spec("id", "bigint"),
    Spec("name", "string"),
    Spec("qty", "int"),
    Spec("amount", "double"),
    Spec("updated_at", "timestamp_ntz"),
]
KEYS = ["id"]
PREFILL = (
    "INSERT INTO {table} SELECT id, concat('customer-', lpad(CAST(id % 99991 AS STRING), 5, '0')), "
    "CAST(id % 1000 AS INT), id * 0.37, CAST(timestamp_micros({epoch} + id) AS TIMESTAMP_NTZ) "
    "FROM range({rows})"
)
LAG_TABLE = "bench_lag"
LAG_INTERVAL = 0.05
MERGED_LINE = re.compile(r"merged offsets .* \((\d+) rows\) in ([0-9.]+) s")

# -- the events: what the processor writes for Debezium JSON input -------------------

ROW_FIELDS: list[dict[str, Any]] = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "int32", "optional": True, "field": "qty"},
    {"type": "double", "optional": True, "field": "amount"},
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "version": 1,
        "field": "updated_at",
    },
]
SOURCE_FIELDS: list[dict[str, Any]] = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {
            "allowed": "true,first,first_in_data_collection,last_in_data_collection,last,"
            "false,incremental"
        },
        "default": "false",
        "field": "snapshot",
    },
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "int64", "optional": True, "field": "ts_us"},
    {"type": "int64", "optional": True, "field": "ts_ns"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]
#: Debezium's envelope schema (JsonConverter, schemas enabled) for ``bench.public.items``.
DEBEZIUM_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {
            "type": "struct",
            "fields": ROW_FIELDS,
            "optional": True,
            "name": "bench.public.items.Value",
            "field": field,
        }
        for field in ("before", "after")
    ]
    + [
        {
            "type": "struct",
            "fields": SOURCE_FIELDS,
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "version": 1,
            "field": "source",
        },
        {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": False, "field": "id"},
                {"type": "int64", "optional": False, "field": "total_order"},
                {"type": "int64", "optional": False, "field": "data_collection_order"},
            ],
            "optional": True,
            "name": "event.block",
            "version": 1,
            "field": "transaction",
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {"type": "int64", "optional": True, "field": "ts_us"},
        {"type": "int64", "optional": True, "field": "ts_ns"},
    ],
    "optional": False,
    "name": "bench.public.items.Envelope",
    "version": 2,
}
KEY_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "fields": [{"type": "int64", "optional": False, "field": "id"}],
    "optional": False,
    "name": "bench.public.items.Key",
}


@dataclasses.dataclass
class Loaded:
    """What the generator wrote, and what a table must hold after merging it all."""

    events: int = 0
    #: Records in the topic: the events and a tombstone per delete.
    records: int = 0
    ops: dict[str, int] = dataclasses.field(default_factory=lambda: {"c": 0, "u": 0, "d": 0})
    #: The newest row's ``qty`` of every live id.
    live: dict[int, int] = dataclasses.field(default_factory=dict)
    touched: set[int] = dataclasses.field(default_factory=set)
    value_bytes: int = 0
    payload_bytes: int = 0
    seconds: float = 0.0

    def expected(self, prefill: int) -> tuple[int, int]:
        """``(row count, sum(qty))`` of a table of ``prefill`` rows after every event."""
        live_qty = sum(self.live.values())
        if not prefill:
            return len(self.live), live_qty
        gone = len(self.touched) - len(self.live)
        before = sum(i % 1000 for i in range(prefill)) - sum(i % 1000 for i in self.touched)
        return prefill - gone, before + live_qty


def load(bootstrap: str, events: int, keys: int, stride: int, seed: int) -> Loaded:
    """Create the reconciled topic (compacted, as the processor does) and fill it."""
    ensure_topics(
        AdminClient({"bootstrap.servers": bootstrap}),
        {TOPIC: PARTITIONS},
        config={"cleanup.policy": "compact"},
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    def produce(partition: int, key: bytes, value: bytes | None) -> None:
        while True:
            try:
                producer.produce(TOPIC, value, key, partition, on_delivery=delivered)
                return
            except BufferError:
                producer.poll(0.05)

    value_head = (
        b'{"schema":'
        + orjson.dumps(output_schema(DEBEZIUM_SCHEMA, "debezium-upsert"))
        + b',"payload":'
    )
    key_head = b'{"schema":' + orjson.dumps(KEY_SCHEMA) + b',"payload":'
    rng = random.Random(seed)
    loaded = Loaded()
    rows: dict[int, dict[str, Any]] = {}
    input_offsets = [0] * PARTITIONS
    started = time.perf_counter()
    for i in range(events):
        key_id = rng.randrange(keys) * stride
        partition = key_id % PARTITIONS
        old = rows.get(key_id)
        ts_us = EPOCH_US + i * 1000
        after: dict[str, Any] | None
        if old is None:
            op = "c"
        elif rng.random() < DELETE_RATIO:
            op = "d"
        else:
            op = "u"
        if op == "d":
            after = None
            del rows[key_id]
            del loaded.live[key_id]
        else:
            after = {
                "id": key_id,
                "name": f"customer-{key_id % 99991:05d}",
                "qty": rng.randrange(1000),
                "amount": round(rng.random() * 10_000, 2),
                "updated_at": ts_us,
            }
            rows[key_id] = after
            loaded.live[key_id] = after["qty"]
        loaded.touched.add(key_id)
        loaded.ops[op] += 1
        lsn = 40_000_000 + i * 96
        offset = input_offsets[partition]
        input_offsets[partition] += 2 if op == "d" else 1  # Debezium's tombstone too
        payload = {
            "before": old,
            "after": after,
            "source": {
                "version": "3.6.3.Final",
                "connector": "postgresql",
                "name": PREFIX,
                "ts_ms": ts_us // 1000,
                "snapshot": "false",
                "db": "bench",
                "sequence": f'["{lsn - 48}","{lsn}"]',
                "ts_us": ts_us,
                "ts_ns": ts_us * 1000,
                "schema": "public",
                "table": "items",
                "txId": 900 + i,
                "lsn": lsn,
                "xmin": None,
            },
            "transaction": None,
            "op": op,
            "ts_ms": ts_us // 1000 + 3,
            "ts_us": ts_us + 3000,
            "ts_ns": (ts_us + 3000) * 1000,
            "tidemark": {
                "topic": f"{PREFIX}.public.items",
                "partition": partition,
                "offset": offset,
                "position": f"{lsn - 48},{lsn}",
                "envelope": "debezium-upsert",
                "reason": "applied",
            },
        }
        body = orjson.dumps(payload)
        value = value_head + body + b"}"
        key = key_head + b'{"id":%d}}' % key_id
        produce(partition, key, value)
        loaded.records += 1
        loaded.value_bytes += len(value)
        loaded.payload_bytes += len(body)
        if op == "d":
            produce(partition, key, None)
            loaded.records += 1
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("the producer did not deliver every record in time")
    if failures:
        raise RuntimeError(f"{len(failures)} records were not delivered: {failures[0]}")
    loaded.events = events
    loaded.seconds = time.perf_counter() - started
    return loaded


# -- measurements -----------------------------------------------------------------


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    """``{min, median, max}`` of ``values`` (zeros when empty)."""
    if not values:
        return {"min": 0, "median": 0, "max": 0}
    return {
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
    }


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values``, interpolated between ranks."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


class Lake:
    """Catalogs of this run: each measurement gets one (its own warehouse folder)."""

    def __init__(self, base: Config, root: Path, spark_conf: dict[str, str]) -> None:
        self.base, self.root, self.spark_conf = base, root, spark_conf
        self.spark: Any = None

    def config(self, catalog: str, batch: int) -> Config:
        sink = dataclasses.replace(
            self.base.sink,
            catalog_name=catalog,
            warehouse=str(self.root / catalog),
            topics=[TOPIC],
            topic_pattern="",
            max_records_per_partition=batch,
            metrics_port=0,
            spark_master="local[2]",
            spark_conf={**self.base.sink.spark_conf, **self.spark_conf},
        )
        return dataclasses.replace(self.base, sink=sink)

    def sink(self, catalog: str, batch: int) -> Sink:
        """A sink on a new catalog (the process's session learns it)."""
        config = self.config(catalog, batch)
        self.spark = create_session(config)
        return Sink(config, self.spark)

    def drop(self, catalog: str) -> None:
        shutil.rmtree(self.root / catalog, ignore_errors=True)


def snapshots(spark: Any, table: Table, since_wall: float = 0.0) -> list[dict[str, Any]]:
    """Summaries of the table's snapshots (committed at or after ``since_wall``), oldest first."""
    spark.sql(f"REFRESH TABLE {table.name}")
    rows = spark.sql(
        f"SELECT committed_at, operation, summary FROM {table.path}.snapshots "  # noqa: S608
        "ORDER BY committed_at"
    ).collect()
    found = []
    for row in rows:
        committed = row["committed_at"].replace(tzinfo=dt.UTC).timestamp()
        if committed >= since_wall:
            found.append(dict(row["summary"], operation=row["operation"]))
    return found


def file_counts(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    added = [float(s.get("added-data-files", 0)) for s in summaries]
    deleted = [float(s.get("deleted-data-files", 0)) for s in summaries]
    return {
        "files_per_batch": spread(added, 1),
        "rewritten_files_per_batch": spread(deleted, 1),
        "snapshots": len(summaries),
    }


def check(spark: Any, table: Table, what: str, count: int, qty: int | None) -> None:
    """Fail loudly when the table does not hold what the events say it must."""
    spark.sql(f"REFRESH TABLE {table.name}")
    row = spark.sql(f"SELECT count(*) AS n, sum(qty) AS q FROM {table.name}").collect()[0]  # noqa: S608
    found_qty = row["q"] or 0
    if row["n"] != count or (qty is not None and found_qty != qty):
        raise RuntimeError(
            f"{what}: the table holds {row['n']} rows (sum(qty) {found_qty}), "
            f"expected {count} rows" + (f" (sum(qty) {qty})" if qty is not None else "")
        )


def result(program: str, events: int, seconds: float, durations: list[float]) -> dict[str, Any]:
    return {
        "program": program,
        "events": events,
        "seconds": round(seconds, 2),
        "events_per_s": round(events / seconds) if seconds else 0,
        "batches": len(durations),
        "batch_seconds": spread(durations),
    }


def warm_up(lake: Lake) -> None:
    """One small batch into a scratch table: JIT, the Python workers, Iceberg's classes."""
    sink = lake.sink("warmup", 2_000)
    sink.run_batch(sink.ends())
    lake.drop("warmup")


def run_merge(lake: Lake, loaded: Loaded, batch: int, prefill: int) -> dict[str, Any]:
    """Tidemark's sink, ``run_batch`` to the topic's end, into a new or a prefilled table."""
    catalog = f"{'into' if prefill else 'fresh'}_{batch}"
    sink = lake.sink(catalog, batch)
    spark = lake.spark
    table = sink.table(TOPIC)
    extra: dict[str, Any] = {"batch_size": batch}
    if prefill:
        table.create(SPECS, KEYS, sink.config.sink.write_mode, resolve(sink.config.sink, NAME))
        started = time.perf_counter()
        spark.sql(PREFILL.format(table=table.name, epoch=EPOCH_US, rows=prefill))
        extra["prefill_rows"] = prefill
        extra["prefill_seconds"] = round(time.perf_counter() - started, 1)
        extra["prefill_files"] = int(snapshots(spark, table)[-1]["added-data-files"])
    targets = sink.ends()
    durations: list[float] = []
    started = end = time.perf_counter()
    while True:
        began = time.perf_counter()
        if not sink.run_batch(targets):
            break
        end = time.perf_counter()
        durations.append(end - began)
        print(f"  batch {len(durations)}: {durations[-1]:.1f} s", flush=True)
    if sink.stopped:
        raise RuntimeError(f"the sink stopped the table: {sink.stopped}")
    count, qty = loaded.expected(prefill)
    program = f"merge-into-{human(prefill)}-{batch}" if prefill else f"merge-fresh-{batch}"
    check(spark, table, program, count, qty)
    merged = [s for s in snapshots(spark, table) if OFFSETS_PROPERTY in s]
    lake.drop(catalog)
    return {
        **result(program, loaded.events, end - started, durations),
        "records": loaded.records,
        "rows": count,
        **file_counts(merged),
        **extra,
    }


def run_append(lake: Lake, loaded: Loaded, batch: int) -> dict[str, Any]:
    """The same batches, read and decoded the same way, appended: the ceiling of MERGE."""
    catalog = f"append_{batch}"
    sink = lake.sink(catalog, batch)
    spark = lake.spark
    table = sink.table(TOPIC)
    ends = sink.ends()[TOPIC]
    progress: dict[int, int] = {}
    durations: list[float] = []
    started = time.perf_counter()
    while ranges := plan(TOPIC, progress, ends, batch):
        began = time.perf_counter()
        specs, keys = sample(sink.context, ranges)
        planned = union(specs, TOPIC) or SPECS  # a sample of deletes only says nothing
        keys = keys or KEYS
        if not table.exists():
            table.create(
                planned, keys, sink.config.sink.write_mode, resolve(sink.config.sink, NAME)
            )
        frame = sink.batch_frame(ranges, planned, keys, MERGE_ONLY)
        frame.drop(OFFSET, DELETED, TIME).writeTo(table.path).append()
        progress.update({r.partition: r.end for r in ranges})
        durations.append(time.perf_counter() - began)
        print(f"  batch {len(durations)}: {durations[-1]:.1f} s", flush=True)
    seconds = time.perf_counter() - started
    program = f"append-ceiling-{batch}"
    check(spark, table, program, loaded.records, None)
    appended = snapshots(spark, table)
    lake.drop(catalog)
    return {
        **result(program, loaded.events, seconds, durations),
        "records": loaded.records,
        "rows": loaded.records,
        **file_counts(appended),
        "batch_size": batch,
    }


def human(n: int) -> str:
    """``1000000`` as ``1M``, ``20000`` as ``20k``."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


# -- end-to-end lag ----------------------------------------------------------------


class Writer:
    """Updates ``per_txn`` rows every 50 ms, each transaction with the next ``seq``."""

    def __init__(self, config: Config, rows: int, rate: float) -> None:
        self.config, self.rows = config, rows
        self.per_txn = max(1, min(rows, round(rate * LAG_INTERVAL)))
        #: ``(seq, monotonic commit time, rows)`` of every committed transaction.
        self.commits: list[tuple[int, float, int]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        query = f"UPDATE {LAG_TABLE} SET seq = %s, v = %s WHERE id = ANY(%s)"  # noqa: S608
        try:
            with psycopg.connect(**self.config.owner_conninfo()) as conn:
                started = time.monotonic()
                seq = 0
                while not self._stop.is_set():
                    seq += 1
                    first = (seq - 1) * self.per_txn
                    ids = [(first + j) % self.rows for j in range(self.per_txn)]
                    with conn.transaction():
                        conn.execute(query, (seq, f"v{seq}", ids))
                    self.commits.append((seq, time.monotonic(), len(ids)))
                    self._stop.wait(max(0.0, started + seq * LAG_INTERVAL - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


def wait_healthy(config: Config, pid: int, log: Path, timeout: float = 120) -> None:
    url = f"http://127.0.0.1:{config.processor.web_port}/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            raise RuntimeError(f"the processor exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if orjson.loads(resp.read()).get("status") == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the processor did not become healthy")


class Tail:
    """Notes when each ``seq`` first shows in the reconciled topic: the processor's share."""

    SEQ = re.compile(rb'"after":\{[^}]*"seq":(\d+)')

    def __init__(self, config: Config, topic: str) -> None:
        self.config, self.topic = config, topic
        #: ``(monotonic time, highest seq so far)`` whenever it rose.
        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-tail", daemon=True)

    def start(self) -> None:
        consumer = Consumer(
            client_config(self.config.kafka, **{"group.id": "bench-tail", "log_level": 3})
        )
        count = len(consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions)
        tps = [TopicPartition(self.topic, p) for p in range(count)]
        ends = exact_end_offsets(consumer, tps)
        consumer.assign(
            [TopicPartition(self.topic, p, ends[(self.topic, p)]) for p in range(count)]
        )
        self._consumer = consumer
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        best = 0
        try:
            while not self._stop.is_set():
                for msg in self._consumer.consume(1000, 0.05):
                    value = msg.value() if msg.error() is None else None
                    found = self.SEQ.search(value) if value else None
                    if found and int(found.group(1)) > best:
                        best = int(found.group(1))
                        self.seen.append((time.monotonic(), best))
        finally:
            self._consumer.close()


def first_seen(commits: list[tuple[int, float, int]], seen: list[tuple[float, int]]) -> list[float]:
    """Per commit, the first time in ``seen`` (times with the highest seq so far) that covers it;
    ``inf`` when none does."""
    times, at = [], 0
    for seq, _committed, _rows in commits:
        while at < len(seen) and seen[at][1] < seq:
            at += 1
        times.append(seen[at][0] if at < len(seen) else float("inf"))
    return times


def lag_stats(lags: list[float]) -> dict[str, float | None]:
    if not lags:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(percentile(lags, 0.5), 2),
        "p95": round(percentile(lags, 0.95), 2),
        "max": round(max(lags), 2),
    }


def run_lag(stack: DevStack, args: argparse.Namespace) -> dict[str, Any]:
    """Debezium, the processor and a continuous sink under ``args.rate`` changes/s."""
    config = stack.config
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {LAG_TABLE} (id int PRIMARY KEY, seq bigint, v text)")
        conn.execute(
            f"INSERT INTO {LAG_TABLE} SELECT g, 0, 'v0' FROM generate_series(0, %s) g",  # noqa: S608
            (args.lag_rows - 1,),
        )
    print("starting Debezium, the processor and the sink", flush=True)
    stack.start_debezium()
    cli = [sys.executable, "-m", "tidemark.cli"]
    processor = stack.start_process(
        "benchlag-processor", [*cli, "process", "--config", str(stack.config_path)]
    )
    wait_healthy(config, processor, stack.run_dir / "benchlag-processor.log")
    wait_caught_up(config)
    sink_log = stack.run_dir / "benchlag-sink.log"
    sink_pid = stack.start_process(
        "benchlag-sink", [*cli, "sink", "--config", str(stack.config_path)]
    )
    spark = create_session(config)
    path = f"{config.sink.catalog_name}.public.{LAG_TABLE}"
    table = Table(spark, config.sink.catalog_name, "public", LAG_TABLE, False)
    probe_seconds: list[float] = []

    def probe(snapshot: int | None = None) -> tuple[int, int]:
        """``(rows, max(seq))`` of the table (at ``snapshot``)."""
        spark.sql(f"REFRESH TABLE {path}")
        began = time.monotonic()
        version = f" VERSION AS OF {snapshot}" if snapshot is not None else ""
        query = f"SELECT count(*) AS n, max(seq) AS s FROM {path}{version}"  # noqa: S608
        row = spark.sql(query).collect()[0]
        probe_seconds.append(time.monotonic() - began)
        return row["n"], row["s"] or 0

    metadata = Path(config.sink.warehouse) / "public" / LAG_TABLE / "metadata"

    def ready() -> bool:
        """Whether the sink merged the prefilled rows (no catalog lookup before the table
        is there: Iceberg logs a stack trace for a missing table)."""
        if not pid_alive(sink_pid):
            raise RuntimeError(f"the sink exited: {sink_log.read_text()[-3000:]}")
        if not (metadata.is_dir() and any(metadata.glob("*.metadata.json"))):
            return False
        return table.exists() and probe()[0] == args.lag_rows

    deadline = time.monotonic() + 300
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError("the sink did not merge the prefilled rows in time")
        time.sleep(1)
    iceberg = table.iceberg()
    current = [iceberg.currentSnapshot().snapshotId()]
    probes: list[tuple[float, int]] = []

    def poll() -> None:
        """Query the table when it has a new snapshot (a metadata read between them: the
        prober's Spark jobs would compete with the sink for the cores)."""
        if not pid_alive(sink_pid):
            raise RuntimeError(f"the sink exited: {sink_log.read_text()[-3000:]}")
        iceberg.refresh()
        snapshot = iceberg.currentSnapshot().snapshotId()
        if snapshot != current[0]:
            at = time.monotonic()
            current[0] = snapshot
            probes.append((at, probe(snapshot)[1]))
        time.sleep(args.probe_interval)

    print(f"writing {args.rate:.0f} changes/s for {args.lag_seconds:.0f} s", flush=True)
    probe_seconds.clear()
    tail = Tail(config, config.sink.topics[0])
    writer = Writer(config, args.lag_rows, args.rate)
    tail.start()
    try:
        log_from = sink_log.stat().st_size
        wall_start = time.time()
        start = time.monotonic()
        writer.start()
        try:
            while time.monotonic() - start < args.lag_seconds:
                if writer.error is not None:
                    raise RuntimeError(f"the writer failed: {writer.error}")
                poll()
        finally:
            writer.stop()
        end = time.monotonic()
        last = writer.commits[-1][0] if writer.commits else 0
        drain = time.monotonic() + 180
        while (not probes or probes[-1][1] < last) and time.monotonic() < drain:
            poll()
    finally:
        tail.stop()
    if not probes or probes[-1][1] < last:
        raise RuntimeError(f"seq {last} was not visible 180 s after the writer stopped")
    window_start = start + args.lag_warmup
    steady = [c for c in writer.commits if c[1] >= window_start]
    lags = [t - c[1] for c, t in zip(steady, first_seen(steady, probes), strict=True)]
    # the same from the commit times of the table's snapshots (no probe delay)
    mono = start - wall_start
    committed = []
    for row in spark.sql(
        f"SELECT snapshot_id, committed_at FROM {path}.snapshots ORDER BY committed_at"  # noqa: S608
    ).collect():
        at = row["committed_at"].replace(tzinfo=dt.UTC).timestamp()
        if at >= wall_start:
            query = f"SELECT max(seq) AS s FROM {path} VERSION AS OF {row['snapshot_id']}"  # noqa: S608
            committed.append((at + mono, spark.sql(query).collect()[0]["s"] or 0))
    commit_lags = [t - c[1] for c, t in zip(steady, first_seen(steady, committed), strict=True)]
    topic_lags = [
        t - c[1] for c, t in zip(steady, first_seen(steady, tail.seen), strict=True) if t < 1e300
    ]
    changes = sum(rows for _seq, _at, rows in steady)
    window = end - window_start
    with open(sink_log, "rb") as text:
        text.seek(log_from)
        batches = MERGED_LINE.findall(text.read().decode(errors="replace"))
    durations = [float(s) for _rows, s in batches]
    summaries = [s for s in snapshots(spark, table, wall_start) if OFFSETS_PROPERTY in s]
    rate = changes / window if window > 0 else 0.0
    # SIGTERM to the driver only (the stack's stop signals the whole group, the JVM too,
    # under the driver's feet), then the rest of its group
    os.kill(sink_pid, signal.SIGTERM)
    deadline = time.monotonic() + 120
    while pid_alive(sink_pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(sink_pid, os.WNOHANG)
        time.sleep(0.2)
    stack.stop_process("benchlag-sink")
    stack.stop_process("benchlag-processor")
    return {
        **result("end-to-end-lag", changes, window, durations),
        "changes_per_s": round(rate),
        "target_changes_per_s": args.rate,
        "transactions": len(steady),
        "rows_per_transaction": writer.per_txn,
        "lag_s": lag_stats(lags),
        # from the commit in PostgreSQL to the commit time of the first Iceberg snapshot
        # holding it (what lag_s measures, without the prober's delay)
        "snapshot_lag_s": lag_stats(commit_lags),
        # from the commit in PostgreSQL to the reconciled topic (Debezium and the processor)
        "reconciled_lag_s": lag_stats(topic_lags),
        "probe_seconds": spread(probe_seconds),
        "rows_per_batch": spread([float(r) for r, _s in batches], 0),
        **file_counts(summaries),
        "table_rows": args.lag_rows,
        "trigger_interval_s": config.sink.trigger_interval_s,
        "warmup_s": args.lag_warmup,
    }


# -- the run ------------------------------------------------------------------------


def stop_spark() -> None:
    """Stop this process's Spark, if it runs: py4j's callback server, the context, then the
    JVM that PySpark started, by its pid."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    with contextlib.suppress(Exception):
        gateway.shutdown_callback_server()
    context = SparkContext._active_spark_context
    if context is not None:
        with contextlib.suppress(Exception):
            context.stop()
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except Exception:  # noqa: BLE001 - then it is killed
            proc.kill()
            proc.wait(5)


def _interrupt(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument(
        "--batch-sizes",
        default="50000,200000",
        help="max_records_per_partition of each run, comma-separated",
    )
    parser.add_argument("--prefill", type=int, default=1_000_000, help="rows of merge-into")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lag-seconds", type=float, default=60.0)
    parser.add_argument("--lag-warmup", type=float, default=None, help="default: min(10, S/3)")
    parser.add_argument("--rate", type=float, default=5000.0, help="changes/s of the lag run")
    parser.add_argument("--lag-rows", type=int, default=20_000)
    parser.add_argument(
        "--probe-interval", type=float, default=0.1, help="seconds between the prober's looks"
    )
    parser.add_argument("--only", choices=["throughput", "lag"], default=None)
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark setting of every sink (sink.spark_conf), repeatable",
    )
    parser.add_argument("--output-dir", default=None, help="write sink.json there instead")
    parser.add_argument("--keep-dir", action="store_true", help="keep the run's folder (logs)")
    args = parser.parse_args()
    batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    if args.lag_warmup is None:
        args.lag_warmup = min(10.0, args.lag_seconds / 3)
    if args.keys > args.prefill:
        parser.error("--keys must not exceed --prefill (the keys fall inside the prefilled ids)")
    spark_conf = dict(item.split("=", 1) for item in args.spark_conf)

    run_dir = Path(tempfile.mkdtemp(prefix="bench-sink-"))
    base = Config(
        processor=ProcessorConfig(
            pipeline="benchlag",
            input_pattern=rf"^tidemark\.public\.{LAG_TABLE}$",
            state_dir=str(run_dir / "benchlag-state"),
            web_port=free_port(),
        ),
        sink=SinkConfig(
            catalog_name="lag",
            warehouse=str(run_dir / "lag-warehouse"),
            topics=[output_topic("tidemark", f"tidemark.public.{LAG_TABLE}")],
            topic_pattern="",
            trigger_interval_s=1.0,
            metrics_port=0,
            spark_conf=spark_conf,
        ),
    )
    stack = DevStack(run_dir, base)
    results: list[dict[str, Any]] = []
    params: dict[str, Any] = {
        "events": args.events,
        "keys": args.keys,
        "batch_sizes": batch_sizes,
        "prefill": args.prefill,
        "lag_seconds": args.lag_seconds,
        "rate": args.rate,
        "spark_master": "local[2]",
    }
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        print(f"starting the broker and PostgreSQL in {run_dir}", flush=True)
        stack.start_infrastructure()
        bootstrap = stack.config.kafka.bootstrap_servers
        if args.only != "lag":
            stride = max(1, args.prefill // args.keys)
            print(
                f"loading {args.events:,} events over {args.keys:,} keys into {TOPIC}", flush=True
            )
            loaded = load(bootstrap, args.events, args.keys, stride, args.seed)
            print(
                f"loaded {loaded.records:,} records ({loaded.ops}) in {loaded.seconds:.1f} s, "
                f"values {loaded.value_bytes / loaded.events:.0f} bytes "
                f"(payload {loaded.payload_bytes / loaded.events:.0f})",
                flush=True,
            )
            params.update(
                records=loaded.records,
                ops=loaded.ops,
                live_keys=len(loaded.live),
                value_bytes=round(loaded.value_bytes / loaded.events),
                payload_bytes=round(loaded.payload_bytes / loaded.events),
                key_stride=stride,
            )
            lake = Lake(stack.config, run_dir / "warehouse", spark_conf)
            print("warming up", flush=True)
            warm_up(lake)
            for batch in batch_sizes:
                for kind in ("fresh", "into", "append"):
                    if kind == "append":
                        print(f"append-ceiling-{batch}:", flush=True)
                        done = run_append(lake, loaded, batch)
                    else:
                        prefill = args.prefill if kind == "into" else 0
                        label = f"into-{human(prefill)}" if prefill else "fresh"
                        print(f"merge-{label}-{batch}:", flush=True)
                        done = run_merge(lake, loaded, batch, prefill)
                    results.append(done)
                    print(
                        f"  {done['events_per_s']:,} events/s in {done['seconds']:.1f} s",
                        flush=True,
                    )
            with contextlib.suppress(KafkaException, Exception):  # frees the broker's memory
                futures = AdminClient({"bootstrap.servers": bootstrap}).delete_topics([TOPIC])
                futures[TOPIC].result(30)
        if args.only != "throughput" and args.lag_seconds > 0:
            results.append(run_lag(stack, args))
    finally:
        signal.signal(signal.SIGTERM, previous)
        stack.down()
        stop_spark()
        if args.keep_dir:
            print(f"kept {run_dir}", flush=True)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    print_table(results)
    if args.output_dir:
        results_file.RESULTS = Path(args.output_dir)
    write_results("sink", results, **params)


def print_table(results: list[dict[str, Any]]) -> None:
    print(
        f"\n{'program':<28}{'events':>10}{'seconds':>9}{'events/s':>10}{'batches':>8}"
        f"{'batch s min/med/max':>22}{'files/batch':>14}  lag s p50/p95/max"
    )
    for r in results:
        b, f = r["batch_seconds"], r["files_per_batch"]
        lag = r.get("lag_s")
        print(
            f"{r['program']:<28}{r['events']:>10,}{r['seconds']:>9.1f}{r['events_per_s']:>10,}"
            f"{r['batches']:>8}{b['min']:>8.1f}/{b['median']:.1f}/{b['max']:<6.1f}"
            f"{f['min']:>6.0f}/{f['median']:.0f}/{f['max']:<4.0f}"
            + (f"  {lag['p50']}/{lag['p95']}/{lag['max']}" if lag else ""),
            flush=True,
        )
        if "reconciled_lag_s" in r:
            topic, snap = r["reconciled_lag_s"], r["snapshot_lag_s"]
            print(
                f"  {r['changes_per_s']:,} changes/s (target {r['target_changes_per_s']:,.0f}); "
                f"lag to the reconciled topic p50/p95/max {topic['p50']}/{topic['p95']}/"
                f"{topic['max']} s; to the snapshot's commit {snap['p50']}/{snap['p95']}/"
                f"{snap['max']} s; probe {r['probe_seconds']['median']} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
