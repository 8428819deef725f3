"""Poison messages and a 10 MB row in one table, while another table keeps changing.

Real Debezium captures a 10 MB row (the dev stack's bridge and the broker take
records up to ``kafka.max_record_bytes``, 32 MiB); the processor reconciles it
like any row. Messages that no Debezium would write are injected into the same
change topic: source blocks with a list where a scalar belongs, positions and
transaction ids beyond 64-bit integers, an op that is not a string, and a
message above the input limit. Each becomes a dead letter (the last one as a
reference to it), both tables converge to the source, ``/health`` answers 200
throughout and the process never restarts. The poison's key is read again from the
source: ``wait_caught_up`` waits for that too (it returned before the row came, under
load).
"""

from __future__ import annotations

import base64
import random
import string
import threading
import time

import orjson
import psycopg
import pytest
from confluent_kafka import Producer

from processor.snapshot.client import send_signal
from tests.integration.processes import (
    Processor,
    final_rows,
    pipeline_config,
    read_topic,
    reconciled,
)
from tests.integration.test_api import TOKEN, VIEWER, call
from tests.integration.workload import Table, Workload, source_rows
from tidemark.cli.errors import NotCaughtUpError
from tidemark.cli.verify import wait_caught_up
from tidemark.core.config import TOKEN_ENV, VIEWER_TOKEN_ENV, Config
from tidemark.core.kafka import producer_config
from tidemark.devstack.procs import pid_alive
from tidemark.devstack.stack import DevStack

BIG = 10 * 1024 * 1024


def poison(position: int) -> list[tuple[dict[str, object], str]]:
    """Debezium-shaped events that no Debezium writes, each with the dead letter's kind."""

    def event(**source: object) -> dict[str, object]:
        base: dict[str, object] = {
            "connector": "postgresql",
            "sequence": f'["{position}","{position}"]',
            "txId": 7,
        }
        return {"before": None, "after": {"id": 1, "body": "x"}, "op": "u", "source": base | source}

    listed_op = event()
    listed_op["op"] = ["u"]
    return [
        (event(connector=["postgresql"]), "not-debezium"),
        (event(txId=2**64 - 1), "position"),
        (event(sequence=f'["{2**64 - 1}","1"]'), "position"),
        (event(sequence=None, lsn=[1, 2]), "position"),
        (event(snapshot={"a": 1}, txId=2**63), "position"),
        (listed_op, "unknown-op"),
    ]


def test_poison_and_a_10_mb_row_stop_nothing(stack: DevStack) -> None:
    config = pipeline_config(stack, "poison")
    other = Table("iso_poison_other")
    workload = Workload(config, [other], seed=41)
    workload.create_tables()
    workload.run_some(30)
    rng = random.Random(42)
    body = "".join(rng.choices(string.ascii_letters, k=BIG))
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("CREATE TABLE iso_poison_big (id int PRIMARY KEY, title text, body text)")
        conn.execute("INSERT INTO iso_poison_big VALUES (1, 'first', 'small')")
    processor = Processor(stack, config, "poison-processor").start(
        env={TOKEN_ENV: TOKEN, VIEWER_TOKEN_ENV: VIEWER}
    )
    pid = processor.pid
    statuses: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            statuses.append(200 if processor.health().get("status") == "ok" else 503)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # The poison's key is asked for again from the source (each dead-lettered change's key
    # is): with snapshots paused, that read waits, and so does wait_caught_up.
    send_signal(config, "pause-snapshot", {"type": "incremental"})
    workload.start()
    try:
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute("UPDATE iso_poison_big SET body = %s WHERE id = 1", (body,))
            conn.execute("INSERT INTO iso_poison_big VALUES (2, 'second', %s)", (body[:1000],))
        topic = f"{config.source.topic_prefix}.public.iso_poison_big"
        producer = Producer(producer_config(config.kafka))
        key = orjson.dumps({"id": 1})
        expected = []
        for value, kind in poison(10**12):
            producer.produce(topic, orjson.dumps(value), key, 0)
            expected.append(kind)
        above = config.kafka.max_record_bytes // 2 + 1
        producer.produce(topic, b"{" + b" " * above + b"}", key, 0)
        expected.append("too-large")
        producer.flush(60)
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute("UPDATE iso_poison_big SET title = 'after the poison' WHERE id = 1")
            conn.execute("UPDATE iso_poison_big SET title = 'second, later' WHERE id = 2")
    finally:
        workload.stop()
    try:
        with pytest.raises(NotCaughtUpError, match="asked again"):
            wait_caught_up(config, timeout=20)
        send_signal(config, "resume-snapshot", {"type": "incremental"})
        wait_caught_up(config, timeout=300)
        big = final_rows(reconciled(config, "iso_poison_big"))
        assert big[(1,)] == {"id": 1, "title": "after the poison", "body": body}
        assert big[(2,)]["title"] == "second, later"
        assert final_rows(reconciled(config, "iso_poison_other")) == source_rows(config, other)
        dead = read_topic(config, "poison.dlq")
        assert sorted(r.headers["tidemark.error.kind"].decode() for r in dead) == sorted(expected)
        [reference] = [r for r in dead if r.headers["tidemark.error.kind"] == b"too-large"]
        assert orjson.loads(reference.value or b"")["size"] == len(key) + above + 2
        shown_by_the_api(config, topic, expected)
        assert processor.pid == pid and pid_alive(pid)  # never restarted
    finally:
        watching.set()
        watcher.join(5)
        processor.stop()
    assert statuses and set(statuses) == {200}


def shown_by_the_api(config: Config, topic: str, expected: list[str]) -> None:
    """The dead letters as an operator finds them: by table and kind, newest first, with
    their origin and a preview; a download carries the bytes whole; a viewer reads them
    too, without their keys and values."""
    url = f"http://127.0.0.1:{config.processor.web_port}/api/v1/pipelines/poison/dead-letters"
    status, body = call("GET", f"{url}?table=public.iso_poison_big&limit=1000", token=VIEWER)
    assert status == 200, body
    letters = body["dead_letters"]
    assert sorted(d["kind"] for d in letters) == sorted(expected)
    assert body["complete"] and body["scanned"] >= len(expected)
    assert {d["source"]["topic"] for d in letters} == {topic}
    assert {d["table"] for d in letters} == {"public.iso_poison_big"}
    # a viewer sees where and why, not the keys and values (personal data)
    assert all(d["key_preview"] is None and d["value_preview"] is None for d in letters)
    stamps = [(d["timestamp_ms"], d["source"]["offset"]) for d in letters]
    assert stamps == sorted(stamps, reverse=True)  # newest first
    status, body = call("GET", f"{url}?kind=position&limit=2")
    assert status == 200 and [d["kind"] for d in body["dead_letters"]] == ["position"] * 2
    assert all(d["error"] and d["value_preview"].startswith("{") for d in body["dead_letters"])
    status, body = call("GET", f"{url}?kind=too-large&whole=true")
    [reference] = body["dead_letters"]
    assert orjson.loads(base64.b64decode(reference["value_base64"]))["size"] > 0
    assert call("GET", f"{url}?table=public.nothing_here")[1]["dead_letters"] == []
    assert call("GET", f"{url}?limit=0")[0] == 400
