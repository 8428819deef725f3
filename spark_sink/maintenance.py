"""Maintenance of one sink table: compaction, rewrites of delete files and manifests,
snapshot expiry and orphan-file removal, in Iceberg's Spark actions.

Guarantees: the sink's committed offsets survive maintenance and never move back. Only
the sink's MERGE commits carry offsets: the compaction's commit does not (a MERGE may
commit while the compaction runs, and offsets copied from before it would take the table
back), so the sink finds them in the lineage below it. Snapshots are expired only when
older than both the retention and the newest snapshot that holds offsets, keeping the
newest ``sink.retain_last_snapshots`` whatever their age. Orphan files (no snapshot
refers to them) are removed only past ``sink.orphan_file_age_hours``: a writer's files
are orphans until its commit, and a MERGE of another process may still be running.

A compaction and a MERGE that rewrite the same files conflict: Iceberg fails the later
commit, which changes nothing; the compaction is tried again (:data:`MAINTAIN_TRIES`),
and the sink merges its batch again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_sink.writer import Table, commit_conflict
from tidemark.core.config import SinkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
#: Compactions tried per table while concurrent commits conflict with them.
MAINTAIN_TRIES = 5


@dataclass(frozen=True)
class Maintained:
    """What maintenance did to one table."""

    table: str
    rewritten_files: int
    added_files: int
    expired_snapshots: int
    deleted_files: int
    rewritten_delete_files: int = 0
    rewritten_manifests: int = 0
    orphan_files: int = 0


def maintain_table(sink: SinkConfig, spark: SparkSession, table: Table) -> Maintained:
    """Compact ``table``'s small data files and delete files, rewrite its manifests
    (from ``sink.min_input_files`` manifests on), expire its old snapshots and remove its
    old orphan files."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    target = str(sink.target_file_size_mb * 1024 * 1024)
    rewritten = _tried(
        table,
        lambda: (
            actions.rewriteDataFiles(table.iceberg())
            .option("min-input-files", str(sink.min_input_files))
            .option("target-file-size-bytes", target)
            .execute()
        ),
    )
    deletes = _tried(
        table,
        lambda: (
            actions.rewritePositionDeletes(table.iceberg())
            .option("min-input-files", str(sink.min_input_files))
            .execute()
        ),
    )
    manifests = 0
    current = table.iceberg()
    snapshot = current.currentSnapshot()
    if snapshot is not None and snapshot.dataManifests(current.io()).size() >= sink.min_input_files:
        rewrite = _tried(table, lambda: actions.rewriteManifests(table.iceberg()).execute())
        manifests = _count(jvm, rewrite.rewrittenManifests())
    cutoff_ms = int((time.time() - sink.snapshot_retention_hours * 3600) * 1000)
    _offsets, holder = table.committed()  # read after the compaction: the newest holder
    if holder is not None:
        cutoff_ms = min(cutoff_ms, holder.timestampMillis())
    expired = (
        actions.expireSnapshots(table.iceberg())
        .expireOlderThan(cutoff_ms)
        .retainLast(sink.retain_last_snapshots)
        .execute()
    )
    orphans = 0
    if sink.orphan_file_age_hours > 0:
        older_than = int((time.time() - sink.orphan_file_age_hours * 3600) * 1000)
        removed = actions.deleteOrphanFiles(table.iceberg()).olderThan(older_than).execute()
        orphans = _count(jvm, removed.orphanFileLocations())
    result = Maintained(
        table.path,
        rewritten.rewrittenDataFilesCount(),
        rewritten.addedDataFilesCount(),
        expired.deletedManifestListsCount(),  # one manifest list per snapshot
        expired.deletedDataFilesCount() + expired.deletedManifestsCount(),
        deletes.rewrittenDeleteFilesCount(),
        manifests,
        orphans,
    )
    log.info("%s", result)
    return result


def _tried(table: Table, action: Any) -> Any:
    """``action()``, tried again while it meets a concurrent commit."""
    attempt = 1
    while True:
        try:
            return action()
        except Exception as exc:
            if attempt == MAINTAIN_TRIES or not commit_conflict(exc):
                raise
            log.warning("%s: maintenance met a concurrent commit; again", table.path)
            attempt += 1


def _count(jvm: Any, iterable: Any) -> int:
    """The size of a Java ``Iterable`` (counted in the JVM, not item by item over py4j)."""
    return int(jvm.org.apache.iceberg.relocated.com.google.common.collect.Iterables.size(iterable))
