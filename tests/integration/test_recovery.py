"""Crashes and rebalances with real PostgreSQL, Debezium, broker and processor processes.

- SIGKILL at random moments while changes stream in, and once exactly between
  a batch's flush and its commits (a failpoint): after the last restart the
  reconciled topics converge to the source tables (I1), per key the emitted
  versions never go back except to show again a batch flushed before a crash
  (I3), every retraction is the previous row (state survived), the failpoint's
  batch is re-emitted, and nothing was dead-lettered (I5).
- Two instances in one consumer group: one is killed, the other takes over its
  partitions and restores their state from the changelog; the killed one comes
  back and catches its stale local state up from the changelog. The output
  stays correct throughout.
- Every envelope killed between its batch's output acknowledgements and its
  changelog's (a failpoint), then taken over by an instance that restores its
  state from the changelog: every input change is in the output.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import time
from typing import Any

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from processor.events.change import source_version
from tests.integration.processes import (
    Event,
    Processor,
    decoder,
    final_rows,
    metric,
    pipeline_config,
    read_topic,
    reconciled,
    wait_for,
)
from tests.integration.workload import Table, Workload, source_rows
from tests.oracle import strip_resent
from tidemark.cli.verify import wait_caught_up
from tidemark.core.config import Config
from tidemark.core.kafka import client_config, ensure_topics
from tidemark.core.ports import free_port
from tidemark.devstack.procs import pid_alive
from tidemark.devstack.stack import DevStack


def position(event: Event) -> tuple[int, int]:
    assert event.value is not None
    major, minor = event.value["tidemark"]["position"].split(",")
    return int(major), int(minor)


def check_table(config: Config, table: Table, envelope: str) -> list[Event]:
    """I1 (converged to the source), I3 (monotone per key, replays aside), the retractions."""
    events = reconciled(config, table.name)
    assert events, f"no output for {table.name}"
    expected = source_rows(config, table)
    assert final_rows(events) == expected
    by_key: dict[tuple[Any, ...], list[Event]] = {}
    for event in events:
        if event.value is not None:
            by_key.setdefault(tuple(event.key.values()), []).append(event)
    for key, history in by_key.items():
        # I3 under at least once: the output moves forward in the source's order, except
        # that a crash may send a run of versions already shown again, in order.
        versions = [position(e) for e in history]
        ranks = {version: rank for rank, version in enumerate(sorted(set(versions)))}
        _forward, stale = strip_resent([ranks[v] for v in versions])
        assert not stale, f"{table.name} {key}: went back in history: {versions}"
        if envelope != "debezium-upsert":
            continue
        # Each applied change retracts the row of the newest change shown before it.
        previous: dict[tuple[int, int], Any] = {}
        for event in history:
            assert event.value is not None
            if event.value["tidemark"]["reason"] == "applied":
                older = [v for v in previous if v < position(event)]
                expected_before = previous[max(older)] if older else None
                assert event.value["before"] == expected_before, (table.name, key, event)
            previous.setdefault(position(event), event.after)
    return events


def test_sigkill_at_random_moments_loses_nothing(stack: DevStack) -> None:
    kv, pair = Table("iso_crash_kv"), Table("iso_crash_pair", composite=True, replica_full=True)
    config = pipeline_config(
        stack, "crash", envelopes={"public.iso_crash_pair": "debezium"}, batch_size=50
    )
    kv_topic = "tidemark.public.iso_crash_kv"
    workload = Workload(config, [kv, pair], seed=11)
    workload.create_tables()
    workload.run_some(50)
    processor = Processor(stack, config, "crash-processor")
    rng = random.Random(12)
    workload.start()
    try:
        for _ in range(4):
            workload.bulk(100)  # a backlog of several thousand changes to work off
            processor.start()
            deadline = time.monotonic() + 60
            while not metric(processor.metrics(), "tidemark_events_in_total", topic=kv_topic):
                assert time.monotonic() < deadline, "nothing was processed"
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.5))  # in the middle of the backlog
            processor.kill()

    finally:
        workload.stop()
    workload.run_some(20)  # changes that arrive while the processor is down
    processor.start()
    wait_caught_up(config)
    processor.stop()
    # And once exactly between a batch's flush and its commits, in a backlog of the
    # debezium-upsert table only (the classic envelope drops such a replay by design).
    kv_only = Workload(config, [kv], seed=13)
    kv_only.bulk(60)
    processor.start(failpoint="after-flush:5").crashed()
    processor.start()
    try:
        wait_caught_up(config)
        repeated = 0
        for table, envelope in ((kv, "debezium-upsert"), (pair, "debezium")):
            events = [e for e in check_table(config, table, envelope) if e.value is not None]
            versions = [(tuple(e.key.values()), position(e)) for e in events]
            repeated += len(versions) - len(set(versions))
        print(f"{workload.transactions} transactions, {repeated} events emitted again after kills")
        assert repeated > 0  # the failpoint's batch was re-emitted, not dropped (I5)
        assert workload.transactions > 200
        assert read_topic(config, f"{config.processor.pipeline}.dlq") == []
    finally:
        processor.stop()


def test_a_second_instance_takes_over_partitions_with_their_state(stack: DevStack) -> None:
    kv, full = Table("iso_pair_kv"), Table("iso_pair_full", replica_full=True)
    config = pipeline_config(stack, "pair", envelopes={"public.iso_pair_full": "debezium"})
    other = other_instance(config, "b")
    workload = Workload(config, [kv, full], seed=21)
    workload.create_tables()
    workload.run_some(40)
    first = Processor(stack, config, "pair-a").start()
    second = Processor(stack, other, "pair-b").start()
    try:
        deadline = time.monotonic() + 60
        while not (
            first.health().get("assigned_partitions") and second.health().get("assigned_partitions")
        ):
            assert time.monotonic() < deadline, "the group did not share the partitions"
            time.sleep(0.5)
        workload.start()
        time.sleep(3)
        first.kill()
        deadline = time.monotonic() + 60
        while second.health().get("assigned_partitions") != 6:
            assert time.monotonic() < deadline, "the survivor did not take every partition"
            time.sleep(0.5)
        time.sleep(3)
        restored = metric(
            second.metrics(), "tidemark_restore_records_total", topic="tidemark.public.iso_pair_kv"
        )
        assert restored > 0  # the state of the partitions it took over came from the changelog
        first.start()  # back with stale local state: the changelog brings it forward
        time.sleep(8)
    finally:
        workload.stop()
    try:
        wait_caught_up(config)
        check_table(config, kv, "debezium-upsert")
        check_table(config, full, "debezium")
    finally:
        first.stop()
        second.stop()


def other_instance(config: Config, name: str) -> Config:
    """``config`` for a second instance of its pipeline: its own state folder and port."""
    processor = dataclasses.replace(
        config.processor,
        state_dir=str(config.processor.state_dir) + f"-{name}",
        web_port=free_port(),
    )
    return dataclasses.replace(config, processor=processor)


def changes_in(config: Config, topic: str, flat: bool) -> set[tuple[Any, ...]]:
    """Every change of an input topic as (key, version): Debezium's position, or the offset
    of a flat record."""
    decode = decoder(config)
    found = set()
    for record in read_topic(config, topic):
        if record.key is None or (record.value is None and not flat):
            continue  # Debezium's tombstone after a delete: no change of its own
        key = tuple(decode(record.key).values())
        if flat:
            found.add((key, (0, record.offset)))
        else:
            assert record.value is not None
            found.add((key, source_version(decode(record.value)["source"])))
    return found


def emitted(config: Config, table: str) -> set[tuple[Any, ...]]:
    """Every (key, version) a reconciled topic shows."""
    return {(tuple(e.key.values()), position(e)) for e in reconciled(config, table) if e.value}


def test_a_kill_between_the_outputs_and_the_changelog_loses_nothing(stack: DevStack) -> None:
    kv, full = Table("iso_acks_kv"), Table("iso_acks_full", replica_full=True)
    config = pipeline_config(
        stack,
        "acks",
        envelopes={"public.iso_acks_full": "debezium", "public.iso_acks_flat": "upsert"},
        batch_size=50,
    )
    prefix = f"{config.source.topic_prefix}.public."
    workload = Workload(config, [kv, full], seed=31)
    workload.create_tables()
    workload.run_some(60)
    workload.bulk(30)
    ensure_topics(AdminClient(client_config(config.kafka)), {prefix + "iso_acks_flat": 1}, 1)
    producer = Producer(client_config(config.kafka))
    for number in range(1500):
        key = number % 40
        value = None if number % 9 == 0 else orjson.dumps({"id": key, "n": number})
        producer.produce(prefix + "iso_acks_flat", value, orjson.dumps({"id": key}), 0)
    producer.flush(30)
    first = Processor(stack, config, "acks-a")
    first.start(failpoint="outputs-acked:6").crashed()
    # A new instance: no local state, so everything it knows comes from the changelog,
    # which the crash left at most part way into the batch whose outputs were acknowledged.
    second = Processor(stack, other_instance(config, "b"), "acks-b").start()
    try:
        wait_caught_up(config)
        for table, flat in (
            ("iso_acks_kv", False),
            ("iso_acks_full", False),
            ("iso_acks_flat", True),
        ):
            lost = changes_in(config, prefix + table, flat) - emitted(config, table)
            assert not lost, f"{table}: {len(lost)} changes never emitted, e.g. {sorted(lost)[:3]}"
        check_table(config, kv, "debezium-upsert")
        check_table(config, full, "debezium")
        assert read_topic(config, "acks.dlq") == []
    finally:
        second.stop()


def test_a_zombie_writes_nothing_after_its_partitions_moved(stack: DevStack) -> None:
    """Instance A stalls (SIGSTOP, by a failpoint) with a batch decided and nothing of it
    produced, for longer than the session timeout; B takes its partitions and goes on
    with newer changes; A then resumes (SIGCONT) and tries to write its stale batch. Its
    producers are fenced: per key the output never goes back in history, and a third
    instance restoring from the changelog alone finds state that did not regress (every
    retraction it emits is the previous row)."""
    kv, full = Table("iso_zombie_kv"), Table("iso_zombie_full", replica_full=True)
    config = pipeline_config(
        stack, "zombie", envelopes={"public.iso_zombie_full": "debezium"}, batch_size=40
    )
    workload = Workload(config, [kv, full], seed=61)
    workload.create_tables()
    workload.run_some(60)
    first = Processor(stack, config, "zombie-a")
    second = Processor(stack, other_instance(config, "b"), "zombie-b")
    workload.start()
    try:
        first.start(failpoint="batch-decided:4:stop", healthy=False)
        wait_for("the stall", lambda: stopped(first.pid))
        second.start()
        wait_for("the takeover", lambda: second.health().get("assigned_partitions") == 6)
        time.sleep(5)  # B emits newer versions of the keys in A's stale batch
    finally:
        workload.stop()
    try:
        wait_caught_up(config)
        # Now A resumes with its stale batch: written, it would be the keys' last word.
        os.kill(first.pid, signal.SIGCONT)
        time.sleep(8)
        wait_caught_up(config)
        assert pid_alive(first.pid), "a fenced instance joins again, it does not exit"
        check_table(config, kv, "debezium-upsert")
        check_table(config, full, "debezium")
        first.stop()
        second.stop()
        third = Processor(stack, other_instance(config, "c"), "zombie-c").start()
        Workload(config, [kv, full], seed=62).run_some(60)
        wait_caught_up(config)
        check_table(config, kv, "debezium-upsert")
        check_table(config, full, "debezium")
        third.stop()
    finally:
        first.stop()
        second.stop()


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"
