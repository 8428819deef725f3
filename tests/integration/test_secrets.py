"""Secrets stay secret: the pipeline runs with known ones, which are then searched for.

The processor (source password, the API's two tokens) and a continuous sink with a
JDBC catalog on PostgreSQL (its password) run from configuration files that hold no
secret, the secrets given in the environment. While both work (a backfill, API
calls with a right and a wrong token, merges), no process's command line holds a
secret (``ps`` of every process), and neither does any log or any file the pipeline
wrote: its logs, its state, the warehouse and Spark's scratch space, Debezium's and
PostgreSQL's logs. The only file that may hold a password is the one ``tidemark dev
up`` wrote, and it is readable by its owner alone.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import urllib.request
from pathlib import Path

import psycopg
from confluent_kafka.admin import AdminClient

from tests.integration.processes import Processor, SinkProcess, metric, wait_for
from tests.integration.test_api import TOKEN, VIEWER, call
from tests.integration.test_sink import sink_config
from tests.integration.test_snapshots import leading, notified, snapshot_config, uncaptured_table
from tidemark.core.acls import PRINCIPALS, covered, grants
from tidemark.core.config import NEXT_TOKEN_ENV, TOKEN_ENV, VIEWER_TOKEN_ENV, Config
from tidemark.core.kafka import client_config
from tidemark.core.ports import free_port
from tidemark.core.record_auth import KEY_ENV
from tidemark.core.topics import change_topic, output_topic
from tidemark.devstack.stack import DevStack

RECORD_KEY = "record-key-" + "5e" * 16
#: The operator's token that takes over in a rotation.
NEXT_TOKEN = "next-token-" + "7d" * 16


def without_secrets(config: Config) -> Config:
    """``config`` with every secret blanked: what the test's files hold."""
    return dataclasses.replace(
        config,
        source=dataclasses.replace(config.source, password=""),
        sink=dataclasses.replace(config.sink, catalog_password=""),
        dev=dataclasses.replace(config.dev, owner_password=""),
    )


def files_under(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def test_no_secret_reaches_a_command_line_a_log_or_a_file(stack: DevStack) -> None:
    owner = stack.config.owner_conninfo()
    source_password, owner_password = stack.config.source.password, owner["password"]
    secrets = {
        "source password": source_password,
        "owner password": owner_password,
        "API token": TOKEN,
        "viewer token": VIEWER,
        "next API token": NEXT_TOKEN,
        "record key": RECORD_KEY,
    }
    assert all(len(s) >= 16 for s in secrets.values())
    table = "iso_secret_t"
    base = snapshot_config(stack, "secret")
    uncaptured_table(base, table, 300)
    with psycopg.connect(**owner, autocommit=True) as conn:
        conn.execute("CREATE DATABASE iceberg_secret")
    catalog = sink_config(
        base,
        "secretcat",
        [table],
        catalog_type="jdbc",
        catalog_uri=f"jdbc:postgresql://{owner['host']}:{owner['port']}/iceberg_secret",
        catalog_user=owner["user"],
        catalog_password=owner_password,
        catalog_properties={"cache-enabled": "false"},
        metrics_port=free_port(),
        trigger_interval_s=0.5,
    )
    files = without_secrets(catalog)
    processor = Processor(stack, files, "secret-processor")
    sink = SinkProcess(stack, files, "secret-sink")
    env = {
        "TIDEMARK_SOURCE__PASSWORD": source_password,
        TOKEN_ENV: TOKEN,
        VIEWER_TOKEN_ENV: VIEWER,
        NEXT_TOKEN_ENV: NEXT_TOKEN,
        KEY_ENV: RECORD_KEY,
    }
    processor.start(env=env)
    try:
        api = f"http://127.0.0.1:{files.processor.web_port}/api/v1"
        wait_for("the coordinator", lambda: leading(processor))
        status, body = call("POST", f"{api}/snapshots", {"data-collections": [f"public.{table}"]})
        assert status == 202, body
        wait_for("the backfill", lambda: notified(files, "COMPLETED", body["request_id"]))
        # key values are the operator's to see (personal data); a viewer's are null
        status, seen = call("GET", f"{api}/snapshots", token=VIEWER)
        assert status == 200 and [t["last_key"] for t in seen["tables"]] == [None]
        whole = call("GET", f"{api}/snapshots")[1]
        assert [t["last_key"] for t in whole["tables"]] == [[300]]
        assert call("POST", f"{api}/snapshots/pause", token=NEXT_TOKEN)[0] == 202
        assert call("POST", f"{api}/snapshots/resume", token=NEXT_TOKEN)[0] == 202
        assert call("GET", f"{api}/snapshots", token=TOKEN[::-1])[0] == 401
        sink.start(env={"TIDEMARK_SINK__CATALOG_PASSWORD": owner_password})

        def merged() -> float:
            url = f"http://127.0.0.1:{files.sink.metrics_port}/metrics"
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    text = resp.read().decode()
            except OSError:
                return 0
            return metric(text, "tidemark_sink_batches_total", table=f"secretcat.public.{table}")

        wait_for("the sink's merges", lambda: merged() >= 1, timeout=180)
        # Every process of the machine, while all of them run.
        listed = subprocess.run(
            ["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=True
        ).stdout
        for what, secret in secrets.items():
            assert secret not in listed, f"the {what} is on a command line"
    finally:
        if sink.pid:
            sink.terminate()
            sink.wait(120)
        processor.stop()

    run = stack.run_dir
    written = files_under(
        Path(files.processor.state_dir),
        Path(files.sink.warehouse),
        run / "spark-scratch",
    ) + [
        processor.log,
        sink.log,
        processor.path,
        sink.path,
        run / "debezium.log",
        run / "broker.log",
    ]
    pg_logs = [p for p in run.glob("*postgres*") if p.is_file()]
    searched = 0
    for path in [*written, *pg_logs]:
        if not path.is_file():
            continue
        data = path.read_bytes()
        searched += 1
        for what, secret in secrets.items():
            assert secret.encode() not in data, f"the {what} is in {path}"
    assert searched > 10, searched
    # The one file that may hold the passwords: the stack's own, its owner's alone.
    held = stack.config_path.read_text()
    assert source_password in held and owner_password in held
    assert stat.S_IMODE(os.stat(stack.config_path).st_mode) == 0o600
    made_by_the_run_are_covered_by_the_kafka_acls(files, table)


def made_by_the_run_are_covered_by_the_kafka_acls(config: Config, table: str) -> None:
    """The embedded broker enforces no ACLs: the set ``tidemark kafka-acls`` prints must
    cover every topic and group this run of the processor, a backfill and the sink made,
    for the component that used it (Debezium's change and heartbeat topics included)."""
    found = grants(config)
    prefix, pipeline = config.source.topic_prefix, config.processor.pipeline
    admin = AdminClient(client_config(config.kafka))
    change = change_topic(prefix, f"public.{table}")
    ours = (f"{pipeline}.", f"{pipeline}-")
    made = [
        name
        for name in admin.list_topics(timeout=10).topics
        if name.startswith(ours)
        or name in (output_topic(prefix, change), f"__debezium-heartbeat.{prefix}")
    ]
    assert {output_topic(prefix, change), f"{pipeline}.control"} <= set(made), made
    for name in made:
        user = "sink" if name.endswith(".sink-status") else "processor"
        if name.startswith("__debezium"):
            user = "debezium"
        assert covered(found, user, "topic", name, "Write"), (user, name)
    assert covered(found, "processor", "topic", change, "Read")
    assert covered(found, "debezium", "topic", change, "Write")
    listed = admin.list_consumer_groups(request_timeout=10).result()
    groups = [g.group_id for g in listed.valid if g.group_id.startswith(pipeline)]
    assert f"{pipeline}-dataplane" in groups, groups
    for group in groups:
        assert any(covered(found, who, "group", group, "Read") for who in PRINCIPALS), group
