"""Envelope throughput against Python peers, on one broker, in one run.

Starts the embedded broker (Tansu) and a schema registry (the dev stack's),
loads topics with Debezium-like events of about 500 bytes, in JSON and in Avro
(Confluent wire format), then runs each program in a process of its own, one
after another, on the same data:

- ``plain-loop`` / ``plain-loop-avro``: confluent-kafka ``consume(5000)``,
  decode (orjson; Avro with the fastest reader there is, Tidemark's compiled one),
  take ``after``, encode, produce: no state, no guarantees (the ceiling);
- ``quix-streams``: Quix Streams 3.28 stateless ``apply`` + ``to_topic`` (its
  own virtualenv, ``.venv-quix``: it pins an older confluent-kafka);
- ``faust``: a Faust agent, ``take_events(5000)`` batches, ``send_soon``;
- ``tidemark-<envelope>[-avro]``: Tidemark's data plane with RocksDB state, the
  changelog and the commit protocol, for ``upsert`` (flat rows),
  ``debezium-upsert`` and ``debezium``; ``...-general``: the same with
  ``processor.fused_paths`` off (every event decoded, then decided by its envelope's
  rule), which is what the fused paths buy.

Each program is measured from its first consumed message until every event is
processed, produced and (for Tidemark) committed: events/s, CPU-seconds of its
process (all threads) per million events, and its peak resident memory (VmHWM).
``debezium-upsert`` also runs on JSON events one in a hundred of which carries the
placeholder of an unchanged TOASTed column (the general path fills it from state; the
fused path takes the rest). ``debezium`` and ``debezium-upsert`` also run over ten
times as many keys: the
classic envelope's state stays one mark per partition, so neither its memory
nor its state on disk grows with the key count. Prints a table and writes
``bench/results/envelopes.json``.

    python bench/envelopes.py [--events N] [--keys K] [--only PROGRAM ...] [--results NAME]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import struct
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
QUIX_PYTHON = ROOT / ".venv-quix" / "bin" / "python"
PARTITIONS = 3
BATCH = 5000

ROW_FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": ["null", "string"], "default": None},
    {"name": "status", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": ["null", "double"], "default": None},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "updated_at", "type": ["null", "long"], "default": None},
]
ROW_SCHEMA = {
    "type": "record",
    "name": "Value",
    "namespace": "bench.public.items",
    "fields": ROW_FIELDS,
}
SOURCE_SCHEMA = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": ["string", "null"], "default": "false"},
        {"name": "db", "type": "string"},
        {"name": "sequence", "type": ["null", "string"], "default": None},
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": None},
        {"name": "lsn", "type": ["null", "long"], "default": None},
    ],
}
VALUE_SCHEMA = {
    "type": "record",
    "name": "Envelope",
    "namespace": "bench.public.items",
    "fields": [
        {"name": "before", "type": ["null", ROW_SCHEMA], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": SOURCE_SCHEMA},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}
KEY_SCHEMA = {
    "type": "record",
    "name": "Key",
    "namespace": "bench.public.items",
    "fields": [{"name": "id", "type": "long"}],
}


_CONNECT_TYPES = {"long": "int64", "string": "string", "double": "double"}


def connect_schema(avro: Any, field: str | None = None, optional: bool = False) -> dict[str, Any]:
    """The Kafka Connect JSON schema (as ``JsonConverter`` writes it) of an Avro type of the
    benchmark's schemas."""
    if isinstance(avro, list):  # a union with null
        kind = next(t for t in avro if t != "null")
        return connect_schema(ROW_SCHEMA if kind == "Value" else kind, field, "null" in avro)
    spec: dict[str, Any]
    if isinstance(avro, dict):
        fields = [connect_schema(f["type"], f["name"]) for f in avro["fields"]]
        spec = {"type": "struct", "fields": fields, "optional": optional}
        spec["name"] = f"{avro.get('namespace', 'bench')}.{avro['name']}"
    else:
        spec = {"type": _CONNECT_TYPES[avro], "optional": optional}
    if field is not None:
        spec["field"] = field
    return spec


#: What Debezium's JsonConverter with schemas enabled writes before each payload.
CONNECT_VALUE_SCHEMA = connect_schema(VALUE_SCHEMA)
CONNECT_KEY_SCHEMA = connect_schema(KEY_SCHEMA)

# -- the data ------------------------------------------------------------------

#: What each format's topic holds: a program pairs with the plain loop of its input.
INPUTS = {
    "json": "debezium-json-schemaless",
    "json-schema": "debezium-json-schema",
    "json-toast": "debezium-json-schemaless-toast",
    "flat": "flat-json",
    "avro": "debezium-avro",
    "avro-flat": "flat-avro",
}


def debezium_event(i: int, key: int) -> dict[str, Any]:
    """A Debezium update of about 500 bytes in JSON (``REPLICA IDENTITY FULL``)."""
    row = {
        "id": key,
        "customer": f"customer-{key % 997:04d}",
        "status": ("new", "paid", "shipped")[i % 3],
        "amount": round(i * 0.37, 2),
        "note": "x" * 16,
        "updated_at": 1_700_000_000_000 + i,
    }
    return {
        "before": dict(row, status="new", amount=0.0),
        "after": row,
        "source": {
            "version": "3.6.3.Final",
            "connector": "postgresql",
            "name": "bench",
            "ts_ms": 1_700_000_000_000 + i,
            "snapshot": "false",
            "db": "bench",
            "sequence": f'["{1000 + i * 2}","{1001 + i * 2}"]',
            "schema": "public",
            "table": "items",
            "txId": 700 + i,
            "lsn": 1001 + i * 2,
        },
        "op": "u",
        "ts_ms": 1_700_000_000_000 + i,
    }


def load(bootstrap: str, topic: str, events: int, keys: int, fmt: str, ids: dict[str, int]) -> None:
    """Create ``topic`` and fill it; keys hash to partitions like Debezium's producer.

    ``fmt``: ``json`` (Debezium envelope), ``json-toast`` (the same, with one update in
    a hundred carrying Debezium's placeholder for an unchanged TOASTed column, once
    every key has a row), ``json-schema`` (the same with the schema
    JsonConverter writes), ``flat`` (JSON rows for ``upsert``),
    ``avro`` (envelope) or ``avro-flat`` (rows), Avro framed with ``ids``.
    """
    import fastavro
    import orjson
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from processor.events.change import TOAST_PLACEHOLDER
    from tidemark.core.kafka import ensure_topics

    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), {topic: PARTITIONS})
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    parsed = {
        "key": fastavro.parse_schema(KEY_SCHEMA, {}),
        "value": fastavro.parse_schema(VALUE_SCHEMA, {}),
        "row": fastavro.parse_schema(ROW_SCHEMA, {}),
    }

    def avro(kind: str, schema_id: int, datum: Any) -> bytes:
        out = io.BytesIO()
        out.write(struct.pack(">bI", 0, schema_id))
        fastavro.schemaless_writer(out, parsed[kind], datum)
        return out.getvalue()

    for i in range(events):
        key = i % keys
        event = debezium_event(i, key)
        if fmt == "json-toast" and i >= keys and i % 100 == 50:
            event["after"]["note"] = TOAST_PLACEHOLDER
        if fmt in ("json", "json-toast"):
            value, raw_key = orjson.dumps(event), orjson.dumps({"id": key})
        elif fmt == "json-schema":
            value = orjson.dumps({"schema": CONNECT_VALUE_SCHEMA, "payload": event})
            raw_key = orjson.dumps({"schema": CONNECT_KEY_SCHEMA, "payload": {"id": key}})
        elif fmt == "flat":
            value, raw_key = orjson.dumps(event["after"]), orjson.dumps({"id": key})
        elif fmt == "avro":
            value, raw_key = (
                avro("value", ids["value"], event),
                avro("key", ids["key"], {"id": key}),
            )
        else:
            value = avro("row", ids["row"], event["after"])
            raw_key = avro("key", ids["key"], {"id": key})
        while True:
            try:
                producer.produce(topic, value=value, key=raw_key)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


# -- the programs (each runs in a child process) ----------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM; getrusage would count the parent's)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Window:
    """From the first message to the last: wall seconds and process CPU seconds."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def start(self) -> None:
        if not self.wall:
            self.wall, self.cpu = time.perf_counter(), time.process_time()

    def result(self, events: int, **extra: Any) -> dict[str, Any]:
        seconds = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        return {
            "events": events,
            "seconds": seconds,
            "cpu_s": cpu,
            "peak_rss_mb": peak_rss_mb(),
            **extra,
        }


def plain_loop(bootstrap: str, topic: str, events: int, registry: str) -> dict[str, Any]:
    import fastavro
    import orjson
    from confluent_kafka import Consumer, Producer

    from tidemark.core.avro_read import read
    from tidemark.core.schema_registry import HttpRegistry, SchemaCache

    schemas = SchemaCache(HttpRegistry(registry))
    row = fastavro.parse_schema(ROW_SCHEMA, {})
    consumer = Consumer(_consumer_settings(bootstrap, f"plain-{os.getpid()}"))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    consumer.subscribe([topic])
    window, seen = Window(), 0
    out = topic + ".out"
    while seen < events:
        for msg in consumer.consume(BATCH, 0.5):
            if msg.error():
                continue
            window.start()
            value = msg.value()
            assert value is not None
            # One parse and one write of the row: a Debezium envelope's ``after``, or a
            # flat row itself (the input of ``upsert``).
            if value[:1] == b"\x00":  # decode with the registry's schema, write the row
                writer = schemas.get(struct.unpack_from(">I", value, 1)[0])[1]
                # The fastest reader there is: Tidemark's compiled one (fastavro's values).
                record = read(writer, value, 5)[0]
                body = io.BytesIO()
                body.write(value[:5])
                fastavro.schemaless_writer(body, row, record.get("after", record))
                encoded = body.getvalue()
            else:
                record = orjson.loads(value)
                record = record.get("payload", record)  # schemas enabled
                encoded = orjson.dumps(record.get("after", record))
            while True:
                try:
                    producer.produce(out, encoded, msg.key(), partition=msg.partition())
                    break
                except BufferError:
                    producer.poll(0.05)
            seen += 1
        producer.poll(0)
    producer.flush(60)
    result = window.result(seen)
    consumer.close()
    return result


def faust_agent(bootstrap: str, topic: str, events: int) -> dict[str, Any]:
    import faust
    import orjson

    datadir = tempfile.mkdtemp(prefix="bench-faust-")
    app = faust.App(
        f"bench-faust-{os.getpid()}",
        broker=f"kafka://{bootstrap}",
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_max_poll_interval=10.0,
        consumer_auto_offset_reset="earliest",
        topic_partitions=PARTITIONS,
        datadir=datadir,
    )
    source = app.topic(topic, value_serializer="raw", key_serializer="raw")
    sink = app.topic(topic + ".faust", value_serializer="raw", key_serializer="raw")
    window, state = Window(), {"seen": 0}

    @app.agent(source)
    async def passthrough(stream: Any) -> None:
        async for batch in stream.take_events(BATCH, within=0.5):
            window.start()
            for event in batch:
                after = orjson.loads(event.value)["after"]
                sink.send_soon(key=event.key, value=orjson.dumps(after))
            state["seen"] += len(batch)
            if state["seen"] >= events:
                await app.producer.flush()
                result = window.result(state["seen"])
                os.write(1, b"\n" + json.dumps(result).encode() + b"\n")  # Faust redirects print
                shutil.rmtree(datadir, ignore_errors=True)  # os._exit runs no cleanup
                os._exit(0)

    faust.Worker(app, loglevel="warning", quiet=True).execute_from_commandline()
    return {}


def tidemark(
    bootstrap: str, topic: str, events: int, envelope: str, registry: str, fused: bool
) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    from processor import metrics
    from processor.dataplane.loop import DataPlane
    from state.rocksdb import RocksDBBackend
    from tidemark.core.config import load_config

    state_dir = tempfile.mkdtemp(prefix="bench-tidemark-")
    pipeline = f"bench{os.getpid()}"
    config = load_config(
        None,
        {
            "TIDEMARK_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "TIDEMARK_KAFKA__SCHEMA_REGISTRY_URL": registry,
            "TIDEMARK_SOURCE__TOPIC_PREFIX": "bench",
            "TIDEMARK_PROCESSOR__PIPELINE": pipeline,
            "TIDEMARK_PROCESSOR__ENVELOPE": envelope,
            "TIDEMARK_PROCESSOR__INPUT_PATTERN": f"^{topic}$",
            "TIDEMARK_PROCESSOR__FUSED_PATHS": "true" if fused else "false",
        },
    )
    plane = DataPlane(
        config,
        RocksDBBackend(
            state_dir,
            config.processor.state_cache_mb << 20,
            config.processor.state_memory_mb << 20,
        ),
    )
    thread = threading.Thread(target=plane.run, daemon=True)
    thread.start()
    probe = Consumer(_consumer_settings(bootstrap, plane.group))
    window = Window()
    counter = metrics.EVENTS_IN.labels(topic)
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    while True:
        if counter._value.get() > 0:  # noqa: SLF001 - reading our own counter
            window.start()
        if window.wall and counter._value.get() >= events:  # noqa: SLF001
            committed = probe.committed(partitions, timeout=10)
            if sum(max(tp.offset, 0) for tp in committed) >= events:
                break
        if plane.failure is not None:
            raise RuntimeError(f"data plane failed: {plane.failure}")
        time.sleep(0.005)
    result = window.result(events)
    plane.stop()
    thread.join(30)
    probe.close()
    # Measured once the data plane has closed its stores: commits skip RocksDB's
    # write-ahead log, so until then recent state lives in memtables, not on disk.
    result["state_mb"] = _size_mb(Path(state_dir))
    shutil.rmtree(state_dir, ignore_errors=True)
    return result


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def _consumer_settings(bootstrap: str, group: str) -> dict[str, Any]:
    """The plain loop reads with the data plane's fetch settings (a fair ceiling)."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "max.poll.interval.ms": 10000,
        "heartbeat.interval.ms": 1000,
        "fetch.wait.max.ms": 50,
    }


QUIX_PROGRAM = r"""
import json, shutil, sys, tempfile, time
import orjson
from quixstreams import Application

def peak_rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

bootstrap, topic, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
state_dir = tempfile.mkdtemp(prefix="bench-quix-")
app = Application(broker_address=bootstrap, consumer_group=f"bench-quix-{time.time_ns()}",
                  auto_offset_reset="earliest", loglevel="WARNING", state_dir=state_dir)
source = app.topic(topic, value_deserializer="bytes", key_deserializer="bytes")
sink = app.topic(topic + ".quix", value_serializer="bytes", key_serializer="bytes")
state = {"seen": 0, "wall": 0.0, "cpu": 0.0}

def passthrough(value):
    if not state["wall"]:
        state["wall"], state["cpu"] = time.perf_counter(), time.process_time()
    state["seen"] += 1
    if state["seen"] >= events:
        app.stop()
    return orjson.dumps(orjson.loads(value)["after"])

sdf = app.dataframe(source).apply(passthrough).to_topic(sink)
app.run()
shutil.rmtree(state_dir, ignore_errors=True)
print(json.dumps({"events": state["seen"], "seconds": time.perf_counter() - state["wall"],
                  "cpu_s": time.process_time() - state["cpu"], "peak_rss_mb": peak_rss_mb()}))
"""


# -- orchestration ------------------------------------------------------------------


def child(program: str, bootstrap: str, topic: str, events: int, registry: str) -> None:
    if program.startswith("plain-loop"):
        result = plain_loop(bootstrap, topic, events, registry)
    elif program == "faust":
        faust_agent(bootstrap, topic, events)
        return
    else:
        general = program.endswith("-general")
        envelope = program.removeprefix("tidemark-").removesuffix("-general")
        envelope = envelope.removesuffix("-avro")
        result = tidemark(bootstrap, topic, events, envelope, registry, not general)
    print(json.dumps(result), flush=True)


def measure(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Run one program in its own process; its last JSON line on stdout is its result."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise RuntimeError(f"{cmd} did not finish in {timeout:.0f} s: {err[-2000:]}") from None
    lines = [line[line.index("{") :] for line in out.splitlines() if '{"events"' in line]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {err[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--faust-events", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per program (median kept)")
    parser.add_argument("--only", nargs="+", metavar="PROGRAM", help="run only these programs")
    parser.add_argument(
        "--results", default="envelopes", help="bench/results/<name>.json (default: envelopes)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--registry", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.bootstrap, args.topic, args.events, args.registry)
        return

    from tidemark.core.schema_registry import HttpRegistry
    from tidemark.devstack import broker
    from tidemark.devstack.procs import stop_pid
    from tidemark.devstack.registry import make_server

    run_dir = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    pid, port = broker.start_broker(run_dir)
    server = make_server(0, None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    registry = f"http://127.0.0.1:{server.server_address[1]}"
    bootstrap = f"127.0.0.1:{port}"
    n, keys = args.events, args.keys
    results = []
    try:
        client = HttpRegistry(registry)
        ids = {
            "key": client.register("bench-key", json.dumps(KEY_SCHEMA)),
            "value": client.register("bench-value", json.dumps(VALUE_SCHEMA)),
            "row": client.register("bench-row", json.dumps(ROW_SCHEMA)),
        }
        print(f"broker {bootstrap}, registry {registry}; {n:,} events over {keys:,} keys per topic")
        topics = {  # (topic, format, events, keys)
            "json": ("bench.public.items", "json", n, keys),
            "json-schema": ("bench.public.items_schema", "json-schema", n, keys),
            "json-toast": ("bench.public.items_toast", "json-toast", n, keys),
            "flat": ("bench.public.rows", "flat", n, keys),
            "avro": ("bench.public.items_avro", "avro", n, keys),
            "avro-flat": ("bench.public.rows_avro", "avro-flat", n, keys),
            "wide": ("bench.public.items_wide", "json", n, keys * 10),
            "faust": ("bench.public.items_faust", "json", args.faust_events, keys),
        }
        runs = [
            ("plain-loop", "json"),
            ("plain-loop", "flat"),
            ("tidemark-upsert", "flat"),
            ("tidemark-debezium-upsert", "json"),
            ("tidemark-debezium", "json"),
            ("tidemark-upsert-general", "flat"),
            ("tidemark-debezium-upsert-general", "json"),
            ("tidemark-debezium-general", "json"),
            ("plain-loop", "json-toast"),
            ("tidemark-debezium-upsert", "json-toast"),
            ("plain-loop", "json-schema"),
            ("tidemark-debezium-upsert", "json-schema"),
            ("tidemark-debezium", "json-schema"),
            ("plain-loop-avro", "avro"),
            ("plain-loop-avro", "avro-flat"),
            ("tidemark-upsert-avro", "avro-flat"),
            ("tidemark-debezium-upsert-avro", "avro"),
            ("tidemark-debezium-avro", "avro"),
            ("tidemark-upsert-avro-general", "avro-flat"),
            ("tidemark-debezium-upsert-avro-general", "avro"),
            ("tidemark-debezium-avro-general", "avro"),
            ("faust", "faust"),
            ("tidemark-debezium", "wide"),
            ("tidemark-debezium-upsert", "wide"),
        ]
        quix = QUIX_PYTHON.exists() and (not args.only or "quix-streams" in args.only)
        if args.only:
            runs = [(program, data) for program, data in runs if program in args.only]
        for data in sorted({data for _, data in runs} | ({"json"} if quix else set())):
            topic, fmt, events, key_count = topics[data]
            load(bootstrap, topic, events, key_count, fmt, ids)
        me = [sys.executable, str(Path(__file__).resolve())]
        commands = []
        for program, data in runs:
            topic, fmt, events, key_count = topics[data]
            cmd = [*me, "--child", program, "--bootstrap", bootstrap, "--topic", topic]
            commands.append(
                (program, fmt, key_count, [*cmd, "--events", str(events), "--registry", registry])
            )
        if quix:
            cmd = [str(QUIX_PYTHON), "-c", QUIX_PROGRAM, bootstrap, topics["json"][0], str(n)]
            commands.append(("quix-streams", "json", keys, cmd))
        elif not QUIX_PYTHON.exists():
            print(f"quix-streams: not run, {QUIX_PYTHON} missing (make bench creates it)")
        # Rounds, not one program's runs back to back: drift of the machine hits all alike.
        measured: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.repeat):
            for program, fmt, key_count, cmd in commands:
                measured.setdefault(f"{program}/{fmt}/{key_count}", []).append(measure(cmd, 900))
        for program, fmt, key_count, _cmd in commands:
            results.append(
                _report(program, fmt, key_count, measured[f"{program}/{fmt}/{key_count}"])
            )
    finally:
        server.shutdown()
        server.server_close()
        stop_pid(pid, broker.MARKER)
        shutil.rmtree(run_dir, ignore_errors=True)
    write_results(
        args.results,
        results,
        script="bench/envelopes.py",
        events=n,
        event_bytes=len(json.dumps(debezium_event(0, 0), separators=(",", ":"))),
        partitions=PARTITIONS,
    )


def _report(program: str, fmt: str, keys: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run by rate, with every run's rate beside it."""
    rates = sorted(r["events"] / r["seconds"] for r in runs)
    result = sorted(runs, key=lambda r: r["events"] / r["seconds"])[len(runs) // 2]
    rate = result["events"] / result["seconds"]
    cpu = result["cpu_s"] / result["events"] * 1_000_000
    row = {
        "program": program,
        "input": INPUTS[fmt],
        "format": fmt,
        "keys": keys,
        "events": result["events"],
        "events_per_s": round(rate),
        "events_per_s_runs": [round(r) for r in rates],
        "cpu_s_per_million": round(cpu, 2),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
    }
    if "state_mb" in result:
        row["state_mb"] = round(result["state_mb"], 1)
    state = f"  state {row['state_mb']:>6.1f} MB" if "state_mb" in row else ""
    print(
        f"{program:<30} {fmt:<9} keys {keys:>7,} {rate:>8,.0f} events/s "
        f"(min {rates[0]:>7,.0f} max {rates[-1]:>7,.0f})  {cpu:>6.2f} CPU-s/1M  "
        f"peak RSS {row['peak_rss_mb']:>6.1f} MB{state}",
        flush=True,
    )
    return row


if __name__ == "__main__":
    main()
