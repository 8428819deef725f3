"""``tidemark sink maintain``: compact small files and expire old snapshots of the sink's tables.

Guarantees: the sink's committed offsets survive maintenance and never move
back. Only the sink's MERGE commits carry offsets: the compaction's commit does
not (a MERGE may commit while the compaction runs, and offsets copied from
before it would take the table back), so the sink finds them in the lineage
below it. Snapshots are expired only when older than both the retention and the
newest snapshot that holds offsets, keeping the newest
``sink.retain_last_snapshots`` whatever their age.

Run it between the sink's batches or beside a running sink, on a catalog with
atomic commits (``jdbc``, ``rest``, ``hive``). A ``hadoop`` catalog's commits from two
processes may overwrite each other, so there it runs only when told the sink is
stopped (``sink_stopped``). A compaction and a MERGE that
rewrite the same files conflict: Iceberg fails the later commit, which changes
nothing; maintenance tries again (``MAINTAIN_TRIES``), and the sink merges the
batch again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_sink.job import Sink
from spark_sink.reader import sink_topics
from spark_sink.session import create_session, stop_session
from spark_sink.writer import Table, commit_conflict
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError

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


def maintain(
    config: Config, spark: SparkSession | None = None, *, sink_stopped: bool = False
) -> list[Maintained]:
    """Compact and expire every existing table of the sink's topics; refused on a
    ``hadoop`` catalog unless ``sink_stopped``."""
    if config.sink.catalog_type == "hadoop" and not sink_stopped:
        raise TidemarkError(
            "a hadoop catalog's commits from two processes can overwrite each other: "
            "maintenance beside a running sink could drop its commits. Stop the sink, "
            "then run `tidemark sink maintain --sink-stopped`"
        )
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
    for attempt in range(1, MAINTAIN_TRIES + 1):
        try:
            rewritten = (
                actions.rewriteDataFiles(table.iceberg())
                .option("min-input-files", str(sink.min_input_files))
                .option("target-file-size-bytes", str(sink.target_file_size_mb * 1024 * 1024))
                .execute()
            )
            break
        except Exception as exc:
            if attempt == MAINTAIN_TRIES or not commit_conflict(exc):
                raise
            log.warning("%s: the compaction met a concurrent commit; again", table.path)
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
    result = Maintained(
        table.path,
        rewritten.rewrittenDataFilesCount(),
        rewritten.addedDataFilesCount(),
        expired.deletedManifestListsCount(),  # one manifest list per snapshot
        expired.deletedDataFilesCount() + expired.deletedManifestsCount(),
    )
    log.info("%s", result)
    return result
