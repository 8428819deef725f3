"""The audit trail against a real processor: actions through the API, the console's login
and the CLI are in the pipeline's audit topic, read back newest first with who did them;
a viewer reads them without addresses and bodies; a forged record is not read as one."""

from __future__ import annotations

from confluent_kafka import Producer

from processor.pipeline.audit import fingerprint
from tests.integration.processes import Processor, pipeline_config, run_cli, wait_for
from tests.integration.test_api import TOKEN, VIEWER, answered, call
from tidemark.core.config import TOKEN_ENV, VIEWER_TOKEN_ENV
from tidemark.core.kafka import producer_config
from tidemark.core.record_auth import KEY_ENV
from tidemark.core.topics import audit_topic
from tidemark.devstack.stack import DevStack

RECORD_KEY = "audit-record-key-" + "3c" * 16


def test_every_operator_action_is_in_the_audit_trail(stack: DevStack) -> None:
    config = pipeline_config(stack, "audit")
    env = {TOKEN_ENV: TOKEN, VIEWER_TOKEN_ENV: VIEWER, KEY_ENV: RECORD_KEY}
    processor = Processor(stack, config, "audit-processor").start(env=env)
    base = f"http://127.0.0.1:{config.processor.web_port}"
    api = f"{base}/api/v1"
    try:
        assert call("POST", f"{api}/snapshots/pause")[0] == 202
        assert call("POST", f"{api}/snapshots", {"nope": 1})[0] == 400  # refused, recorded
        session = f"{base}/console/session"
        assert answered("POST", session, {"token": VIEWER}, token=None)[0] == 200
        done = run_cli(processor, "pipeline", "pause", env={KEY_ENV: RECORD_KEY})
        assert done.returncode == 0, done.stderr
        forger = Producer(producer_config(config.kafka))
        forger.produce(audit_topic("audit"), b'{"format": 1, "via": "api"}', None, 0)
        assert forger.flush(10) == 0

        def trail() -> dict[str, object] | None:
            status, body = call("GET", f"{api}/pipelines/audit/audit")
            return body if status == 200 and len(body["entries"]) >= 4 else None

        body = wait_for("the audit trail", trail, timeout=60)
        assert body["unreadable"] == 1  # the forged record (unsigned, not one)
        cli, login_entry, refused, paused = body["entries"][:4]  # newest first
        assert cli["via"] == "cli" and cli["action"] == "pipeline pause"
        assert cli["who"]["credential"].startswith("cli:") and cli["result"]["status"] == 0
        assert login_entry["via"] == "console" and login_entry["who"]["role"] == "viewer"
        assert login_entry["who"]["credential"] == "token:" + fingerprint(VIEWER)
        assert refused["action"] == "POST /api/v1/snapshots" and refused["detail"] == {"nope": 1}
        assert refused["result"]["status"] == 400 and refused["result"]["error"]
        assert paused["action"] == "POST /api/v1/snapshots/pause"
        assert paused["who"] == {
            "role": "operator",
            "credential": "token:" + fingerprint(TOKEN),
            "address": "127.0.0.1",
        }
        # a viewer reads who did what, not from where nor with which body
        status, seen = call("GET", f"{api}/pipelines/audit/audit?limit=2", token=VIEWER)
        assert status == 200 and len(seen["entries"]) == 2
        assert all(e["who"]["address"] is None and e["detail"] is None for e in seen["entries"])
        assert call("GET", f"{api}/pipelines/audit/audit?since=soon")[0] == 400
        text = processor.log.read_text()
        assert TOKEN not in text and VIEWER not in text
    finally:
        processor.stop()
