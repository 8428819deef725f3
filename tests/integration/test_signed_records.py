"""Records that give orders, signed with the pipeline's record key (review A3, issue 45).

A processor started with ``TIDEMARK_RECORD_KEY`` backfills a table (its chunk rows are
signed and accepted), then meets what anyone with write access to its topics could
write: a backfill record whose chunk number was raised to beat every real row, a chunk
row and a truncate marker made from nothing, a real signed record copied to another
partition of its topic, and a well-formed ``lifecycle: STOPPED``
without the key. Each forged record is a dead letter or a refused control record, and
changes nothing; the same order written with the key is obeyed.
"""

from __future__ import annotations

import time

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from processor.errors import ProcessorError
from processor.events.chunk_tag import CHUNK_HEADER
from processor.pipeline.control_topic import Lifecycle, set_lifecycle
from processor.reconcile import truncates
from processor.snapshot.client import send_signal
from tests.integration.processes import (
    Processor,
    final_rows,
    metric,
    read_topic,
    reconciled,
    wait_for,
)
from tests.integration.test_snapshots import leading, notified, snapshot_config, uncaptured_table
from tidemark.cli.verify import wait_caught_up
from tidemark.core.kafka import client_config, producer_config
from tidemark.core.record_auth import KEY_ENV, MAC_HEADER
from tidemark.core.topics import backfill_topic, change_topic, control_topic, dead_letter_topic
from tidemark.devstack.stack import DevStack

KEY = "k" * 16 + "0123456789abcdef0123456789abcdef"


def test_forged_backfill_and_control_records_are_refused_signed_ones_obeyed(
    stack: DevStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = "iso_signed_t"
    config = snapshot_config(stack, "signed")
    uncaptured_table(config, table, 100)
    processor = Processor(stack, config, "signed-processor").start(env={KEY_ENV: KEY})
    monkeypatch.setenv(KEY_ENV, KEY)  # this test's own writes: an operator's
    try:
        wait_for("the coordinator", lambda: leading(processor))
        send_signal(config, "execute-snapshot", {"data-collections": [f"public.{table}"]}, "s-1")
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "s-1"))
        wait_caught_up(config)
        before = final_rows(reconciled(config, table))
        assert len(before) == 101  # the signed chunk rows were read

        change = change_topic(config.source.topic_prefix, f"public.{table}")
        backfill = backfill_topic(config.processor.pipeline, change)
        real = read_topic(config, backfill)[0]
        assert MAC_HEADER in real.headers
        raised = {**real.headers, CHUNK_HEADER: str((1 << 62) + 1).encode()}
        producer = Producer(producer_config(config.kafka))
        producer.produce(
            backfill, real.value, real.key, real.partition, headers=list(raised.items())
        )
        made_up = {k: v for k, v in real.headers.items() if k != MAC_HEADER}
        producer.produce(
            backfill, real.value, real.key, real.partition, headers=list(made_up.items())
        )
        marker = truncates.markers(backfill, 1, (real.partition, 0), b"{}")[0]
        producer.produce(backfill, marker[3], marker[2], real.partition)
        # A real record, signed, copied whole to a partition its rows' keys are not in.
        partitions = len(producer.list_topics(backfill, 10).topics[backfill].partitions)
        assert partitions > 1
        moved = (real.partition + 1) % partitions
        producer.produce(backfill, real.value, real.key, moved, headers=list(real.headers.items()))
        producer.flush(10)

        def unsigned() -> float:
            return metric(
                processor.metrics(),
                "tidemark_dead_letters_total",
                topic=backfill,
                reason="unsigned",
            )

        wait_for("four unsigned dead letters", lambda: unsigned() == 4)
        wait_caught_up(config)
        assert final_rows(reconciled(config, table)) == before
        kinds = [
            r.headers.get("tidemark.error.kind")
            for r in read_topic(config, dead_letter_topic(config.processor.pipeline))
        ]
        assert kinds.count(b"unsigned") == 4, kinds

        # A well-formed order without the key: refused, the data plane runs on.
        topic = control_topic(config.processor.pipeline)
        at = str(int(time.time() * 1000)).encode()
        forged = orjson.dumps({"state": "STOPPED", "by": "forger", "at_ms": int(at)})
        producer.produce(topic, forged, b"lifecycle", 0, headers=[("tidemark.at", at)])
        producer.flush(10)
        refused = "tidemark_control_records_refused_total"
        wait_for("refused", lambda: metric(processor.metrics(), refused, key="lifecycle") == 1)
        assert processor.health().get("dataplane") == "running"
        # The same order with the key: obeyed.
        set_lifecycle(config, Lifecycle.STOPPED, "operator")
        wait_for("stopped", lambda: processor.health().get("dataplane") == "stopped")
        set_lifecycle(config, Lifecycle.RUNNING, "operator")
        wait_for("running", lambda: processor.health().get("dataplane") == "running")
        assert metric(processor.metrics(), refused, key="lifecycle") == 1
        # An operator without the key, now that the records are signed, is told so rather
        # than writing what every instance would refuse.
        monkeypatch.delenv(KEY_ENV)
        with pytest.raises(ProcessorError, match=KEY_ENV):
            set_lifecycle(config, Lifecycle.STOPPED, "operator")
        monkeypatch.setenv(KEY_ENV, KEY)
        # The next leader reads the signed progress record back, and coordinates.
        processor.stop()
        processor.start(env={KEY_ENV: KEY})
        wait_for("the coordinator again", lambda: leading(processor))
        assert KEY not in processor.log.read_text()
        admin = AdminClient(client_config(config.kafka))
        resource = ConfigResource(
            ConfigResource.Type.TOPIC, control_topic(config.processor.pipeline)
        )
        found = admin.describe_configs([resource])[resource].result()
        assert found["message.timestamp.type"].value == "LogAppendTime"
    finally:
        processor.stop()
