"""Every topic and consumer-group name of a pipeline, made in one place.

A pipeline named ``p`` reading Debezium's topics of prefix ``x`` uses:

- input: ``x.<schema>.<table>`` (Debezium's change topics), and its own signal
  table's change topic;
- output: ``x.reconciled.<schema>.<table>``;
- per input topic: ``p.changelog.<input>`` (state) and ``p.backfill.<input>``
  (the rows of incremental snapshots);
- per pipeline: ``p.dlq``, ``p.positions``, ``p.control``, ``p.signals``,
  ``p.snapshots`` (snapshot progress), ``p.notifications``, ``p.instances``,
  ``p.sink-status`` and ``p.audit``;
- consumer groups ``p-dataplane`` (the data plane's, apart from Faust's own)
  and ``p-<role>`` for every other reader.

Nothing else spells these names (transactional ids included), so renaming one is an
edit here.
"""

from __future__ import annotations

import re

#: Output topics sit under ``<prefix>.reconciled.``.
RECONCILED = "reconciled"
_BACKFILL = ".backfill."


# -- per input topic --------------------------------------------------------


def output_topic(prefix: str, input_topic: str) -> str:
    """``<prefix>.<schema>.<table>`` becomes ``<prefix>.reconciled.<schema>.<table>``."""
    head = prefix + "."
    rest = input_topic[len(head) :] if input_topic.startswith(head) else input_topic
    return f"{prefix}.{RECONCILED}.{rest}"


def changelog_topic(pipeline: str, input_topic: str) -> str:
    """The changelog of the stores of ``input_topic``."""
    return f"{pipeline}.changelog.{input_topic}"


def backfill_topic(pipeline: str, input_topic: str) -> str:
    """The backfill topic of ``input_topic`` in ``pipeline``."""
    return f"{pipeline}{_BACKFILL}{input_topic}"


def backfill_prefix(pipeline: str) -> str:
    """What every backfill topic of ``pipeline`` starts with."""
    return pipeline + _BACKFILL


def backfilled_topic(pipeline: str, topic: str) -> str | None:
    """The input topic whose backfill topic ``topic`` is, or ``None``."""
    head = backfill_prefix(pipeline)
    return topic[len(head) :] if topic.startswith(head) and len(topic) > len(head) else None


def change_topic(prefix: str, table: str) -> str:
    """Debezium's change topic of ``schema.table`` (its ``topic.prefix`` is ``prefix``)."""
    return f"{prefix}.{table}"


def input_pattern(prefix: str) -> str:
    """Debezium's change topics of ``prefix``, without the reconciled topics and the change
    topics of the signal and heartbeat tables."""
    escaped = re.escape(prefix)
    return (
        rf"^{escaped}\.(?!{RECONCILED}\.)[^.]+\."
        r"(?!(?:debezium_signal|tidemark_signal|tidemark_heartbeat)$)[^.]+$"
    )


def output_pattern(prefix: str) -> str:
    """Every output topic of ``prefix`` (what the sink reads by default)."""
    return rf"^{re.escape(prefix)}\.{RECONCILED}\.[^.]+\.[^.]+$"


# -- per pipeline -----------------------------------------------------------


def dead_letter_topic(pipeline: str) -> str:
    """Messages that cannot be processed, unchanged, with their reason in headers."""
    return f"{pipeline}.dlq"


def positions_topic(pipeline: str) -> str:
    """Where the data plane records the source position of each partition's last change."""
    return f"{pipeline}.positions"


def control_topic(pipeline: str) -> str:
    """The pipeline's lifecycle and the offsets write in progress."""
    return f"{pipeline}.control"


def signal_topic(pipeline: str) -> str:
    """Snapshot signals written by ``tidemark snapshot`` and the API."""
    return f"{pipeline}.signals"


def progress_topic(pipeline: str) -> str:
    """The snapshot coordinator's progress record (compacted)."""
    return f"{pipeline}.snapshots"


def instances_topic(pipeline: str) -> str:
    """Each running instance's last report of itself (compacted)."""
    return f"{pipeline}.instances"


def sink_status_topic(pipeline: str) -> str:
    """Each Iceberg table's status as the sink last saw it (compacted)."""
    return f"{pipeline}.sink-status"


def audit_topic(pipeline: str) -> str:
    """Every operator action: who, what, when, and what came of it (append-only)."""
    return f"{pipeline}.audit"


def notification_topic(pipeline: str) -> str:
    """Snapshot notifications in Debezium's format."""
    return f"{pipeline}.notifications"


# -- consumer groups ----------------------------------------------------------


def dataplane_group(pipeline: str) -> str:
    """The data plane's consumer group (apart from Faust's own): its members own partitions."""
    return f"{pipeline}-dataplane"


def reader_group(pipeline: str, role: str) -> str:
    """The group id of a consumer that only assigns (librdkafka needs one): ``restore``,
    ``control``, ``offsets``, ``status``, ``snapshots-rows``, ``snapshots-probe``,
    ``snapshots-watermarks``, ``sink-reader``. Such a group never has members."""
    return f"{pipeline}-{role}"


def snapshot_group(pipeline: str) -> str:
    """The group whose single member, by owning the signal topic, coordinates snapshots."""
    return f"{pipeline}-snapshots"


# -- transactional ids --------------------------------------------------------------


def transactional_id(pipeline: str, partition_count: int, partition: int) -> str:
    """The producer id of the records of every input partition numbered ``partition`` in
    a topic of ``partition_count`` (a slot, :mod:`processor.dataplane.writers`): the
    owner that takes one over fences the slot's previous holder by it."""
    return f"{pipeline}.dataplane.slot-{partition_count}-{partition}"


def coordinator_transactional_id(pipeline: str) -> str:
    """The producer id of the snapshot coordinator's progress: a new leader fences the last."""
    return f"{pipeline}.snapshots.coordinator"
