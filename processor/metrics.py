"""Prometheus metrics of the processor (served at ``/metrics``)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

EVENTS_IN = Counter("tidemark_events_in_total", "Input messages consumed", ["topic"])
EVENTS_OUT = Counter(
    "tidemark_events_out_total", "Reconciled events and tombstones produced", ["topic"]
)
EVENTS_DROPPED = Counter(
    "tidemark_events_dropped_total", "Input changes dropped as replays of older versions", ["topic"]
)
ROWS_ASKED_AGAIN = Counter(
    "tidemark_rows_asked_again_total",
    "Keys whose row is read again from the source (an unchanged TOAST value with no row to "
    "fill it from)",
    ["topic"],
)
TRUNCATES = Counter(
    "tidemark_truncates_total",
    "Truncate events read from an input topic and sent to every partition's owner",
    ["topic"],
)
TRUNCATED_ROWS = Counter(
    "tidemark_truncated_rows_total",
    "Keys deleted from the reconciled topic because their table was truncated",
    ["topic"],
)
CONTROL_REFUSED = Counter(
    "tidemark_control_records_refused_total",
    "Records of the pipeline's control topic refused: not what Tidemark writes there",
    ["key"],
)
DEAD_LETTERS = Counter(
    "tidemark_dead_letters_total",
    "Input messages sent to the dead-letter topic",
    ["topic", "reason"],
)
SOURCE_REFUSED = Gauge(
    "tidemark_source_refused",
    "1 while an input topic is stopped: it breaks its envelope's constraints, or the schema "
    "registry refused what it needs",
    ["topic"],
)
SLOT_MISSING = Gauge(
    "tidemark_source_slot_missing",
    "1 while the source has no replication slot of this name (source.replication_slot)",
    ["slot"],
)
SLOT_ACTIVE = Gauge(
    "tidemark_source_slot_active", "1 while a client (Debezium) streams from the slot", ["slot"]
)
SLOT_RETAINED_WAL = Gauge(
    "tidemark_source_slot_retained_wal_bytes",
    "Bytes of WAL the replication slot holds back on the source",
    ["slot"],
)
SLOT_WAL_STATUS = Gauge(
    "tidemark_source_slot_wal_status",
    "1 for the slot's wal_status: reserved, extended, unreserved (WAL past "
    "max_slot_wal_keep_size, about to be lost) or lost (the slot can stream no more)",
    ["slot", "status"],
)
SLOT_SAFE_WAL = Gauge(
    "tidemark_source_slot_safe_wal_bytes",
    "Bytes of WAL that may still be written before the slot is lost (-1: no limit)",
    ["slot"],
)
SLOT_READ_FAILURES = Counter(
    "tidemark_source_slot_read_failures_total",
    "Readings of the replication slot that failed: the source could not be reached or refused",
)
PARTITION_REFUSED = Gauge(
    "tidemark_partition_refused",
    "1 while an input partition is stopped: its state holds an entry of a format this "
    "release cannot read, or its source's positions went back (a new position epoch)",
    ["topic", "partition"],
)
RESTORE_RECORDS = Counter(
    "tidemark_restore_records_total", "Changelog records applied to restore state", ["topic"]
)
RESTORING_PARTITIONS = Gauge(
    "tidemark_restoring_partitions", "Input partitions waiting for their state to be restored"
)
CONSUMER_LAG = Gauge(
    "tidemark_consumer_lag",
    "Messages between the processed position and the partition's end",
    ["topic", "partition"],
)
BATCH_SECONDS = Histogram(
    "tidemark_batch_seconds",
    "Time to process and commit one batch",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
ASSIGNED_PARTITIONS = Gauge(
    "tidemark_assigned_partitions", "Input partitions owned by this instance"
)
BATCH_LIMIT = Gauge(
    "tidemark_batch_limit",
    "Rows the data plane takes a batch: processor.batch_size, less after slow batches",
)
PRODUCERS = Gauge(
    "tidemark_dataplane_producers",
    "Transactional producers of the data plane: one per partition slot owned",
)
SNAPSHOT_ROWS = Counter(
    "tidemark_snapshot_rows_total", "Rows read by incremental snapshots", ["table"]
)
SNAPSHOT_CHUNKS = Counter(
    "tidemark_snapshot_chunks_total", "Chunks read by incremental snapshots", ["table"]
)
SNAPSHOT_PROGRESS = Gauge(
    "tidemark_snapshot_progress_ratio",
    "Share of the table read by its running or last snapshot (0 to 1)",
    ["table"],
)
SNAPSHOT_REMAINING_SECONDS = Gauge(
    "tidemark_snapshot_remaining_seconds",
    "Estimated time left in the table's running snapshot",
    ["table"],
)
SNAPSHOT_QUEUED_TABLES = Gauge(
    "tidemark_snapshot_queued_tables", "Tables waiting for or in an incremental snapshot"
)
SNAPSHOT_REFUSED = Counter(
    "tidemark_snapshot_refused_total",
    "Backfills of a table refused before its first row, by reason (the Debezium setting "
    "the table's events disagree with, or other)",
    ["table", "reason"],
)
PARTITIONER_MISMATCHES = Counter(
    "tidemark_partitioner_mismatches_total",
    "Sampled change events not in the partition source.partitioner gives their key",
    ["topic"],
)
SNAPSHOT_PAUSED = Gauge("tidemark_snapshot_paused", "1 while incremental snapshots are paused")
SNAPSHOT_LEADER = Gauge(
    "tidemark_snapshot_leader", "1 on the instance that coordinates incremental snapshots"
)
SNAPSHOT_PROGRESS_REFUSED = Gauge(
    "tidemark_snapshot_progress_refused",
    "1 on the leader whose snapshot progress record is unreadable or unsigned: backfills wait",
)
OUTAGE_SECONDS = Gauge(
    "tidemark_outage_seconds",
    "How long a loop has been waiting for Kafka to answer (0: it is not)",
    ["loop"],
)
WINDOW_BUFFERED_ROWS = Gauge(
    "tidemark_window_buffered_rows",
    "Chunk rows of signal-table windows waiting for their partition to pass the window",
    ["topic"],
)
AUDIT_FAILED = Counter(
    "tidemark_audit_records_failed_total",
    "Operator actions done whose audit record Kafka did not take (the log says which)",
)
API_AUTH_FAILURES = Counter(
    "tidemark_api_auth_failures_total",
    "Requests to the web port refused for their token (missing, wrong) or for too many failures",
    ["reason"],
)

#: The families labelled by topic: an input topic, its backfill topic or its output.
BY_TOPIC = (
    EVENTS_IN,
    EVENTS_OUT,
    EVENTS_DROPPED,
    ROWS_ASKED_AGAIN,
    TRUNCATES,
    TRUNCATED_ROWS,
    DEAD_LETTERS,
    SOURCE_REFUSED,
    PARTITION_REFUSED,
    RESTORE_RECORDS,
    CONSUMER_LAG,
    PARTITIONER_MISMATCHES,
    WINDOW_BUFFERED_ROWS,
)


def forget_topics(topics: Iterable[str]) -> None:
    """Take the series of ``topics`` out of ``/metrics``: a removed table's, which would
    otherwise stay until a restart."""
    for topic in topics:
        for family in BY_TOPIC:
            family.remove_by_labels({"topic": topic})
