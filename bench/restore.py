"""State restore from a changelog topic: how long an instance needs to take over 1M keys.

Starts the embedded broker, writes a changelog the way the data plane does
(state entries of ``debezium-upsert``: a version and a JSON row of about 150
bytes, keyed by the primary key, over 3 partitions), then restores it into
fresh RocksDB stores with the data plane's :class:`~state.changelog.Restorer`,
stepping it as the data plane does between batches. Tansu does not compact, so
the changelog holds every update: the benchmark runs once with one record per
key and once with three (a log not compacted yet), and reports both the key
count and the records read. Prints a table and writes
``bench/results/restore.json``.

    python bench/restore.py [--keys N]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PARTITIONS = 3


def fill(bootstrap: str, topic: str, keys: int, versions: int) -> int:
    """Write ``versions`` entries for each of ``keys`` keys; return the record count."""
    import orjson
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from processor.reconcile.envelopes import ENTRY
    from processor.reconcile.versions import Entry
    from tidemark.core.kafka import ensure_topics

    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), {topic: PARTITIONS})
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    records = 0
    for version in range(versions):
        for key in range(keys):
            row = {
                "id": key,
                "customer": f"customer-{key % 997:04d}",
                "status": ("new", "paid", "shipped")[version % 3],
                "amount": round(key * 0.37, 2),
                "note": "x" * 16,
                "updated_at": 1_700_000_000_000 + version,
            }
            state_key = ENTRY + orjson.dumps({"id": key})
            value = Entry((1000 + version, key), orjson.dumps(row)).encode()
            while True:
                try:
                    producer.produce(topic, value, state_key, partition=key % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.1)
            records += 1
    producer.flush(300)
    return records


def restore(bootstrap: str, topic: str, state_dir: Path) -> dict[str, Any]:
    """Restore every partition of ``topic`` into new stores, as a newly assigned instance does."""
    from confluent_kafka.admin import AdminClient

    from state.changelog import Restorer
    from state.rocksdb import RocksDBBackend
    from tidemark.core.config import KafkaConfig
    from tidemark.core.kafka import client_config, consumer_config

    backend = RocksDBBackend(state_dir)
    stores = {(topic, p): backend.open("bench.public.items", p) for p in range(PARTITIONS)}
    kafka = KafkaConfig(bootstrap_servers=bootstrap)
    restorer = Restorer(consumer_config(kafka, "bench-restore"), AdminClient(client_config(kafka)))
    started, cpu = time.perf_counter(), time.process_time()
    restorer.add(stores)
    records = 0
    while restorer.busy:
        records += sum(done.records for done in restorer.step())
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    keys = sum(len(store.keys(b"k")) for store in stores.values())
    for store in stores.values():
        store.close()
    restorer.close()
    size = sum(f.stat().st_size for f in state_dir.rglob("*") if f.is_file()) / 2**20
    return {"keys": keys, "records": records, "seconds": seconds, "cpu_s": cpu, "state_mb": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    args = parser.parse_args()

    from tidemark.core.topics import changelog_topic
    from tidemark.devstack import broker
    from tidemark.devstack.procs import stop_pid

    run_dir = Path(tempfile.mkdtemp(prefix="tidemark-bench-restore-"))
    pid, port = broker.start_broker(run_dir)
    bootstrap = f"127.0.0.1:{port}"
    results = []
    try:
        for versions in (1, 3):
            topic = changelog_topic("bench", f"v{versions}")
            written = fill(bootstrap, topic, args.keys, versions)
            result = restore(bootstrap, topic, run_dir / f"state-v{versions}")
            assert result["keys"] == args.keys and result["records"] == written, result
            result["records_per_s"] = round(result["records"] / result["seconds"])
            results.append(result)
            print(
                f"{result['keys']:>9,} keys from {result['records']:>9,} changelog records: "
                f"{result['seconds']:6.1f} s ({result['records_per_s']:,} records/s, "
                f"{result['cpu_s']:.1f} CPU-s), RocksDB {result['state_mb']:.0f} MB",
                flush=True,
            )
    finally:
        stop_pid(pid, broker.MARKER)
        shutil.rmtree(run_dir, ignore_errors=True)
    write_results("restore", results, partitions=PARTITIONS)


if __name__ == "__main__":
    main()
