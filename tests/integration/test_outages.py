"""Outages ridden through, not turned into restarts.

- The broker stopped (SIGSTOP) for 30 s while changes stream in, then resumed
  (SIGCONT): it keeps its data in memory, so it must not be restarted. The
  processor and a continuous sink keep running, catch up and converge; neither
  exits.
- PostgreSQL restarted while a table is being backfilled: the snapshot resumes
  and completes; it is not aborted.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from processor.outages import is_outage
from processor.snapshot.client import read_state
from processor.snapshot.progress import TableProgress
from spark_sink.session import create_session
from tests.integration.processes import (
    Processor,
    SinkProcess,
    final_rows,
    pipeline_config,
    reconciled,
    wait_for,
)
from tests.integration.test_snapshots import (
    backfill_paused,
    cli,
    doc_rows,
    leading,
    notified,
    progress,
    read_again_requests,
    snapshot_config,
    toasted_table,
    uncaptured_table,
)
from tests.integration.test_snapshots import source_rows as snapshot_rows
from tests.integration.workload import Table, Workload, source_rows
from tidemark.cli.verify import compare_table, wait_caught_up
from tidemark.core.config import Config
from tidemark.core.kafka import RebalanceErrors, client_config, ensure_topics
from tidemark.core.ports import free_port
from tidemark.devstack.procs import pid_alive
from tidemark.devstack.stack import DevStack


def test_a_broker_pause_is_ridden_through(stack: DevStack, spark: SparkSession) -> None:
    table = Table("iso_pause_rows")
    config = pipeline_config(stack, "pause")
    config = dataclasses.replace(
        config,
        sink=dataclasses.replace(
            config.sink,
            catalog_name="pause",
            warehouse=str(stack.run_dir / "pause-warehouse"),
            topics=[f"{config.source.topic_prefix}.reconciled.public.{table.name}"],
            topic_pattern="",  # only its table, not every reconciled topic of the stack
            metrics_port=0,
            trigger_interval_s=1.0,
            read_stall_s=5.0,
        ),
    )
    workload = Workload(config, [table], seed=51)
    workload.create_tables()
    workload.run_some(40)
    processor = Processor(stack, config, "pause-processor").start()
    sink = SinkProcess(stack, config, "pause-sink").start()
    pid = processor.pid
    broker = stack.process_pid("broker")
    assert broker is not None
    workload.start()
    try:
        time.sleep(3)
        os.kill(broker, signal.SIGSTOP)
        try:
            time.sleep(30)
            assert pid_alive(pid)
            assert sink.alive(), sink.log_tail()
        finally:
            os.kill(broker, signal.SIGCONT)
        time.sleep(5)
    finally:
        workload.stop()
    try:
        wait_caught_up(config, timeout=180)
        assert final_rows(reconciled(config, table.name)) == source_rows(config, table)
        assert processor.pid == pid and pid_alive(pid)
        assert processor.health().get("status") == "ok"
        create_session(config)  # the test's session learns the catalog

        def merged() -> bool:
            if not spark.catalog.tableExists(f"pause.public.{table.name}"):
                return False  # the sink has not merged its first batch yet
            spark.sql(f"REFRESH TABLE pause.public.{table.name}")
            return compare_table(config, spark, "public", table.name).equal

        wait_for("the sink to catch up", merged, timeout=240)
        assert sink.alive(), sink.log_tail()
    finally:
        processor.stop()
        sink.terminate()
        assert sink.wait(120) == 0, sink.log_tail()


def test_a_postgresql_restart_during_a_backfill_does_not_abort_it(stack: DevStack) -> None:
    """PostgreSQL restarted (a fast shutdown cuts every connection) while a table is being
    backfilled: the snapshot waits for the source, resumes and completes; the table
    converges. Debezium reconnects by itself."""
    name, rows = "iso_pgrestart_rows", 6000
    config = snapshot_config(
        stack,
        "pgrestart",
        chunk_size=300,
        min_chunk_size=300,
        max_chunk_size=300,
        max_rows_per_second=1500,
    )
    uncaptured_table(config, name, rows)
    processor = Processor(stack, config, "pgrestart-processor").start()
    pid = processor.pid
    try:
        wait_for("the coordinator", lambda: leading(processor))
        table = f"public.{name}"
        cli(processor, "snapshot", "start", table, "--id", "pgr-1")
        wait_for("chunks", lambda: progress(config, table, "pgr-1").rows >= 1000)
        stack.restart_postgres()
        wait_for("the snapshot", lambda: notified(config, "COMPLETED", "pgr-1"), timeout=240)
        done = progress(config, table, "pgr-1")
        assert (done.status, done.rows) == ("completed", rows + 1), done
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(f"UPDATE {name} SET v = 7 WHERE id = 5")  # noqa: S608 - Debezium streams again
        wait_caught_up(config, timeout=240)
        assert final_rows(reconciled(config, name)) == snapshot_rows(config, name)
        assert processor.pid == pid and pid_alive(pid)
    finally:
        processor.stop()


def test_a_long_source_outage_waits_with_its_reason_then_aborts_the_table(
    stack: DevStack,
) -> None:
    """The source refuses every connection for longer than snapshot.source_outage_deadline_s:
    meanwhile the table's status says why it waits; then it is aborted with that reason, and
    the pipeline goes on once the source is back. A key asked again (an update whose
    unchanged TOAST value no state could fill), queued behind the table, waits for the
    source however long it is down: aborted, it would leave the key's output at its old
    row for good."""
    name = "iso_srcdown_rows"
    deadline = 6.0
    config = snapshot_config(
        stack,
        "srcdown",
        chunk_size=300,
        min_chunk_size=300,
        max_chunk_size=300,
        max_rows_per_second=600,
        source_outage_deadline_s=deadline,
    )
    uncaptured_table(config, name, 6000)
    doc = "iso_srcdown_doc"
    toasted_table(config, doc, 3)
    table = f"public.{name}"
    processor = Processor(stack, config, "srcdown-processor").start()
    pid = processor.pid
    admin = {**config.owner_conninfo(), "dbname": "postgres"}
    try:
        wait_for("the coordinator", lambda: leading(processor))
        cli(processor, "snapshot", "start", table, "--id", "down-1")
        wait_for("chunks", lambda: progress(config, table, "down-1").rows >= 600)
        with backfill_paused(config, table, "down-1"):
            with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
                conn.execute(f"UPDATE {doc} SET n = 1 WHERE id = 2")  # doc left untouched
            wait_for("the key asked again", lambda: read_again_requests(config) >= 1)
            with psycopg.connect(**admin, autocommit=True) as conn:
                conn.execute(f"ALTER DATABASE {config.source.dbname} ALLOW_CONNECTIONS false")
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (config.source.dbname,),
                )
        try:
            waiting = wait_for("a reason", lambda: progress(config, table, "down-1").waiting)
            assert "cannot be reached" in waiting
            assert "waiting: the source cannot be reached" in cli(processor, "snapshot", "status")
            wait_for("the abort", lambda: notified(config, "ABORTED", "down-1"), timeout=90)
            asked = wait_for("the keys waiting", lambda: waiting_keys(config, f"public.{doc}"))
            time.sleep(deadline + 4)
            still = keys_request(config, f"public.{doc}")
            assert still is not None and still.status in ("queued", "running") and still.waiting, (
                still
            )
            assert not notified(config, "ABORTED", asked.request_id)
        finally:
            with psycopg.connect(**admin, autocommit=True) as conn:
                conn.execute(f"ALTER DATABASE {config.source.dbname} ALLOW_CONNECTIONS true")
        aborted = progress(config, table, "down-1")
        assert aborted.status == "aborted" and "unreachable for" in (aborted.error or "")
        assert aborted.waiting is None
        wait_for(
            "the key's row read again",
            lambda: final_rows(reconciled(config, doc)).get((2,)) == doc_rows(config, doc)[(2,)],
        )
        cli(processor, "snapshot", "start", table, "--id", "down-2")
        wait_for("the second snapshot", lambda: notified(config, "COMPLETED", "down-2"))
        assert processor.pid == pid and pid_alive(pid)
    finally:
        processor.stop()


def waiting_keys(config: Config, table: str) -> TableProgress | None:
    """The request that reads keys of ``table`` again, once it waits for the source."""
    asked = keys_request(config, table)
    return asked if asked is not None and asked.waiting else None


def keys_request(config: Config, table: str) -> TableProgress | None:
    """The progress of the (last) request that reads keys of ``table`` again."""
    state = read_state(config)
    asked = [t for t in state.tables if t.table == table and t.keys] if state else []
    return asked[-1] if asked else None


def test_an_error_of_a_rebalance_callback_comes_back_as_an_exception(stack: DevStack) -> None:
    """confluent-kafka (2.16) hands an error of its own calls made inside a rebalance
    callback back from ``consume()`` as a ``KafkaError`` object, which no ``except``
    clause with a class catches: the data plane's thread died of one (CI, the broker
    pause: ``Failed to get watermark offsets`` from the changelog restorer in
    ``on_assign``) and the processor lived on without it. Callbacks wrapped by
    :class:`RebalanceErrors` keep the error and raise it after ``consume()``, a
    ``KafkaException`` that the loops ride out."""
    topic = "iso_rebalance_errors"
    settings = client_config(stack.config.kafka)
    ensure_topics(AdminClient(settings), {topic: 1}, 1)
    dead = Consumer(
        {"bootstrap.servers": f"127.0.0.1:{free_port()}", "group.id": "x", "log_level": 0}
    )

    def on_assign(_consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        dead.get_watermark_offsets(TopicPartition(topic, 0), timeout=0.5)

    def consumed(group: str, errors: RebalanceErrors | None) -> type | None:
        """Consume until the callback ran; what ``consume()`` raised, if anything."""
        consumer = Consumer({**settings, "group.id": group, "log_level": 0})
        consumer.subscribe([topic], on_assign=errors.wrap(on_assign) if errors else on_assign)
        deadline = time.monotonic() + 60
        try:
            while not (errors and errors.pending) and time.monotonic() < deadline:
                try:
                    consumer.consume(10, 0.5)
                except:  # noqa: E722 - what no except clause with a class catches
                    return sys.exc_info()[0]
        finally:
            consumer.close()
        return None

    raised = consumed("rebalance-bare", None)
    assert raised is not None and not issubclass(raised, BaseException), raised
    errors = RebalanceErrors()
    assert consumed("rebalance-wrapped", errors) is None
    with pytest.raises(KafkaException) as caught:
        errors.raise_pending()
    assert is_outage(caught.value)
    errors.raise_pending()  # raised once
