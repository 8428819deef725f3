"""The management API against real processors: its token, and snapshot control as by signals."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.integration.processes import Processor, final_rows, reconciled, wait_for
from tests.integration.test_snapshots import (
    leading,
    notifications,
    notified,
    progress,
    snapshot_config,
    source_rows,
    uncaptured_table,
)
from tidemark.cli.devstack.stack import DevStack
from tidemark.cli.verify import wait_caught_up
from tidemark.config import TOKEN_ENV

pytestmark = pytest.mark.integration

TOKEN = "tm-api-test-7c1d9e"  # noqa: S105 - a test's token


def call(
    method: str, url: str, body: Any = None, token: str | None = TOKEN, raw: bytes | None = None
) -> tuple[int, Any]:
    """``(status, JSON body)`` of one request, bearer ``token`` unless ``None``."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


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
        status, document = call("GET", f"{base}/openapi.json", token=None)
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
        assert TOKEN not in processor.log.read_text()  # never logged
    finally:
        processor.stop()


def test_without_a_token_configured_the_api_refuses_everything(processor: int) -> None:
    status, body = call("GET", f"http://127.0.0.1:{processor}/api/v1/snapshots", token="any")
    assert status == 401 and TOKEN_ENV in body["error"]
    status, _ = call("POST", f"http://127.0.0.1:{processor}/api/v1/snapshots/pause", token="")
    assert status == 401
