"""The Kafka permissions of each component (:mod:`tidemark.core.acls`): every topic, group
and transactional id Tidemark names is covered for the component that uses it, and no
component gets more (the embedded broker enforces no ACLs: ``test_secrets.py`` checks
the set against what a real run made)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidemark.core import topics
from tidemark.core.acls import commands, covered, grants
from tidemark.core.config import Config, ProcessorConfig, SourceConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Config(source=SourceConfig(topic_prefix="shop"), processor=ProcessorConfig(pipeline="p"))
FOUND = grants(CONFIG)
INPUT = topics.change_topic("shop", "public.orders")
OUTPUT = topics.output_topic("shop", INPUT)
OWN_TOPICS = [
    topics.dead_letter_topic("p"),
    topics.positions_topic("p"),
    topics.control_topic("p"),
    topics.signal_topic("p"),
    topics.progress_topic("p"),
    topics.instances_topic("p"),
    topics.notification_topic("p"),
    topics.audit_topic("p"),
    topics.changelog_topic("p", INPUT),
    topics.backfill_topic("p", INPUT),
    "p-__assignor-__leader",  # Faust's
]


def reader_roles() -> set[str]:
    """Every role the code names a reader group by (``reader_group(..., "role")``)."""
    pattern = re.compile(r'reader_group\([^,()]+,\s*"([a-z-]+)"\)')
    found = set()
    for folder in ("processor", "spark_sink", "tidemark"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= set(pattern.findall(path.read_text()))
    return found


def test_the_processor_may_do_what_it_does_and_no_more() -> None:
    def may(resource: str, name: str, operation: str) -> bool:
        return covered(FOUND, "processor", resource, name, operation)

    assert may("topic", INPUT, "Read") and not may("topic", INPUT, "Write")
    for operation in ("Write", "Create", "AlterConfigs"):
        assert may("topic", OUTPUT, operation)
    for name in OWN_TOPICS:
        for operation in ("Read", "Write", "Create", "DescribeConfigs", "AlterConfigs"):
            if (name, operation) != (topics.audit_topic("p"), "AlterConfigs"):  # see below
                assert may("topic", name, operation), (name, operation)
    groups = [topics.dataplane_group("p"), topics.snapshot_group("p"), "p"]
    groups += [topics.reader_group("p", role) for role in reader_roles()]
    for group in groups:
        assert may("group", group, "Read"), group
    for tid in (topics.transactional_id("p", 3, 1), topics.coordinator_transactional_id("p")):
        assert may("transactional-id", tid, "Write"), tid
    # another pipeline's, and anything else, is not its
    for name in ("p2.control", "q.control", "other", "shop2.public.orders"):
        assert not may("topic", name, "Write") and not may("topic", name, "Read"), name
    assert not may("group", "p2-dataplane", "Read") and not may("group", "victim-group", "Read")
    assert not may("topic", INPUT, "Delete") and not may("topic", OUTPUT, "Delete")


def test_no_component_can_shorten_or_delete_the_audit_trail() -> None:
    audit = topics.audit_topic("p")
    for principal in ("processor", "operator"):
        assert covered(FOUND, principal, "topic", audit, "Write")
        for operation in ("AlterConfigs", "Delete"):
            assert not covered(FOUND, principal, "topic", audit, operation), principal
    assert covered(FOUND, "processor", "topic", topics.control_topic("p"), "AlterConfigs")


def test_debezium_writes_its_change_topics_and_never_the_reconciled_ones() -> None:
    assert covered(FOUND, "debezium", "topic", INPUT, "Write")
    assert not covered(FOUND, "debezium", "topic", OUTPUT, "Write")  # the DENY wins
    for name in OWN_TOPICS:
        assert not covered(FOUND, "debezium", "topic", name, "Write"), name


def test_the_sink_reads_the_reconciled_topics_and_writes_its_status_alone() -> None:
    assert covered(FOUND, "sink", "topic", OUTPUT, "Read")
    assert covered(FOUND, "sink", "topic", OUTPUT, "DescribeConfigs")
    assert not covered(FOUND, "sink", "topic", OUTPUT, "Write")
    assert not covered(FOUND, "sink", "topic", INPUT, "Read")
    assert covered(FOUND, "sink", "topic", topics.sink_status_topic("p"), "Write")
    assert covered(FOUND, "sink", "group", topics.reader_group("p", "sink-reader"), "Read")
    for name in OWN_TOPICS:
        assert not covered(FOUND, "sink", "topic", name, "Read"), name


def test_an_operator_gives_orders_but_writes_no_data() -> None:
    for name in (topics.control_topic("p"), topics.signal_topic("p"), topics.progress_topic("p")):
        assert covered(FOUND, "operator", "topic", name, "Write"), name
    assert covered(FOUND, "operator", "group", topics.dataplane_group("p"), "Delete")
    assert not covered(FOUND, "operator", "topic", OUTPUT, "Write")
    assert not covered(FOUND, "operator", "topic", INPUT, "Write")


def test_an_operator_deletes_a_removed_tables_topics_and_no_other() -> None:
    """``tidemark tables remove``: the table's change, backfill, changelog and output topics."""
    for name in (
        INPUT,
        OUTPUT,
        topics.changelog_topic("p", INPUT),
        topics.backfill_topic("p", INPUT),
    ):
        assert covered(FOUND, "operator", "topic", name, "Delete"), name
    for name in (topics.control_topic("p"), topics.audit_topic("p"), topics.positions_topic("p")):
        assert not covered(FOUND, "operator", "topic", name, "Delete"), name
    # With the default names, the change topics' prefix covers the pipeline's own topics.
    defaults = grants(Config())
    pipeline = Config().processor.pipeline
    table = topics.change_topic(Config().source.topic_prefix, "public.orders")
    assert covered(defaults, "operator", "topic", table, "Delete")
    for name in (
        topics.control_topic(pipeline),
        topics.positions_topic(pipeline),
        topics.signal_topic(pipeline),
        topics.progress_topic(pipeline),
        topics.instances_topic(pipeline),
        topics.dead_letter_topic(pipeline),
        topics.audit_topic(pipeline),
    ):
        assert not covered(defaults, "operator", "topic", name, "Delete"), name


@pytest.mark.parametrize("principal", ["debezium", "processor", "sink", "operator"])
def test_each_grant_becomes_one_kafka_acls_command(principal: str) -> None:
    mine = [g for g in FOUND if g.principal == principal]
    lines = commands(FOUND, {principal: f"User:{principal}"}, "kafka:9093")
    assert len(lines) == len(mine)
    assert all(f"User:{principal}" in line and "--add" in line for line in lines)
    deny = [line for line in lines if "--deny-principal" in line]
    assert len(deny) == sum(g.deny for g in mine)
