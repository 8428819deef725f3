"""Offsets and the pipeline lifecycle against a real processor, Debezium and broker.

A pipeline is paused, stopped and resumed through the API and the CLI; its
offsets are refused while it runs (409), checked against the schema (400),
and rewound to the beginning twice while it is stopped: keeping state (the
replay is deduplicated: no event is emitted again) and with ``--reset-state``
(the state is rebuilt from the replay and every event is emitted again).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast
from unittest.mock import patch

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from processor.pipeline import offsets
from processor.pipeline.control_topic import read_control
from processor.pipeline.offsets_lease import Lease
from tests.integration.processes import (
    Processor,
    metric,
    pipeline_config,
    read_topic,
    reconciled,
    run_cli,
    wait_for,
)
from tests.integration.test_api import TOKEN, call
from tests.integration.test_recovery import check_table, position
from tests.integration.test_snapshots import cli
from tests.integration.workload import Table, Workload
from tests.peak import peak_bytes
from tidemark.cli.verify import wait_caught_up
from tidemark.core.config import TOKEN_ENV, Config
from tidemark.core.kafka import (
    Acknowledgements,
    client_config,
    ensure_topics,
    produce_waiting,
    producer_config,
)
from tidemark.core.topics import dataplane_group
from tidemark.devstack.stack import DevStack


def versions(config: Config, table: Table) -> Counter[tuple[Any, ...]]:
    """How often each (key, source position) was emitted to ``table``'s reconciled topic."""
    return Counter(
        (*event.key.values(), *position(event))
        for event in reconciled(config, table.name)
        if event.value is not None
    )


def test_offsets_rewind_with_state_kept_or_reset(stack: DevStack) -> None:
    kv, full = Table("iso_offs_kv"), Table("iso_offs_full", replica_full=True)
    config = pipeline_config(
        stack,
        "offs",
        envelopes={"public.iso_offs_full": "debezium"},
        offsets_write_abandoned_s=8.0,
    )
    pipeline = config.processor.pipeline
    workload = Workload(config, [kv, full], seed=31)
    workload.create_tables()
    workload.run_some(60)
    processor = Processor(stack, config, "offs-processor").start(env={TOKEN_ENV: TOKEN})
    base = f"http://127.0.0.1:{config.processor.web_port}/api/v1"
    offsets_url = f"{base}/pipelines/{pipeline}/offsets"

    def lifecycle(action: str, members: bool) -> str:
        """``tidemark pipeline <action>``, then wait until the group has ``members`` or not."""
        out = cli(processor, "pipeline", action)
        wait_for(f"the {action}", lambda: call("GET", offsets_url)[1]["members"] is members)
        return out

    try:
        wait_caught_up(config)
        status, document = call("GET", offsets_url)
        assert status == 200 and document["version"] == 1
        assert (document["lifecycle"], document["members"]) == ("RUNNING", True)
        assert document["group"] == dataplane_group(pipeline)
        inputs = [p for p in document["partitions"] if p["kind"] == "input"]
        assert {p["topic"].rsplit(".", 1)[1] for p in inputs} == {kv.name, full.name}
        for entry in inputs:
            assert entry["offset"] and entry["offset"] > 0, entry
            position_ = entry["source_position"]["postgresql"]
            assert position_["lsn"] > 0 and position_["lsn_commit"] > 0 and position_["txId"] > 0
        assert {p["envelope"] for p in inputs} == {"debezium", "debezium-upsert"}

        # Writes while an instance runs: 409, whatever the write; reads stay allowed.
        rewind = {"version": 1, "partitions": [{**inputs[0], "offset": 0, "source_position": None}]}
        every = [
            {"topic": p["topic"], "partition": p["partition"], "offset": 0}
            for p in document["partitions"]
        ]
        for method, url, body in (
            ("PATCH", offsets_url, rewind),
            ("PUT", offsets_url, {"version": 1, "partitions": every}),
            ("DELETE", offsets_url, None),
            ("POST", f"{offsets_url}/reset", {"to": "beginning"}),
        ):
            status, answer = call(method, url, body)
            assert status == 409 and "stop it first" in answer["error"], (method, answer)
        assert call("PATCH", offsets_url, rewind, token="wrong")[0] == 401
        # Invalid documents: 400 naming the field (checked before the pipeline's state).
        bad = {"version": 1, "partitions": [{**inputs[0], "offset": -1}]}
        status, answer = call("PATCH", offsets_url, bad)
        assert status == 400 and answer["error"].startswith("/partitions/0/offset"), answer

        # PAUSED: partitions kept, nothing read; resumed: the changes come through.
        assert call("POST", f"{base}/pipelines/{pipeline}/pause")[0] == 202
        wait_for("the pause", lambda: processor.health()["dataplane"] == "paused")
        before = sum(versions(config, kv).values())
        workload.run_some(10)
        time.sleep(3)
        state = call("GET", f"{base}/pipelines/{pipeline}/status")[1]
        assert state["lifecycle"] == "PAUSED" and state["assigned_partitions"]
        assert sum(versions(config, kv).values()) == before
        assert call("POST", f"{base}/pipelines/{pipeline}/resume")[0] == 202
        wait_caught_up(config)
        assert sum(versions(config, kv).values()) > before

        # Stopped from the command line: the group empties, the web API stays up.
        assert "stop asked" in lifecycle("stop", members=False)
        assert call("GET", f"{base}/pipelines/{pipeline}/status")[1]["lifecycle"] == "STOPPED"
        first = {t.name: versions(config, t) for t in (kv, full)}
        assert all(count == 1 for v in first.values() for count in v.values())
        stopped = call("GET", offsets_url)[1]

        def emitted_each(times: int) -> None:
            """Once caught up, every version of the first run was emitted ``times`` times,
            and the output is still correct (rows, order, retractions)."""
            wait_caught_up(config)
            time.sleep(2)
            for table, envelope in ((kv, "debezium-upsert"), (full, "debezium")):
                assert versions(config, table) == Counter(dict.fromkeys(first[table.name], times))
                check_table(config, table, envelope)

        # Rewind to the beginning, keeping state: the replay emits nothing again.
        kv_topic = f"{config.source.topic_prefix}.public.{kv.name}"
        read = metric(processor.metrics(), "tidemark_events_in_total", topic=kv_topic)
        result = json.loads(cli(processor, "offsets", "reset", "--to", "beginning"))
        assert all(p["offset"] == 0 for p in result["current"]["partitions"])
        assert result["previous"]["partitions"] == stopped["partitions"]  # what undoes it
        lifecycle("resume", members=True)
        emitted_each(1)  # nothing emitted again...
        replayed = metric(processor.metrics(), "tidemark_events_in_total", topic=kv_topic) - read
        assert replayed >= sum(first[kv.name].values())  # ...though the replay was read

        # Rewind again with --reset-state: the state is rebuilt, every event emitted again.
        lifecycle("stop", members=False)
        cli(processor, "offsets", "reset", "--to", "beginning", "--reset-state")
        lifecycle("resume", members=True)
        emitted_each(2)

        # A writer killed between deleting state and committing offsets leaves its plan;
        # no data plane joins while it is there. A writer that comes before the plan is
        # abandoned is refused (it may be another writer's, at work, review A11); once
        # abandoned, one data plane claims it and completes it, and the pipeline rejoins.
        lifecycle("stop", members=False)
        killed = run_cli(
            processor,
            "offsets",
            "reset",
            "--to",
            "beginning",
            "--reset-state",
            env={"TIDEMARK_FAILPOINT": "offsets-write:1"},
        )
        assert killed.returncode == -9, killed.stderr
        assert read_control(config).offsets_write is not None
        early = run_cli(processor, "offsets", "reset", "--to", "end")
        assert early.returncode != 0 and "being applied by another writer" in early.stderr, early
        cli(processor, "pipeline", "resume")
        time.sleep(2)
        assert not call("GET", offsets_url)[1]["members"]  # kept out by the plan
        wait_for("the left plan completed", lambda: read_control(config).offsets_write is None)
        assert "completed the offsets write its writer left" in processor.log.read_text()
        wait_for("the rejoin", lambda: call("GET", offsets_url)[1]["members"])
        emitted_each(3)
        assert read_topic(config, f"{pipeline}.dlq") == []

        # Resets to the end and to a time (before every record: the beginning; after: the end).
        lifecycle("stop", members=False)

        def reset(*args: str) -> dict[tuple[str, int], int]:
            current = json.loads(cli(processor, "offsets", "reset", "--to", *args))["current"]
            return {(p["topic"], p["partition"]): p["offset"] for p in current["partitions"]}

        ends = reset("end")
        for entry in stopped["partitions"]:  # caught up then, and nothing written since
            if entry["kind"] == "input":
                assert ends[(entry["topic"], entry["partition"])] == entry["offset"]
        later = str(int(time.time() * 1000) + 3_600_000)
        assert reset("timestamp", "--timestamp", later) == ends
        assert set(reset("timestamp", "--timestamp", "0").values()) == {0}
        # A read's document written back (PUT) restores what was read.
        status, written = call("PUT", offsets_url, stopped)
        assert status == 200, written
        restored = {(p["topic"], p["partition"]): p for p in written["current"]["partitions"]}
        for entry in stopped["partitions"]:
            now = restored[(entry["topic"], entry["partition"])]
            assert now["offset"] == (entry["offset"] or 0)
            assert now.get("source_position") == entry.get("source_position")
    finally:
        processor.stop()


def test_resetting_state_streams_the_changelog(stack: DevStack) -> None:
    """``--reset-state`` tombstones every live key without holding the partition's keys:
    the peak does not grow with the changelog."""
    small, large = (reset_peak(stack.config, records) for records in (5_000, 20_000))
    assert large < 1.5 * small, (small, large)


def reset_peak(config: Config, records: int) -> int:
    """Python's peak memory while the state of a changelog of ``records`` records
    (``records / 2`` keys, each written twice, a tenth then deleted) is reset."""
    topic = f"tests.changelog-{records}"
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 1})
    producer = Producer(producer_config(config.kafka, **{"linger.ms": 5}))
    acks = Acknowledgements(producer)
    keys = [f"k{i}".encode() for i in range(records // 2)]
    for round_ in (b"1", b"2"):
        for key in keys:
            produce_waiting(producer, topic, round_, key, acks.on_delivery, 0)
    for key in keys[::10]:
        produce_waiting(producer, topic, None, key, acks.on_delivery, 0)
    acks.wait("the changelog")
    with patch.object(offsets, "RECENT_KEYS", 1_000):
        # No plan in the control topic: nothing to renew.
        unrenewed = cast(Lease, SimpleNamespace(renew=lambda: None))
        peak = peak_bytes(lambda: offsets._delete_state(config, topic, 0, unrenewed))
    live: dict[bytes, bytes] = {}
    for record in read_topic(config, topic):
        assert record.key is not None
        if record.value is None:
            live.pop(record.key, None)
        else:
            live[record.key] = record.value
    assert live == {}
    return peak
