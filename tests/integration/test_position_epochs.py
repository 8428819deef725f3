"""A new position epoch after a processor restart: the partition stops, the others go on.

A failover to a replica with a shorter WAL makes new commits arrive at positions below
those already seen. Real Debezium streams the old epoch; the processor is killed and its
state folder deleted, so it starts again from its changelog (as another replica given
the partitions would); then a change of the new epoch (a lower position, a later commit)
is written where Debezium writes that key. The partition stops with the reason, nothing
of the new epoch is emitted, and a change in another partition still is.
"""

from __future__ import annotations

import shutil

import orjson
import psycopg
from confluent_kafka import Producer

from tests.integration.processes import (
    Processor,
    decoder,
    final_rows,
    metric,
    pipeline_config,
    read_topic,
    reconciled,
    wait_for,
)
from tidemark.cli.verify import wait_caught_up
from tidemark.core.kafka import producer_config
from tidemark.devstack.stack import DevStack

TABLE = "iso_epoch_rows"


def test_positions_that_go_back_stop_their_partition_after_a_restart(stack: DevStack) -> None:
    config = pipeline_config(stack, "epoch")
    topic = f"{config.source.topic_prefix}.public.{TABLE}"
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, name text)")
        conn.execute(f"INSERT INTO {TABLE} SELECT g, 'old ' || g FROM generate_series(1, 12) g")
        conn.execute(f"UPDATE {TABLE} SET name = 'old, updated' WHERE id = 1")
    processor = Processor(stack, config, "epoch-processor").start()
    try:
        wait_caught_up(config)
        assert final_rows(reconciled(config, TABLE))[(1,)]["name"] == "old, updated"
        processor.kill()
        shutil.rmtree(config.processor.state_dir)  # restored from the changelog
        processor.start()
        decode = decoder(config)
        changes = [(r, decode(r.value)) for r in read_topic(config, topic) if r.value]
        [(first, newest)] = [(r, e) for r, e in changes if r.key and decode(r.key)["id"] == 1][-1:]
        elsewhere = next(decode(r.key)["id"] for r, _ in changes if r.partition != first.partition)
        failover = {
            "before": None,
            "after": {"id": 1, "name": "new epoch"},
            "op": "u",
            "source": {
                **newest["source"],
                "sequence": '["1000","1000"]',
                "lsn": 1000,
                "ts_ms": newest["source"]["ts_ms"] + 60_000,
            },
        }
        producer = Producer(producer_config(config.kafka))
        producer.produce(topic, orjson.dumps(failover), first.key, first.partition)
        producer.flush(30)
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE {TABLE} SET name = 'still flowing' WHERE id = %s", (elsewhere,))
        labels = {"topic": topic, "partition": str(first.partition)}
        wait_for(
            "the partition to stop",
            lambda: metric(processor.metrics(), "tidemark_partition_refused", **labels) == 1,
        )
        wait_for(
            "the other partition's change",
            lambda: final_rows(reconciled(config, TABLE))[(elsewhere,)]["name"] == "still flowing",
        )
        rows = final_rows(reconciled(config, TABLE))
        assert rows[(1,)]["name"] == "old, updated"  # nothing of the new epoch decided
        assert "positions went back" in processor.log.read_text()
    finally:
        processor.stop()
