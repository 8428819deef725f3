"""Envelope throughput against Python peers, on one broker, in one run.

Starts the embedded broker (Tansu), loads topics with Debezium-like JSON events
of about 500 bytes, then runs each program in a process of its own, one after
another, on the same data:

- ``plain-loop``: confluent-kafka ``consume(5000)``, orjson decode, take
  ``after``, encode, produce (the ceiling);
- ``quix-streams``: Quix Streams 3.28 stateless ``apply`` + ``to_topic``
  (its own virtualenv, ``.venv-quix``: it pins an older confluent-kafka);
- ``faust``: a Faust agent, ``take(5000)`` batches, ``send_soon``;
- ``tidemark-<envelope>``: Tidemark's data plane with RocksDB state and the
  changelog, for ``upsert`` (flat rows), ``debezium-upsert`` and ``debezium``.

Each program is measured from its first consumed message until every event is
processed and produced: events/s, and CPU-seconds of its process (all threads)
per million events. ``debezium`` also runs over ten times as many keys to show
that its resident memory does not grow with the key count. Prints a table and
writes ``bench/results/envelopes.json``.

    python bench/envelopes.py [--events N] [--keys K]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUIX_PYTHON = ROOT / ".venv-quix" / "bin" / "python"
PARTITIONS = 3
BATCH = 5000


# -- the data ------------------------------------------------------------------


def debezium_event(i: int, key: int) -> dict[str, Any]:
    """A Debezium update of about 500 bytes (schemaless JSON, ``REPLICA IDENTITY FULL``)."""
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


def load(bootstrap: str, topic: str, events: int, keys: int, flat: bool) -> None:
    """Create ``topic`` and fill it; keys hash to partitions like Debezium's producer."""
    import orjson
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from tidemark.kafka import ensure_topics

    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), {topic: PARTITIONS})
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(events):
        key = i % keys
        event = debezium_event(i, key)
        value = orjson.dumps(event["after"] if flat else event)
        while True:
            try:
                producer.produce(topic, value=value, key=orjson.dumps({"id": key}))
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


# -- the programs (each runs in a child process) ----------------------------------


class Window:
    """From the first message to the last: wall seconds and process CPU seconds."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def start(self) -> None:
        if not self.wall:
            self.wall, self.cpu = time.perf_counter(), time.process_time()

    def result(self, events: int) -> dict[str, Any]:
        seconds = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"events": events, "seconds": seconds, "cpu_s": cpu, "max_rss_mb": rss_mb}


def plain_loop(bootstrap: str, topic: str, events: int) -> dict[str, Any]:
    import orjson
    from confluent_kafka import Consumer, Producer

    consumer = Consumer(_consumer_settings(bootstrap, "plain"))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    consumer.subscribe([topic])
    window, seen = Window(), 0
    out = topic + ".out"
    while seen < events:
        for msg in consumer.consume(BATCH, 0.5):
            if msg.error():
                continue
            window.start()
            doc = orjson.loads(msg.value())  # type: ignore[arg-type]
            if "after" not in doc:
                raise RuntimeError(f"{msg.topic()} {msg.offset()} {msg.value()[:300]!r}")
            after = doc["after"]
            while True:
                try:
                    producer.produce(out, orjson.dumps(after), msg.key(), partition=msg.partition())
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
        datadir=tempfile.mkdtemp(prefix="bench-faust-"),
    )
    source = app.topic(topic, value_serializer="raw", key_serializer="raw")
    sink = app.topic(topic + ".faust", value_serializer="raw", key_serializer="raw")
    window, state = Window(), {"seen": 0}
    result: dict[str, Any] = {}

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
                result.update(window.result(state["seen"]))
                os.write(1, json.dumps(result).encode() + b"\n")  # Faust redirects print
                os._exit(0)

    worker = faust.Worker(app, loglevel="warning", quiet=True)
    worker.execute_from_commandline()
    return result


def tidemark(bootstrap: str, topic: str, events: int, envelope: str) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    from processor import metrics
    from processor.dataplane import DataPlane
    from state.rocksdb import RocksDBBackend
    from tidemark.config import load_config

    state_dir = tempfile.mkdtemp(prefix="bench-tidemark-")
    pipeline = f"bench{os.getpid()}"
    config = load_config(
        None,
        {
            "TIDEMARK_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "TIDEMARK_SOURCE__TOPIC_PREFIX": "bench",
            "TIDEMARK_PROCESSOR__PIPELINE": pipeline,
            "TIDEMARK_PROCESSOR__ENVELOPE": envelope,
            "TIDEMARK_PROCESSOR__INPUT_PATTERN": f"^{topic}$",
        },
    )
    plane = DataPlane(config, RocksDBBackend(state_dir))
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
    return result


def _consumer_settings(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "max.poll.interval.ms": 10000,
        "heartbeat.interval.ms": 1000,
    }


QUIX_PROGRAM = r"""
import json, resource, sys, time
import orjson
from quixstreams import Application

bootstrap, topic, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
app = Application(broker_address=bootstrap, consumer_group=f"bench-quix-{time.time_ns()}",
                  auto_offset_reset="earliest", loglevel="WARNING")
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
print(json.dumps({"events": state["seen"], "seconds": time.perf_counter() - state["wall"],
                  "cpu_s": time.process_time() - state["cpu"],
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


# -- orchestration ------------------------------------------------------------------


def child(program: str, bootstrap: str, topic: str, events: int) -> None:
    if program == "plain-loop":
        result = plain_loop(bootstrap, topic, events)
    elif program == "faust":
        faust_agent(bootstrap, topic, events)
        return
    else:
        result = tidemark(bootstrap, topic, events, program.removeprefix("tidemark-"))
    print(json.dumps(result), flush=True)


def measure(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Run one program in its own process; its last stdout line is its JSON result."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise RuntimeError(f"{cmd[-4]} did not finish in {timeout:.0f} s: {err[-2000:]}") from None
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {err[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--faust-events", type=int, default=30_000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.bootstrap, args.topic, args.events)
        return

    from tidemark.devstack import broker
    from tidemark.devstack.procs import stop_pid

    run_dir = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    pid, port = broker.start_broker(run_dir)
    bootstrap = f"127.0.0.1:{port}"
    try:
        n, keys = args.events, args.keys
        print(f"broker 127.0.0.1:{port}; loading {n:,} events over {keys:,} keys per topic")
        topics = {
            "debezium": "bench.public.items",
            "flat": "bench.public.rows",
            "wide": "bench.public.items_wide",
            "faust": "bench.public.items_faust",
        }
        load(bootstrap, topics["debezium"], n, keys, flat=False)
        load(bootstrap, topics["flat"], n, keys, flat=True)
        load(bootstrap, topics["wide"], n, keys * 10, flat=False)
        load(bootstrap, topics["faust"], args.faust_events, keys, flat=False)
        me = [sys.executable, str(Path(__file__).resolve())]
        runs: list[tuple[str, list[str], int, int]] = [
            ("plain-loop", me, topics["debezium"], n),
            ("tidemark-upsert", me, topics["flat"], n),
            ("tidemark-debezium-upsert", me, topics["debezium"], n),
            ("tidemark-debezium", me, topics["debezium"], n),
            ("faust", me, topics["faust"], args.faust_events),
        ]
        results = []
        for program, base, topic, events in runs:
            cmd = [*base, "--child", program, "--bootstrap", bootstrap, "--topic", topic]
            results.append(_report(program, keys, measure([*cmd, "--events", str(events)], 900)))
        if QUIX_PYTHON.exists():
            cmd = [str(QUIX_PYTHON), "-c", QUIX_PROGRAM, bootstrap, topics["debezium"], str(n)]
            results.append(_report("quix-streams", keys, measure(cmd, 900)))
        else:
            print(f"quix-streams: skipped, {QUIX_PYTHON} missing (make bench creates it)")
        for program in ("tidemark-debezium", "tidemark-debezium-upsert"):
            cmd = [*me, "--child", program, "--bootstrap", bootstrap, "--topic", topics["wide"]]
            result = measure([*cmd, "--events", str(n)], 900)
            results.append(_report(program, keys * 10, result))
    finally:
        stop_pid(pid, broker.MARKER)
    RESULTS.mkdir(exist_ok=True)
    document = {
        "benchmark": "envelopes",
        "events": args.events,
        "event_bytes": len(json.dumps(debezium_event(0, 0), separators=(",", ":"))),
        "partitions": PARTITIONS,
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.machine(),
            "cores": os.cpu_count(),
        },
        "results": results,
    }
    path = RESULTS / "envelopes.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written: {path}")


def _report(program: str, keys: int, result: dict[str, Any]) -> dict[str, Any]:
    rate = result["events"] / result["seconds"]
    cpu = result["cpu_s"] / result["events"] * 1_000_000
    row = {
        "program": program,
        "keys": keys,
        "events": result["events"],
        "events_per_s": round(rate),
        "cpu_s_per_million": round(cpu, 2),
        "max_rss_mb": round(result["max_rss_mb"], 1),
    }
    print(
        f"{program:<26} keys {keys:>8,}  {rate:>10,.0f} events/s  "
        f"{cpu:>7.2f} CPU-s per 1M  max RSS {row['max_rss_mb']:>7.1f} MB",
        flush=True,
    )
    return row


if __name__ == "__main__":
    main()
