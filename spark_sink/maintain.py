"""``tidemark sink maintain``: compact small files and expire old snapshots of the sink's tables.

Guarantees: the sink's committed offsets survive maintenance. The compaction
commit carries the offsets of the snapshot it compacted (as its own summary
property), and snapshots are expired only when older than both the retention
and the newest snapshot that holds offsets, keeping the newest
``sink.retain_last_snapshots`` whatever their age. Run it between the sink's
batches or beside a running sink: a compaction that conflicts with a concurrent
MERGE fails its commit (Iceberg validates it) and changes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_sink.job import Sink
from spark_sink.reader import sink_topics
from spark_sink.session import create_session, stop_session
from spark_sink.writer import OFFSETS_PROPERTY, Table, format_offsets
from tidemark.config import Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Maintained:
    """What maintenance did to one table."""

    table: str
    rewritten_files: int
    added_files: int
    expired_snapshots: int
    deleted_files: int


def maintain(config: Config, spark: SparkSession | None = None) -> list[Maintained]:
    """Compact and expire every existing table of the sink's topics."""
    own = spark is None
    session = spark if spark is not None else create_session(config)
    try:
        sink = Sink(config, session)
        done = []
        for topic in sorted(sink_topics(sink.admin, config.sink_pattern(), config.sink.topics)):
            table = sink.table(topic)
            if table.exists():
                done.append(_maintain_table(config, session, table))
        return done
    finally:
        if own:
            stop_session(session)


def _maintain_table(config: Config, spark: SparkSession, table: Table) -> Maintained:
    sink = config.sink
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    offsets, holder = table.committed()
    rewrite = (
        actions.rewriteDataFiles(table.iceberg())
        .option("min-input-files", str(sink.min_input_files))
        .option("target-file-size-bytes", str(sink.target_file_size_mb * 1024 * 1024))
    )
    if holder is not None:
        rewrite = rewrite.snapshotProperty(OFFSETS_PROPERTY, format_offsets(offsets))
    rewritten = rewrite.execute()
    cutoff_ms = int((time.time() - sink.snapshot_retention_hours * 3600) * 1000)
    _offsets, holder = table.committed()  # the compaction's own snapshot, when it made one
    if holder is not None:
        cutoff_ms = min(cutoff_ms, holder.timestampMillis())
    expired = (
        actions.expireSnapshots(table.iceberg())
        .expireOlderThan(cutoff_ms)
        .retainLast(sink.retain_last_snapshots)
        .execute()
    )
    result = Maintained(
        table.path,
        rewritten.rewrittenDataFilesCount(),
        rewritten.addedDataFilesCount(),
        expired.deletedManifestListsCount(),  # one manifest list per snapshot
        expired.deletedDataFilesCount() + expired.deletedManifestsCount(),
    )
    log.info("%s", result)
    return result
