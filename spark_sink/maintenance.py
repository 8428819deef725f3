"""Maintenance of one sink table: compaction, rewrites of delete files and manifests,
snapshot expiry and orphan-file removal, in Iceberg's Spark actions.

Guarantees: the sink's committed offsets survive maintenance and never move back. Only
the sink's MERGE commits carry offsets: the compaction's commit does not (a MERGE may
commit while the compaction runs, and offsets copied from before it would take the table
back), so the sink finds them in the lineage below it. Snapshots are expired only when
older than both the retention and the newest snapshot that holds offsets, keeping the
newest ``sink.retain_last_snapshots`` whatever their age. Orphan files (no snapshot
refers to them) are removed only past ``sink.orphan_file_age_hours`` (a day at least): a
writer's files are orphans until its commit, and another process's compaction may still
be running.

Each step is tried on its own, and the steps after one that did not complete run. A
step whose commit still meets concurrent commits after :data:`MAINTAIN_TRIES` tries (each
a little later) is reported in :attr:`Maintained.conflicted`: a writer beside it
committed each time (a compaction and a MERGE that rewrite the same files conflict;
Iceberg fails the later commit, which changes nothing, and the sink merges its batch
again). A step that fails otherwise is reported in :attr:`Maintained.failed`. The time of
the last maintenance that ran every step, whatever came of them, is kept in the table's
property ``tidemark.maintained-at-ms``: a sink that restarts often still maintains its
tables on time, and a step that always fails does not make every start try again.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_sink.writer import Table, commit_conflict
from tidemark.core.catalogs import on_object_storage
from tidemark.core.config import SinkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
#: Tries of a step while concurrent commits conflict with it (the n-th waits n s more).
MAINTAIN_TRIES = 5
#: The table property that holds when (Unix ms) the table was last maintained.
MAINTAINED_PROPERTY = "tidemark.maintained-at-ms"


@dataclass(frozen=True)
class Maintained:
    """What maintenance did to one table, and the steps that did not complete (with the
    reason): met concurrent commits each time, or failed otherwise."""

    table: str
    rewritten_files: int = 0
    added_files: int = 0
    expired_snapshots: int = 0
    deleted_files: int = 0
    rewritten_delete_files: int = 0
    rewritten_manifests: int = 0
    orphan_files: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    conflicted: dict[str, str] = field(default_factory=dict)
    #: The time (Unix ms) recorded in the table's properties; ``None`` when a stop left
    #: steps undone, or the record failed.
    recorded_ms: int | None = None


def maintained_at(table: Table) -> int | None:
    """When (Unix ms) ``table`` was last maintained, by the sink or ``sink maintain``."""
    value = table.iceberg().properties().get(MAINTAINED_PROPERTY)
    return int(value) if value is not None and value.isdigit() else None


def first_due_in_s(topic: str, interval_s: float, last_ms: int | None, now_ms: int) -> float:
    """How long after a sink first sees ``topic``'s table its maintenance is due: an
    interval after the last one (``last_ms``), at most. A table never maintained, or
    overdue, comes due at a point fixed by its name, within the interval (at most 10
    minutes for one overdue, which after a long stop may be every table), so that tables
    come due apart."""
    spread = zlib.crc32(topic.encode()) / 2**32
    if last_ms is None:
        return interval_s * spread
    wait_s = min(interval_s, (last_ms - now_ms) / 1000 + interval_s)
    return wait_s if wait_s > 0 else min(interval_s, 600.0) * spread


def reason_of(exc: BaseException) -> str:
    """The first line of ``exc``'s message (Spark's carry the JVM's stack), or its type."""
    text = str(exc)
    return text.splitlines()[0][:500] if text.strip() else type(exc).__name__


def maintain_table(
    sink: SinkConfig,
    spark: SparkSession,
    table: Table,
    stopping: Callable[[], bool] = lambda: False,
) -> Maintained:
    """Compact ``table``'s small data files and delete files, rewrite its manifests
    (from ``sink.min_input_files`` manifests on), expire its old snapshots and remove its
    old orphan files; then record the time in the table's properties. No step starts
    once ``stopping()``, and the time is not recorded then."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    done: dict[str, int] = {}
    failed: dict[str, str] = {}
    conflicted: dict[str, str] = {}
    left: list[str] = []  # the steps a stop left undone

    def step(name: str, action: Callable[[], dict[str, int]], commits: bool = True) -> None:
        if left or stopping():
            left.append(name)
            return
        try:
            done.update(_tried(table, action) if commits else action())
        except Exception as exc:  # noqa: BLE001 - reported; the next steps run
            reason = reason_of(exc)
            (conflicted if commits and met_commits(exc) else failed)[name] = reason
            log.warning("%s: maintenance: %s did not complete: %s", table.path, name, reason)

    def compact() -> dict[str, int]:
        result = (
            actions.rewriteDataFiles(table.iceberg())
            .option("min-input-files", str(sink.min_input_files))
            .option("target-file-size-bytes", str(sink.target_file_size_mb * 1024 * 1024))
            .execute()
        )
        return {
            "rewritten_files": result.rewrittenDataFilesCount(),
            "added_files": result.addedDataFilesCount(),
            "removed_deletes": result.removedDeleteFilesCount(),
        }

    def compact_deletes() -> dict[str, int]:
        result = (
            actions.rewritePositionDeletes(table.iceberg())
            .option("min-input-files", str(sink.min_input_files))
            .execute()
        )
        return {"rewritten_deletes": result.rewrittenDeleteFilesCount()}

    def rewrite_manifests() -> dict[str, int]:
        current = table.iceberg()
        snapshot = current.currentSnapshot()
        if snapshot is None or snapshot.dataManifests(current.io()).size() < sink.min_input_files:
            return {}
        result = actions.rewriteManifests(current).execute()
        return {"rewritten_manifests": _count(jvm, result.rewrittenManifests())}

    def expire() -> dict[str, int]:
        cutoff_ms = int((time.time() - sink.snapshot_retention_hours * 3600) * 1000)
        _offsets, holder = table.committed()  # read after the compaction: the newest holder
        if holder is not None:
            cutoff_ms = min(cutoff_ms, holder.timestampMillis())
        result = (
            actions.expireSnapshots(table.iceberg())
            .expireOlderThan(cutoff_ms)
            .retainLast(sink.retain_last_snapshots)
            .execute()
        )
        return {
            "expired_snapshots": result.deletedManifestListsCount(),  # one per snapshot
            "deleted_files": result.deletedDataFilesCount()
            + result.deletedPositionDeleteFilesCount()
            + result.deletedEqualityDeleteFilesCount()
            + result.deletedManifestsCount(),
        }

    def remove_orphans() -> dict[str, int]:
        if not sink.orphan_file_age_hours:
            return {}
        older_than = int((time.time() - sink.orphan_file_age_hours * 3600) * 1000)
        current = table.iceberg()
        # Spark lists a table's files through Hadoop's file systems, which know no s3://
        # here: on object storage the table's FileIO lists them by prefix.
        result = (
            actions.deleteOrphanFiles(current)
            .olderThan(older_than)
            .usePrefixListing(on_object_storage(current.location()))
            .execute()
        )
        return {"orphan_files": _count(jvm, result.orphanFileLocations())}

    step("compaction", compact)
    step("delete files", compact_deletes)
    step("manifests", rewrite_manifests)
    step("expiry", expire)
    step("orphan files", remove_orphans, commits=False)  # deletes files, commits nothing
    step("recording the time", lambda: {"recorded_ms": _record_time(table)})
    if left:
        log.info("%s: maintenance stopped before %s: the sink is stopping", table.path, left)
    result = Maintained(
        table.path,
        done.get("rewritten_files", 0),
        done.get("added_files", 0),
        done.get("expired_snapshots", 0),
        done.get("deleted_files", 0),
        done.get("rewritten_deletes", 0) + done.get("removed_deletes", 0),
        done.get("rewritten_manifests", 0),
        done.get("orphan_files", 0),
        failed,
        conflicted,
        done.get("recorded_ms"),
    )
    log.info("%s", result)
    return result


def _record_time(table: Table) -> int:
    now_ms = int(time.time() * 1000)
    table.iceberg().updateProperties().set(MAINTAINED_PROPERTY, str(now_ms)).commit()
    return now_ms


def met_commits(exc: BaseException) -> bool:
    """Whether ``exc`` is a maintenance commit refused for another writer's commits: a
    conflict (:func:`~spark_sink.writer.commit_conflict`) that is not one of Iceberg's
    validations of the table itself (an orphan listing's location mismatch stays)."""
    text = str(exc)
    return commit_conflict(exc) and any(
        marker in text
        for marker in (
            "CommitFailedException",
            "Found conflicting files",
            "could not be found in the latest snapshot",
            "concurrently modified",
        )
    )


def _tried(table: Table, action: Callable[[], dict[str, int]]) -> dict[str, int]:
    """``action()``, tried again, each time a second later more, while it meets
    concurrent commits."""
    attempt = 1
    while True:
        try:
            return action()
        except Exception as exc:
            if attempt == MAINTAIN_TRIES or not met_commits(exc):
                raise
            log.warning("%s: maintenance met a concurrent commit; again", table.path)
            time.sleep(attempt)
            attempt += 1


def _count(jvm: Any, iterable: Any) -> int:
    """The size of a Java ``Iterable`` (counted in the JVM, not item by item over py4j)."""
    return int(jvm.org.apache.iceberg.relocated.com.google.common.collect.Iterables.size(iterable))
