"""Snapshot filters cannot change the source, whichever of the three channels brings them.

Each injection goes in through the management API, a record on the signal topic
(written as a producer would, past the CLI's own check) and a row of Tidemark's
signal table. Text that ends the statement (``COMMIT; CREATE TABLE``, ``COPY ... TO
PROGRAM``) is refused on arrival: 400 from the API, an ABORTED notification with the
reason from the other channels. A function with side effects is planned (it is one
expression) but its reads fail in the read-only transaction: the table is aborted.
``set_config('default_transaction_read_only', 'off', false)`` runs, and the function
after it still fails. ``pg_sleep(600)`` ends at the statement timeout, its table
aborted, while the pipeline goes on. After all of it the source is unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import Producer

from processor.snapshot.client import send_signal
from tests.integration.processes import Processor, final_rows, reconciled, wait_for
from tests.integration.test_api import TOKEN, call
from tests.integration.test_snapshots import leading, notified, pipeline_config, progress
from tidemark.cli.verify import source_lsn, wait_caught_up, wait_debezium
from tidemark.core.config import TOKEN_ENV, Config
from tidemark.core.kafka import producer_config
from tidemark.core.topics import signal_topic
from tidemark.devstack.procs import pid_alive
from tidemark.devstack.stack import DevStack

TABLE = "public.iso_inject_t"


def injections(marker: Path) -> dict[str, str]:
    """Filters that would change the source or its host, by what they try."""
    return {
        "commit": "true); COMMIT; CREATE TABLE iso_inject_made (a int); SELECT (true",
        "program": f"true); COPY (SELECT 1) TO PROGRAM 'touch {marker}'; SELECT (true",
        "function": "iso_inject_effect()",
    }


def execute(condition: str) -> dict[str, object]:
    return {
        "data-collections": [TABLE],
        "additional-conditions": [{"data-collection": TABLE, "filter": condition}],
    }


def by_topic(config: Config, request: str, condition: str) -> None:
    """The signal record a producer with access to the topic writes (no client check)."""
    producer = Producer(producer_config(config.kafka))
    value = {"id": request, "type": "execute-snapshot", "data": execute(condition)}
    producer.produce(signal_topic(config.processor.pipeline), json.dumps(value).encode())
    assert producer.flush(30) == 0


def by_table(config: Config, request: str, condition: str) -> None:
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO public.tidemark_signal (id, type, data) VALUES (%s, %s, %s)",
            (request, "execute-snapshot", json.dumps(execute(condition))),
        )


def aborted(config: Config, request: str) -> None:
    wait_for(f"{request} aborted", lambda: notified(config, "ABORTED", request))


def source_state(config: Config) -> tuple[object, ...]:
    """What an injection could change: the canary's rows, the injected table, the marker."""
    with psycopg.connect(**config.owner_conninfo()) as conn:
        canary = conn.execute("SELECT count(*) FROM iso_inject_canary").fetchone()
        made = conn.execute("SELECT to_regclass('public.iso_inject_made')").fetchone()
        tables = conn.execute("SELECT count(*) FROM pg_class").fetchone()
    return canary, made, tables


def test_no_filter_through_any_channel_changes_the_source(stack: DevStack, tmp_path: Path) -> None:
    base = pipeline_config(stack, "inject", batch_size=500)
    config = dataclasses.replace(
        base, source=dataclasses.replace(base.source, statement_timeout_ms=3000)
    )
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE iso_inject_t (id int PRIMARY KEY, v int)")
        conn.execute("INSERT INTO iso_inject_t SELECT g, g FROM generate_series(1, 20) g")
        conn.execute("CREATE TABLE iso_inject_canary (a int)")
        conn.execute(
            "CREATE FUNCTION iso_inject_effect() RETURNS boolean LANGUAGE plpgsql AS "
            "$$ BEGIN INSERT INTO iso_inject_canary VALUES (1); RETURN true; END $$"
        )
    wait_debezium(config, source_lsn(config))
    marker = tmp_path / "pwned"
    before = source_state(config)
    processor = Processor(stack, config, "inject-processor").start(env={TOKEN_ENV: TOKEN})
    api = f"http://127.0.0.1:{config.processor.web_port}/api/v1/snapshots"
    try:
        wait_for("the coordinator", lambda: leading(processor))
        for kind, condition in injections(marker).items():
            # The API refuses what is not one expression, and plans the rest first.
            status, body = call("POST", api, execute(condition))
            if kind == "function":
                assert status == 202, body
                request = body["request_id"]
                aborted(config, request)
                error = progress(config, TABLE, request).error or ""
                assert "read-only transaction" in error, error
            else:
                assert status == 400 and "refused" in body["error"], body
            # The signal topic and the signal table: ABORTED with the reason.
            for channel in (by_topic, by_table):
                request = f"{kind}-{channel.__name__}-{uuid.uuid4().hex[:6]}"
                channel(config, request, condition)
                aborted(config, request)
                error = progress(config, TABLE, request).error or ""
                expected = "read-only transaction" if kind == "function" else "refused"
                assert expected in error, (request, error)
        # A filter that turns the session's default writable runs; nothing after it writes.
        opened = "set_config('default_transaction_read_only', 'off', false) = 'off'"
        request = send_signal(config, "execute-snapshot", execute(opened))
        wait_for("the set_config snapshot", lambda: notified(config, "COMPLETED", request))
        assert progress(config, TABLE, request).status == "completed"
        request = send_signal(config, "execute-snapshot", execute("iso_inject_effect()"))
        wait_for("the function after it", lambda: notified(config, "ABORTED", request))
        # pg_sleep(600): planned, then ended by the statement timeout; the table aborted.
        status, body = call("POST", api, execute("pg_sleep(600) IS NOT NULL"))
        assert status == 202, body
        request = body["request_id"]
        wait_for("the timeout", lambda: notified(config, "ABORTED", request), timeout=60)
        assert "statement timeout" in (progress(config, TABLE, request).error or "")
        assert source_state(config) == before
        assert not marker.exists()
        # The pipeline goes on: a change still reaches the reconciled topic.
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute("UPDATE iso_inject_t SET v = -1 WHERE id = 1")
        wait_caught_up(config)
        rows = final_rows(reconciled(config, "iso_inject_t"))
        assert rows[(1,)]["v"] == -1
        assert pid_alive(processor.pid) and processor.health().get("status") == "ok"
    finally:
        processor.stop()
