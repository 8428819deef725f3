"""An unreadable snapshot progress record, against a running processor (review A3).

Before, the leader raised on it as it took the lead; its coordinator failed, the
instance's health failed, and the next leader read the same record and failed the same
way. Now the leader refuses to coordinate and says why, the data plane goes on, and
``tidemark snapshot reset-progress --yes`` puts an empty record in its place, after
which the leader coordinates again and a backfill runs. Then the record key is turned
on: the unsigned record is refused until ``tidemark snapshot sign-progress`` signs it.
"""

from __future__ import annotations

from confluent_kafka import Producer

from processor.snapshot.client import send_signal
from tests.integration.processes import (
    Processor,
    final_rows,
    metric,
    pipeline_config,
    reconciled,
    run_cli,
    wait_for,
)
from tests.integration.test_snapshots import cli, leading, notified, uncaptured_table
from tidemark.cli.verify import wait_caught_up
from tidemark.core.kafka import producer_config
from tidemark.core.record_auth import KEY_ENV
from tidemark.core.topics import progress_topic
from tidemark.devstack.stack import DevStack

KEY = "progress-" + "k" * 32


def test_an_unreadable_progress_record_is_refused_and_reset(stack: DevStack) -> None:
    config = pipeline_config(stack, "progbad")
    table = "iso_progbad_t"
    processor = Processor(stack, config, "progbad-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        producer = Producer(producer_config(config.kafka))
        broken = (
            b'{"format": 1, "tables": [{"table": "public.x"}], "paused": false, '
            b'"chunk_sequence": 3, "signal_offsets": {}}'
        )
        producer.produce(progress_topic(config.processor.pipeline), broken, b"state", 0)
        producer.flush(10)
        processor.stop()
        processor.start()  # the next leader reads the broken record
        wait_for("refused", lambda: processor.health().get("snapshots") == "refused")
        health = processor.health()
        assert health["status"] == "ok" and health["dataplane"] == "running", health
        assert "tables[0].request_id is missing" in health["snapshots_refused"]
        assert metric(processor.metrics(), "tidemark_snapshot_progress_refused") == 1
        # The data plane goes on: a change streamed now comes through.
        uncaptured_table(config, table, 20)
        wait_for("the streamed row", lambda: len(final_rows(reconciled(config, table))) == 1)

        asked = run_cli(processor, "snapshot", "reset-progress")
        assert asked.returncode == 1 and "--yes" in asked.stdout
        assert "reset" in cli(processor, "snapshot", "reset-progress", "--yes")
        wait_for("leading again", lambda: leading(processor), timeout=60)
        assert metric(processor.metrics(), "tidemark_snapshot_progress_refused") == 0
        send_signal(config, "execute-snapshot", {"data-collections": [f"public.{table}"]}, "p-1")
        wait_for("the backfill", lambda: notified(config, "COMPLETED", "p-1"))
        wait_caught_up(config)
        assert len(final_rows(reconciled(config, table))) == 21

        # The record key turned on: the record written without it is refused until it is
        # signed, and signing it forgets nothing.
        processor.stop()
        processor.start(env={KEY_ENV: KEY})
        wait_for("refused", lambda: processor.health().get("snapshots") == "refused")
        assert "not signed" in processor.health()["snapshots_refused"]
        done = run_cli(processor, "snapshot", "sign-progress", env={KEY_ENV: KEY})
        assert done.returncode == 0 and "signed" in done.stdout, done.stderr
        wait_for("leading again", lambda: leading(processor), timeout=60)
    finally:
        processor.stop()
