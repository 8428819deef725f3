"""The management API against real processors: its token, and snapshot control as by signals."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Producer

from processor.pipeline.instances import read_instances
from tests.integration.processes import (
    TIDEMARK,
    Processor,
    final_rows,
    metric,
    pipeline_config,
    reconciled,
    wait_for,
)
from tests.integration.test_snapshots import (
    leading,
    notifications,
    notified,
    progress,
    snapshot_config,
    source_rows,
    uncaptured_table,
)
from tidemark.cli.verify import wait_caught_up
from tidemark.core.config import TOKEN_ENV, VIEWER_TOKEN_ENV, Config
from tidemark.core.kafka import producer_config
from tidemark.core.topics import backfill_topic, notification_topic, output_topic
from tidemark.devstack.stack import DevStack

TOKEN = "tm-api-test-7c1d9e-5b2f80a41e6c93d7"  # noqa: S105 - a test's token
VIEWER = "tm-api-viewer-3e8a7f10c25b94d6e1a0"  # noqa: S105 - a test's read-only token


def call(
    method: str, url: str, body: Any = None, token: str | None = TOKEN, raw: bytes | None = None
) -> tuple[int, Any]:
    """``(status, JSON body)`` of one request, bearer ``token`` unless ``None``."""
    status, _headers, answer = answered(method, url, body, token, raw)
    return status, answer


def answered(
    method: str,
    url: str,
    body: Any = None,
    token: str | None = TOKEN,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    """``(status, headers, JSON body or None)`` of one request (``headers``: more of them)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.headers, _json(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, _json(exc.read())


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def test_api_needs_its_token_and_controls_snapshots_as_signals_do(stack: DevStack) -> None:
    name, rows = "iso_api_a", 3000
    table = f"public.{name}"
    chunks = {"chunk_size": 300, "min_chunk_size": 300, "max_chunk_size": 300}
    config = snapshot_config(stack, "api", max_rows_per_second=1000, **chunks)
    uncaptured_table(config, name, rows)
    processor = Processor(stack, config, "api-processor").start(env={TOKEN_ENV: TOKEN})
    base = f"http://127.0.0.1:{config.processor.web_port}/api/v1"
    try:
        wait_for("the coordinator", lambda: leading(processor))
        assert call("GET", f"{base}/openapi.json", token=None)[0] == 401
        status, document = call("GET", f"{base}/openapi.json")
        assert status == 200 and "/snapshots" in document["paths"]

        # No token, a wrong one, another scheme: 401, and nothing is started.
        start = {"data-collections": [table]}
        for token in (None, "wrong", f"{TOKEN}x", ""):
            assert call("POST", f"{base}/snapshots", start, token=token)[0] == 401
            assert call("GET", f"{base}/pipelines/api/status", token=token)[0] == 401
        assert call("GET", f"{base}/snapshots")[1] == {"paused": False, "tables": []}
        # What is not a signal: 400, with the reason.
        status, body = call("POST", f"{base}/snapshots", {"data-collections": []})
        assert status == 400 and body["error"].startswith("/data-collections")
        assert call("POST", f"{base}/snapshots", raw=b"{oops")[0] == 400
        status, body = call("POST", f"{base}/snapshots", {**start, "type": "blocking"})
        assert status == 400 and body["error"].startswith("/type: 'blocking'")
        # A rule across fields, beyond the schema: the signal's own check.
        elsewhere = [{"data-collection": "public.other", "filter": "id > 1"}]
        status, body = call(
            "POST", f"{base}/snapshots", {**start, "additional-conditions": elsewhere}
        )
        assert status == 400 and "not among data-collections" in body["error"]
        # Bounded requests: no more tables than one progress record holds, no huge body.
        many = {"data-collections": [f"public.t{i}" for i in range(1001)]}
        status, body = call("POST", f"{base}/snapshots", many)
        assert status == 400 and "1000" in body["error"]
        huge = json.dumps({**start, "surrogate-key": "k" * (2 << 20)}).encode()
        status, body = call("POST", f"{base}/snapshots", raw=huge)
        assert status == 413 and "larger than" in body["error"]
        assert call("POST", f"{base}/snapshots/rewind")[0] == 404
        assert call("GET", f"{base}/pipelines/other/status")[0] == 404

        status, accepted = call("POST", f"{base}/snapshots", start)
        assert status == 202 and accepted["signal"] == "execute-snapshot"
        request = accepted["request_id"]
        wait_for("chunks", lambda: progress(config, table, request).rows >= 500)
        assert call("POST", f"{base}/snapshots/pause")[0] == 202
        wait_for("the pause", lambda: [n for n in notifications(config) if n["type"] == "PAUSED"])
        paused_at = progress(config, table, request).rows
        time.sleep(2)
        assert progress(config, table, request).rows == paused_at < rows
        status, shown = call("GET", f"{base}/snapshots")
        assert status == 200 and shown["paused"] is True
        assert [t["status"] for t in shown["tables"] if t["request_id"] == request] == ["running"]
        assert call("POST", f"{base}/snapshots/resume")[0] == 202
        wait_for("the snapshot to complete", lambda: notified(config, "COMPLETED", request))
        done = progress(config, table, request)
        assert (done.status, done.rows) == ("completed", rows + 1)
        # The request's notifications, as Debezium writes them, newest first.
        status, shown = call("GET", f"{base}/notifications?request={request}")
        assert status == 200 and shown["complete"] and shown["unreadable"] == 0
        mine = [n for n in notifications(config) if n["additional_data"]["request_id"] == request]
        assert shown["notifications"] == mine[::-1]
        assert shown["notifications"][0]["type"] == "COMPLETED"
        assert {"STARTED", "TABLE_SCAN_COMPLETED"} <= {n["type"] for n in mine}
        assert call("GET", f"{base}/notifications?limit=1")[1]["notifications"] == mine[-1:]
        assert call("GET", f"{base}/notifications?request=none")[1]["notifications"] == []
        assert call("GET", f"{base}/notifications?limit=0")[0] == 400
        junk = Producer(producer_config(config.kafka))  # anyone may write the topic
        for value in (b"{oops", b"[1]", b'{"additional_data": 3}'):
            junk.produce(notification_topic("api"), value)
        assert junk.flush(30) == 0
        status, shown = call("GET", f"{base}/notifications?request={request}")
        assert shown["unreadable"] == 3 and shown["notifications"] == mine[::-1]

        status, second = call("POST", f"{base}/snapshots", start)
        wait_for("a second snapshot", lambda: progress(config, table, second["request_id"]).rows)
        assert call("POST", f"{base}/snapshots/stop", {"data-collections": [table]})[0] == 202
        wait_for(
            "the stop", lambda: progress(config, table, second["request_id"]).status == "aborted"
        )

        status, state = call("GET", f"{base}/pipelines/api/status")
        assert status == 200 and (state["dataplane"], state["snapshots"]) == ("running", "leader")
        assert {"topic": f"tidemark.{table}", "partition": 0} in state["assigned_partitions"]

        wait_caught_up(config)
        assert final_rows(reconciled(config, name)) == source_rows(config, name)
        shows_its_history(base, config, f"tidemark.{table}")
        # Which instance holds each partition: as the instance reported itself.
        status, shown = call("GET", f"{base}/pipelines/api/instances")
        assert status == 200, shown
        [me] = shown["instances"]
        assert f":{processor.pid}:" in me["instance"] and me["lifecycle"] == "RUNNING"
        assert me["assigned_partitions"] == state["assigned_partitions"]
        assert {"topic": f"tidemark.{table}", "partition": 0, "instance": me["instance"]} in shown[
            "partitions"
        ]
        assert TOKEN not in processor.log.read_text()  # never logged
    finally:
        processor.stop()
    assert read_instances(config) == []  # a stopped instance says so


def shows_its_history(base: str, config: Config, topic: str) -> None:
    """The last minutes per topic: the chunk rows came in on the backfill topic and went out
    on the output topic, at rates that add up to what was read."""
    status, history = call("GET", f"{base}/pipelines/api/history")
    assert status == 200 and history["interval_s"] == 5.0 and history["window_s"] == 900.0
    samples = history["samples"]
    assert len(samples) >= 2, history
    steps = [b["at_ms"] - a["at_ms"] for a, b in zip(samples, samples[1:], strict=False)]
    assert all(4000 <= step <= 7000 for step in steps), steps
    backfill = backfill_topic("api", topic)
    came_in = [s["topics"].get(backfill, {}).get("in_per_s", 0.0) for s in samples]
    went_out = [
        s["topics"].get(output_topic(config.source.topic_prefix, topic), {}).get("out_per_s", 0.0)
        for s in samples
    ]
    assert max(came_in) > 0 and max(went_out) > 0
    assert {"lag"} <= set(samples[-1]["topics"][topic])


def test_without_a_token_configured_the_api_refuses_everything(processor: int) -> None:
    status, body = call("GET", f"http://127.0.0.1:{processor}/api/v1/snapshots", token="any")
    assert status == 401 and TOKEN_ENV in body["error"]
    status, _ = call("POST", f"http://127.0.0.1:{processor}/api/v1/snapshots/pause", token="")
    assert status == 401


def test_the_web_port_serves_nothing_without_a_token_but_health_and_metrics(
    stack: DevStack,
) -> None:
    """Faust's own views are not served; the API's document needs the token; a viewer's
    token reads but cannot write (403); a client's failed authentications past the limit
    are answered 429, counted and logged without what was sent, and valid tokens pass."""
    limit = 12
    base = pipeline_config(stack, "guard")
    config = dataclasses.replace(
        base,
        processor=dataclasses.replace(base.processor, api_auth_failures_per_minute=limit),
    )
    processor = Processor(stack, config, "guard-processor")
    processor.start(env={TOKEN_ENV: TOKEN, VIEWER_TOKEN_ENV: VIEWER})
    port = f"http://127.0.0.1:{config.processor.web_port}"
    try:
        for path in ("/health", "/metrics"):
            assert answered("GET", port + path, token=None)[0] == 200
        # with the token: Faust's views are not there at all
        faust_views = ("/", "/router/", "/table/", "/graph/", "/stats/", "/performance/")
        for path in faust_views:
            assert call("GET", port + path)[0] == 404, path
        assert call("GET", f"{port}/api/v1/openapi.json")[0] == 200
        # a viewer reads everything, writes nothing
        assert call("GET", f"{port}/api/v1/snapshots", token=VIEWER)[0] == 200
        assert call("GET", f"{port}/api/v1/pipelines/guard/offsets", token=VIEWER)[0] == 200
        status, body = call("POST", f"{port}/api/v1/snapshots/pause", token=VIEWER)
        assert status == 403 and "read only" in body["error"]
        assert call("DELETE", f"{port}/api/v1/pipelines/guard/offsets", token=VIEWER)[0] == 403
        # without a token, or a wrong one: 401, every route (each a failure of this client)
        failures = 0
        for path in (*faust_views, "/api/v1/openapi.json", "/api/v1/snapshots", "/nothing"):
            status, headers, _ = answered("GET", port + path, token=None)
            assert status == 401 and headers["WWW-Authenticate"] == "Bearer", path
            failures += 1
        wrong = "wrong-" + TOKEN
        while failures < limit:
            assert call("GET", f"{port}/api/v1/snapshots", token=wrong)[0] == 401
            failures += 1
        # the limit reached: 429 for a wrong token until a minute has passed, yet the
        # valid tokens still pass (one address may be every client behind an ingress)
        status, headers, body = answered("GET", f"{port}/api/v1/snapshots", token=wrong)
        assert status == 429 and 0 < int(headers["Retry-After"]) <= 60, body
        assert call("GET", f"{port}/api/v1/snapshots")[0] == 200
        assert call("GET", f"{port}/api/v1/snapshots", token=VIEWER)[0] == 200
        text = processor.metrics()
        assert metric(text, "tidemark_api_auth_failures_total", reason="missing") == 9
        assert metric(text, "tidemark_api_auth_failures_total", reason="wrong") == limit - 9
        assert metric(text, "tidemark_api_auth_failures_total", reason="rate-limited") == 1
        log = processor.log.read_text()
        assert "API authentication failed from 127.0.0.1: wrong token" in log
        assert wrong not in log and TOKEN not in log and VIEWER not in log
    finally:
        processor.stop()


@pytest.mark.parametrize("token", ["short-token", "x" * 31])
def test_a_token_shorter_than_32_characters_is_refused_at_start(
    stack: DevStack, token: str
) -> None:
    processor = Processor(stack, pipeline_config(stack, "short"), "short-processor")
    done = subprocess.run(
        [*TIDEMARK, "process", "--config", str(processor.path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, TOKEN_ENV: token},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{TOKEN_ENV}: a token of at least 32 characters is needed" in done.stderr
    assert token not in done.stderr
