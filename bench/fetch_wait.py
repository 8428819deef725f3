"""What a consumer's long poll (``fetch.wait.max.ms``) costs the broker and gives readers.

Starts the embedded broker (Tansu) in a temporary folder, makes ``--topics`` topics of 3
partitions with one record in each partition, and for each wait of ``--waits`` runs a
consumer of its own group subscribed to every topic. Once it has read every record, it
measures:

- ``broker_idle_cores``: the broker's CPU seconds a second over ``--idle-s`` seconds in
  which the consumer polls and nothing is produced (each fetch asks every partition it
  holds);
- ``latency_ms``: from a record's produce to its arrival at the consumer's ``poll``, for
  ``--records`` records sent one at a time to partitions across the topics.

Writes ``bench/results/fetch_wait.json``.

    python bench/fetch_wait.py [--topics 250] [--waits 50,200,500] [--idle-s 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results_file import write_results  # noqa: E402
from tidemark.devstack.broker import start_broker  # noqa: E402
from tidemark.devstack.procs import stop_pid  # noqa: E402

PARTITIONS = 3


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), 50):
        for future in admin.create_topics(
            [NewTopic(t, PARTITIONS, 1) for t in topics[i : i + 50]]
        ).values():
            future.result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in topics:
        for partition in range(PARTITIONS):
            producer.produce(topic, b"first", partition=partition)
    producer.flush(60)


def measure(
    bootstrap: str, broker: int, topics: list[str], wait_ms: int, args: argparse.Namespace
) -> dict[str, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fetch-wait-{wait_ms}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": wait_ms,
            "fetch.queue.backoff.ms": 20,  # as the data plane's (tidemark.core.kafka)
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    try:
        consumer.subscribe(topics)
        read, deadline = 0, time.monotonic() + 300
        while read < len(topics) * PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {read} of {len(topics) * PARTITIONS} records")
            read += len(consumer.consume(1000, 0.5))
        before, started = cpu_seconds(broker), time.monotonic()
        while time.monotonic() - started < args.idle_s:
            consumer.poll(0.5)
        idle = (cpu_seconds(broker) - before) / (time.monotonic() - started)
        latencies = []
        for k in range(args.records):
            topic, partition = topics[k * 7 % len(topics)], k % PARTITIONS
            sent = time.monotonic()
            producer.produce(topic, b"probe", partition=partition)
            producer.flush(10)
            while True:
                msg = consumer.poll(5.0)
                if msg is None:
                    raise RuntimeError(f"{topic}[{partition}]: the record did not come in 5 s")
                if not msg.error():
                    latencies.append((time.monotonic() - sent) * 1000)
                    break
            time.sleep(0.05)  # a produce at a random moment of the consumer's fetch cycle
    finally:
        consumer.close()
    latencies.sort()
    return {
        "partitions": len(topics) * PARTITIONS,
        "fetch_wait_max_ms": wait_ms,
        "broker_idle_cores": round(idle, 3),
        "latency_ms": {
            "records": len(latencies),
            "p50": round(statistics.median(latencies), 1),
            "p90": round(latencies[int(0.9 * (len(latencies) - 1))], 1),
            "max": round(latencies[-1], 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=250)
    parser.add_argument("--waits", default="50,200,500", help="fetch.wait.max.ms values")
    parser.add_argument("--idle-s", type=float, default=15.0)
    parser.add_argument("--records", type=int, default=60)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    run_dir = Path(tempfile.mkdtemp(prefix="bench-fetch-wait-"))
    broker, port = start_broker(run_dir)
    try:
        bootstrap = f"127.0.0.1:{port}"
        topics = [f"fetch_wait_t{i:03d}" for i in range(args.topics)]
        make_topics(bootstrap, topics)
        results = []
        for wait_ms in (int(w) for w in args.waits.split(",")):
            results.append(measure(bootstrap, broker, topics, wait_ms, args))
            print(results[-1], flush=True)
    finally:
        stop_pid(broker, "tansu")
        shutil.rmtree(run_dir, ignore_errors=True)
    write_results("fetch_wait", results)


if __name__ == "__main__":
    main()
