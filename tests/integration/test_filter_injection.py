"""Snapshot filters cannot change the source, whichever of the three channels brings them.

Each injection goes in through the management API, a record on the signal topic
(written as a producer would, past the CLI's own check) and a row of Tidemark's
signal table, and is refused on arrival: 400 from the API, an ABORTED notification
with the reason from the other channels. Text that ends the statement (``COMMIT;
CREATE TABLE``, ``COPY ... TO PROGRAM``) is not one expression; a function with side
effects, ``query_to_xml`` (any query text), a subquery of another table,
``pg_terminate_backend``, ``set_config`` and ``pg_sleep`` are one expression, and the
parse tree refuses each of them by name. A filter of columns, operators and allowed
functions is read. After all of it the source is unchanged, every session of the
processor's role still runs, and the pipeline goes on. (The walls behind the check,
past it, are in ``test_chunks.py``.)
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import Producer

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


def injections(marker: Path) -> dict[str, tuple[str, str]]:
    """Filters that would change the source, its host or its sessions, or read beyond
    their table, by what they try: each with the reason it is refused."""
    return {
        "commit": (
            "true); COMMIT; CREATE TABLE iso_inject_made (a int); SELECT (true",
            "closes a parenthesis",
        ),
        "program": (
            f"true); COPY (SELECT 1) TO PROGRAM 'touch {marker}'; SELECT (true",
            "closes a parenthesis",
        ),
        "function": ("iso_inject_effect()", "the function iso_inject_effect"),
        "any query": (
            "query_to_xml('SELECT * FROM iso_inject_canary', true, true, '') IS NOT NULL",
            "the function query_to_xml",
        ),
        "other table": ("(SELECT count(*) FROM iso_inject_canary) >= 0", "a subquery"),
        "sessions": (
            "pg_terminate_backend(pg_backend_pid()) OR true",
            "the function pg_terminate_backend",
        ),
        "settings": (
            "set_config('statement_timeout', '0', false) = '0'",
            "the function set_config",
        ),
        "sleep": ("pg_sleep(600) IS NOT NULL", "the function pg_sleep"),
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
    config = pipeline_config(stack, "inject", batch_size=500)
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
        for kind, (condition, reason) in injections(marker).items():
            # The API refuses it, with the reason.
            status, body = call("POST", api, execute(condition))
            assert status == 400 and "refused" in body["error"], (kind, body)
            assert reason in body["error"], (kind, body)
            # The signal topic and the signal table: ABORTED with the reason.
            for channel in (by_topic, by_table):
                request = f"{kind.replace(' ', '-')}-{channel.__name__}-{uuid.uuid4().hex[:6]}"
                channel(config, request, condition)
                aborted(config, request)
                error = progress(config, TABLE, request).error or ""
                assert "refused" in error and reason in error, (request, error)
        # A filter of columns, operators and allowed functions is read.
        allowed = "v > 10 AND lower(md5(v::text)) <> '' AND extract(year from now()) > 2000"
        status, body = call("POST", api, execute(allowed))
        assert status == 202, body
        request = body["request_id"]
        wait_for("the allowed filter", lambda: notified(config, "COMPLETED", request))
        assert progress(config, TABLE, request).status == "completed"
        with psycopg.connect(**config.owner_conninfo()) as conn:
            role = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                (config.source.user,),
            ).fetchone()
        assert role is not None and role[0] >= 1  # the processor's sessions still run
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
