"""Prometheus metrics of the sink's driver (served on ``sink.metrics_port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

BATCHES = Counter("tidemark_sink_batches_total", "Micro-batches merged into a table", ["table"])
ROWS_MERGED = Counter(
    "tidemark_sink_rows_merged_total",
    "Rows merged into a table (the newest event per key of each batch)",
    ["table"],
)
BATCH_SECONDS = Histogram(
    "tidemark_sink_batch_seconds",
    "Time to plan, read, merge and commit one table's micro-batch",
    ["table"],
    buckets=(0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320),
)
LAG = Gauge(
    "tidemark_sink_lag",
    "Records of a reconciled topic's partition not yet committed to its table",
    ["topic", "partition"],
)
COMMITTED_OFFSET = Gauge(
    "tidemark_sink_committed_offset",
    "Next offset to read per partition, as committed with the table's data",
    ["topic", "partition"],
)
TABLE_STOPPED = Gauge(
    "tidemark_sink_table_stopped",
    "1 while a table is stopped by an error (an incompatible schema change, an undecodable event)",
    ["table"],
)
RETRIES = Counter(
    "tidemark_sink_batch_retries_total",
    "Batches of a table tried again: a read stalled, Kafka did not answer, a commit conflicted",
    ["table"],
)
UNREAD_AGE = Gauge(
    "tidemark_sink_unread_age_seconds",
    "How long a partition's oldest unread record may have waited (0: none waits); past its "
    "topic's delete.retention.ms, compaction may remove deletes the table never saw",
    ["topic", "partition"],
)
DELETE_RETENTION = Gauge(
    "tidemark_sink_delete_retention_seconds",
    "The delete.retention.ms of a compacted reconciled topic, in seconds",
    ["topic"],
)
REBUILDS = Counter(
    "tidemark_sink_table_rebuilds_total",
    "Tables made again from their whole topic after a gap (sink.rebuild_on_gap)",
    ["table"],
)
FRESH_UNTIL = Gauge(
    "tidemark_sink_table_fresh_until_seconds",
    "Unix time before which every record of a table's reconciled topic is in the table "
    "(time() minus it: how stale the table is)",
    ["table"],
)
MAINTENANCE_SECONDS = Histogram(
    "tidemark_sink_maintenance_seconds",
    "Time of one table's maintenance by the long-running sink (compaction, rewrites of "
    "delete files and manifests, snapshot expiry, orphan removal)",
    ["table"],
    buckets=(1, 5, 15, 60, 300, 900, 3600),
)
MAINTENANCE_FAILURES = Counter(
    "tidemark_sink_maintenance_failures_total",
    "Maintenances of a table in which a step failed (tried again an interval later)",
    ["table"],
)
FILES_COMPACTED = Counter(
    "tidemark_sink_files_compacted_total",
    "Data and delete files maintenance rewrote into fewer",
    ["table"],
)
MAINTAINED_AT = Gauge(
    "tidemark_sink_table_maintained_seconds",
    "Unix time of a table's last maintenance that ran every step, whatever came of them "
    "(by the sink, or by `sink maintain` as the table said when the sink first saw it)",
    ["table"],
)
