"""The Kafka permissions each component of a pipeline needs, least privilege first.

One principal per component: Debezium (writes change topics), the processor, the sink,
and the operators who run the ``tidemark`` CLI. The console has none: it reads through
the processor's API. :func:`grants` is the set for a configuration (``tidemark
kafka-acls`` prints it as ``kafka-acls.sh`` commands), derived from the names of
:mod:`tidemark.core.topics`, so a topic or group added there is covered here or the
tests say so (``tests/unit/test_acls.py``, and ``test_secrets.py`` against what a real
run made).

Topics and groups of a pipeline ``p`` are granted by the prefixes ``p.`` and ``p-``
(Faust's own are ``p-*``, and its group is ``p``), never ``p`` alone, which would also
cover a pipeline named ``p2``. The reconciled topics sit under Debezium's prefix
(``<prefix>.reconciled.``): Debezium's grant on its prefix is paired with a DENY on
theirs, which Kafka applies before any ALLOW.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tidemark.core.config import Config
from tidemark.core.topics import (
    RECONCILED,
    audit_topic,
    backfill_topic,
    changelog_topic,
    control_topic,
    dead_letter_topic,
    instances_topic,
    notification_topic,
    positions_topic,
    progress_topic,
    reader_group,
    signal_topic,
    sink_status_topic,
)

#: The components, each with a principal of its own.
PRINCIPALS = ("debezium", "processor", "sink", "operator")
#: What a topic of the pipeline's own takes: read, written, made, its settings aligned.
_OWN_TOPIC = ("Read", "Write", "Create", "Describe", "DescribeConfigs", "AlterConfigs")


@dataclass(frozen=True)
class Grant:
    """Operations on one resource (``topic``, ``group``, ``transactional-id``,
    ``cluster``), by literal name or prefix, for one component, and why."""

    principal: str
    resource: str
    pattern: str
    name: str
    operations: tuple[str, ...]
    why: str
    deny: bool = False

    def covers(self, resource: str, name: str) -> bool:
        """Whether this grant's resource and pattern take ``name``."""
        if resource != self.resource:
            return False
        return name.startswith(self.name) if self.pattern == "prefixed" else name == self.name


def grants(config: Config) -> list[Grant]:
    """Every grant of a pipeline configured as ``config``."""
    prefix, pipeline = config.source.topic_prefix, config.processor.pipeline
    outputs = f"{prefix}.{RECONCILED}."
    own = (f"{pipeline}.", f"{pipeline}-")
    return [
        Grant("debezium", "topic", "prefixed", f"{prefix}.", ("Write", "Create", "Describe"),
              "its change topics (its own offsets and history topics are its runtime's)"),
        Grant("debezium", "topic", "literal", f"__debezium-heartbeat.{prefix}",
              ("Write", "Create", "Describe"), "its heartbeats (heartbeat.interval.ms)"),
        Grant("debezium", "topic", "prefixed", outputs, ("Write",),
              "not the reconciled topics, which share its prefix", deny=True),
        Grant("debezium", "cluster", "literal", "kafka-cluster", ("IdempotentWrite",),
              "an idempotent producer (brokers before 3.0)"),
        Grant("processor", "topic", "prefixed", f"{prefix}.", ("Read", "Describe"),
              "the change topics it reads, its signal table's among them"),
        Grant("processor", "topic", "prefixed", outputs,
              ("Write", "Create", "Describe", "DescribeConfigs", "AlterConfigs"),
              "the reconciled topics: made, their settings aligned, written"),
        *(Grant("processor", "topic", "prefixed", p, _OWN_TOPIC,
                f"the pipeline's own topics ({p}*)") for p in own),
        Grant("processor", "topic", "literal", audit_topic(pipeline), ("AlterConfigs", "Delete"),
              "the audit trail's retention is a Kafka administrator's, not the pipeline's",
              deny=True),
        Grant("processor", "group", "literal", pipeline, ("Read", "Describe"),
              "Faust's group"),
        Grant("processor", "group", "prefixed", f"{pipeline}-", ("Read", "Describe", "Delete"),
              "the data plane's, the coordinator's and the readers' groups; Delete for an "
              "offsets write that deletes the data plane's group"),
        Grant("processor", "transactional-id", "prefixed", f"{pipeline}.", ("Write", "Describe"),
              "a producer per input partition, and the coordinator's"),
        Grant("processor", "cluster", "literal", "kafka-cluster", ("IdempotentWrite",),
              "transactional producers (brokers before 3.0)"),
        Grant("sink", "topic", "prefixed", outputs, ("Read", "Describe", "DescribeConfigs"),
              "the reconciled topics, and their delete.retention.ms (gaps)"),
        Grant("sink", "topic", "literal", sink_status_topic(pipeline), _OWN_TOPIC,
              "each table's status, for the API and the console"),
        Grant("sink", "group", "literal", reader_group(pipeline, "sink-reader"),
              ("Read", "Describe"), "its reader's group (it assigns, never commits)"),
        Grant("operator", "topic", "prefixed", f"{prefix}.", ("Read", "Describe"),
              "the change topics' offsets, for offsets reads and writes"),
        *(Grant("operator", "topic", "prefixed", p, _OWN_TOPIC,
                "signals, the lifecycle, offsets plans, status, progress repair")
          for p in own),
        *(Grant("operator", "topic", "prefixed", p, ("Delete",),
                "tidemark tables remove: a removed table's topics")
          for p in (f"{prefix}.", changelog_topic(pipeline, ""), backfill_topic(pipeline, ""))),
        # With the default names (pipeline and topic prefix both "tidemark") the change
        # topics' prefix covers the pipeline's own topics too.
        *(Grant("operator", "topic", "literal", t, ("Delete",),
                "the pipeline's own topics are never a table's", deny=True)
          for t in (control_topic(pipeline), positions_topic(pipeline), signal_topic(pipeline),
                    progress_topic(pipeline), instances_topic(pipeline),
                    sink_status_topic(pipeline), notification_topic(pipeline),
                    dead_letter_topic(pipeline))),
        Grant("operator", "topic", "literal", audit_topic(pipeline), ("AlterConfigs", "Delete"),
              "the audit trail's retention is a Kafka administrator's, not an operator's",
              deny=True),
        Grant("operator", "group", "prefixed", f"{pipeline}-", ("Read", "Describe", "Delete"),
              "the data plane's offsets: read, moved, its group deleted"),
        Grant("operator", "transactional-id", "prefixed", f"{pipeline}.", ("Write", "Describe"),
              "tidemark snapshot reset-progress and sign-progress write as the coordinator"),
    ]  # fmt: skip


def covered(found: list[Grant], principal: str, resource: str, name: str, operation: str) -> bool:
    """Whether ``principal`` may do ``operation`` on ``resource`` ``name`` under ``found``
    (a DENY wins, as in Kafka)."""
    mine = [g for g in found if g.principal == principal and g.covers(resource, name)]
    if any(g.deny and operation in g.operations for g in mine):
        return False
    return any(not g.deny and operation in g.operations for g in mine)


def commands(found: list[Grant], principals: dict[str, str], bootstrap: str) -> list[str]:
    """``kafka-acls.sh`` commands that add ``found`` for each component's principal
    (``User:...``, from ``principals``)."""
    lines = []
    for grant in found:
        principal = principals.get(grant.principal)
        if principal is None:
            continue
        argv = ["kafka-acls.sh", "--bootstrap-server", bootstrap, "--add"]
        argv += ["--deny-principal" if grant.deny else "--allow-principal", principal]
        for operation in grant.operations:
            argv += ["--operation", operation]
        if grant.resource == "cluster":
            argv += ["--cluster"]
        else:
            argv += [f"--{grant.resource}", grant.name]
            argv += ["--resource-pattern-type", grant.pattern]
        lines.append(f"# {grant.principal}: {grant.why}\n{shlex.join(argv)}")
    return lines
