"""``tidemark sink``: merge reconciled topics into Iceberg tables, one table per topic.

Guarantees:

- Effectively once per table: the offsets a batch consumed are committed in the
  same Iceberg snapshot as its rows (:mod:`spark_sink.writer`), and read back
  from the newest snapshot that carries them when the sink starts. A crash
  before that commit re-reads the batch; a crash after it re-reads nothing.
- Within a batch the newest event per key wins (by offset; a key lives in one
  partition); deletes and tombstones delete the row (or mark it, with
  ``sink.soft_delete``).
- Topics are found by name and pattern every ``sink.trigger_interval_s``, so a
  new reconciled topic is picked up without a restart.
- A new column appears in its table without a restart; an incompatible schema
  change, an event that cannot be decoded or a value that does not fit its
  column stops that table only, with the reason in the log and the
  ``tidemark_sink_table_stopped`` metric; the other tables go on.
- A batch that fails for a passing reason (a read that stalled, Kafka not
  answering, a commit that met a concurrent one, as ``sink maintain``'s) is
  tried again from the table's commits, on the next round, for up to
  ``kafka.outage_deadline_s``; then its table stops. Kafka not answering when
  the sink lists its topics is waited out as long. Other failures (of Spark or
  the catalog) end the process: a restart resumes from the committed offsets.
- With ``once`` the sink drains every topic to the end it had when the sink
  started, then returns (1 when a table stopped); otherwise it merges each table
  as it is due (:mod:`spark_sink.scheduler`) until SIGTERM or SIGINT, finishing
  the rounds in flight first. Tables' rounds run side by side either way.
- The long-running sink maintains each table every ``sink.maintain_interval_s``
  (:mod:`spark_sink.maintenance`), in the table's turn between its rounds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from pyspark.sql.types import StructType, _parse_datatype_string

from spark_sink import metrics
from spark_sink.errors import (
    DRIFT_MARKER,
    RETRY_MARKER,
    STOP_MARKER,
    SchemaError,
    TableRetry,
    TableStop,
)
from spark_sink.gaps import (
    FirstUnread,
    Gap,
    Partition,
    gap,
    needs_first_unread,
    unread_age_ms,
)
from spark_sink.history import BATCH_COLUMNS, Keeping, keeping
from spark_sink.history import COLUMNS as METADATA_COLUMNS
from spark_sink.layout import (
    LAYOUT_PROPERTY,
    WRITE_MODES,
    Layout,
    check_all,
    check_columns,
    layout_change,
    recorded,
    resolve,
)
from spark_sink.maintenance import first_due_in_s, maintain_table, maintained_at, reason_of
from spark_sink.reader import (
    Range,
    decode_range,
    delete_retention_ms,
    first_unread,
    plan,
    read_context,
    sample,
    scan,
    sink_topics,
    split,
    topic_offsets,
)
from spark_sink.scheduler import Outcome, Schedule, TablePool, stalest_first
from spark_sink.schema import Spec, evolve, union
from spark_sink.session import create_session, stop_session
from spark_sink.stable_ends import Behind, read_ends
from spark_sink.status import StatusBoard
from spark_sink.writer import (
    DELETED,
    OFFSET,
    TIME,
    Table,
    commit_conflict,
    quote,
    unread_since_of,
)
from tidemark.core.config import Config
from tidemark.core.failpoints import Failpoint
from tidemark.core.kafka import client_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


#: A gap of data lost for good is read again this many times, this far apart (seconds),
#: before its table stops.
GAP_CHECKS = 3
GAP_PAUSE_S = 1.0


class Shape(NamedTuple):
    """A table's columns and primary key, as the sink last saw or made them."""

    columns: list[Spec]
    keys: list[str]


class Sink:
    """The sink's state between batches: per topic, the next offset of each partition and
    the shape of its table."""

    def __init__(self, config: Config, spark: SparkSession) -> None:
        self.config = config
        self.spark = spark
        self.context = read_context(config, os.getpid())
        self.admin = AdminClient(client_config(config.kafka))
        self.progress: dict[str, dict[int, int]] = {}
        #: Per topic and partition, a time (ms) before which no unread record was written.
        self.unread_since: dict[str, dict[int, int]] = {}
        #: Per topic, its partitions' first offsets and when its ends were last read (ms).
        self._starts: dict[str, dict[int, int]] = {}
        self._read_ms: dict[str, int] = {}
        #: Per topic, its partitions' high watermarks (at least their stable ends), and
        #: the partitions whose stable end is behind them (:mod:`spark_sink.stable_ends`).
        self._stable: dict[str, dict[int, int]] = {}
        self._high: dict[str, dict[int, int]] = {}
        self._behind: dict[str, dict[int, Behind]] = {}
        #: The stuck stable offset each partition was last read past (logged once).
        self._passed: dict[tuple[str, int], Behind | None] = {}
        #: Per topic, its ``delete.retention.ms`` (``None``: not compacted), read once.
        self._retention: dict[str, int | None] = {}
        #: Stopped tables: topic to the reason.
        self.stopped: dict[str, str] = {}
        #: Tables whose batch is being tried again: topic to since when (monotonic).
        self.retrying: dict[str, float] = {}
        self._shapes: dict[str, Shape] = {}
        #: Per topic, what its table keeps, once the table exists (:meth:`_kept`).
        self._keeps: dict[str, Keeping] = {}
        #: Topics whose table's layout was brought to the configured one (:meth:`_lay_out`).
        self._laid_out: set[str] = set()
        #: Topics whose layout names columns their table lacks yet (logged once).
        self._layout_waits: set[str] = set()
        #: Per topic, the time (ms) before which its table holds every record committed
        #: to it, as of its last round (:meth:`fresh_until`).
        self._fresh: dict[str, int] = {}
        #: Per topic, when (monotonic) its table is next maintained (:meth:`_maintain_if_due`).
        self._maintain_due: dict[str, float] = {}
        #: Set when the sink is asked to stop: no maintenance starts then.
        self.stopping = threading.Event()
        #: Whether :meth:`serve` runs: only the long-running sink maintains.
        self._serving = False
        #: Tables are made one at a time: two in one namespace would both make it.
        self._making = threading.Lock()
        self._committed = Failpoint("sink-committed")
        #: Each table's status, published for the processor (:mod:`spark_sink.status`).
        self.board = StatusBoard(config)

    def ends(self) -> dict[str, dict[int, int]]:
        """The current end offsets of every reconciled topic whose table runs (and, once
        per topic, its ``delete.retention.ms``)."""
        ends = {}
        for topic, partitions in self.topics().items():
            if topic not in self.stopped:
                ends[topic] = self._read_offsets(topic, partitions)
                if topic not in self._retention:
                    with contextlib.suppress(TableRetry):  # asked again by its batch
                        self._retention[topic] = delete_retention_ms(self.admin, topic)
        return ends

    def _read_offsets(self, topic: str, partitions: int) -> dict[int, int]:
        """Read ``topic``'s offsets; the end to read each partition to
        (:func:`~spark_sink.stable_ends.read_ends`). The time of the read, taken before
        it, dates the round: every record committed before it is within the ends."""
        self._read_ms[topic] = int(time.time() * 1000)
        offsets = topic_offsets(self.context.consumer, topic, partitions)
        self._starts[topic], self._stable[topic] = offsets.starts, offsets.stable
        self._high[topic] = {**offsets.stable, **offsets.high}
        stuck_s = self.config.sink.stuck_transaction_s
        ends, self._behind[topic] = read_ends(
            offsets.stable,
            self._high[topic],
            self._behind.get(topic, {}),
            time.monotonic(),
            stuck_s,
        )
        for partition, end in sorted(ends.items()):
            held = offsets.stable[partition]
            behind = self._behind[topic].get(partition)
            if end > held and self._passed.get((topic, partition)) != behind:
                self._passed[(topic, partition)] = behind
                log.warning(
                    "%s[%d]: the last stable offset has stayed at %d for %.0f s, behind "
                    "records up to %d: a transaction the broker does not close; read past it",
                    topic,
                    partition,
                    held,
                    stuck_s,
                    end,
                )
        return ends

    def _past_stable(self, topic: str, ranges: list[Range]) -> list[Range]:
        """``ranges``, those that end past their partition's last stable offset read
        uncommitted."""
        stable = self._stable.get(topic, {})
        return [
            dataclasses.replace(r, uncommitted=True)
            if r.end > stable.get(r.partition, r.end)
            else r
            for r in ranges
        ]

    def run_batch(
        self, targets: dict[str, dict[int, int]], stop: threading.Event | None = None
    ) -> int:
        """Merge every topic up to ``targets`` (capped per batch), tables side by side
        (:mod:`spark_sink.scheduler`), none started once ``stop`` is set; the ranges
        read."""
        topics = [t for t in targets if t not in self.stopped]
        self.stopping = stop or self.stopping
        with TablePool(self.config.sink.concurrent_tables) as pool:
            ordered = stalest_first(topics, self.fresh_until())
            return pool.run_all(ordered, lambda t: self.round_of(t, targets[t]), stop)

    def serve(self, stop: threading.Event) -> None:
        """Merge every table as it is due (:mod:`spark_sink.scheduler`) until ``stop``;
        the rounds in flight then finish."""
        sink = self.config.sink
        self.stopping, self._serving = stop, True
        schedule = Schedule(sink.trigger_interval_s)
        listed: dict[str, int] = {}
        next_listing = 0.0
        with TablePool(sink.concurrent_tables) as pool:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_listing:
                    listed = _waiting_out_kafka(self.topics, self.config, stop)
                    schedule.forget(listed)
                    next_listing = now + sink.trigger_interval_s
                waiting = [t for t in listed if t not in self.stopped and t not in pool.running]
                for topic in schedule.order(schedule.due(waiting, now), self.fresh_until()):
                    if not pool.free:
                        break
                    pool.start(
                        topic, functools.partial(self.round_of, ends=None, partitions=listed[topic])
                    )
                waiting = [t for t in waiting if t not in pool.running]
                # Until a table is due (with a place free) or the next listing; a stop is
                # seen within a second.
                wait_s = max(0.0, next_listing - now)
                if pool.free:
                    wait_s = min(wait_s, schedule.wait_s(waiting, now))
                if pool.running:
                    for topic, outcome in pool.finished(min(wait_s, 1.0)):
                        schedule.done(topic, outcome, time.monotonic())
                else:
                    stop.wait(min(wait_s, 1.0))

    def topics(self) -> dict[str, int]:
        """The reconciled topics the sink merges, with their partition counts."""
        sink = self.config.sink
        return sink_topics(self.admin, self.config.sink_pattern(), sink.topics)

    def fresh_until(self) -> dict[str, int | None]:
        """Per topic, the time (ms) before which every record committed to it is in its
        table, as of its last round (none before a round knew every partition)."""
        return dict(self._fresh)  # one C-level copy: rounds add to it from their threads

    def round_of(self, topic: str, ends: dict[int, int] | None, partitions: int = 0) -> Outcome:
        """One round of ``topic``'s table: merge it up to ``ends`` (``None``: the topic's
        ends now, of ``partitions`` partitions), at most ``max_records_per_partition`` a
        partition; a failure stops the table or has it tried again (:func:`_verdict`)."""
        # Each thread's Spark jobs in a pool of their own: Spark's FAIR scheduling then
        # shares the cores between tables, and a large MERGE holds no other's tasks back.
        self.spark.sparkContext.setLocalProperty(
            "spark.scheduler.pool", threading.current_thread().name
        )
        status = self.board.of(self.table_name(topic), topic)
        more = False
        try:
            if ends is None:
                ends = self._read_offsets(topic, partitions)
            read = self._topic_batch(topic, ends)
        except Exception as exc:
            verdict = _verdict(exc)
            if isinstance(verdict, TableRetry):
                status["retrying"] = verdict.reason
                read = self._retry(topic, verdict.reason)
            elif isinstance(verdict, SchemaError | TableStop):
                self._stop(topic, str(verdict))
                read = 0
            else:
                raise
        else:
            self.retrying.pop(topic, None)
            committed = self.progress.get(topic, {})
            status["retrying"] = None
            status["committed"] = dict(committed)
            status["lag"] = {p: max(0, end - committed.get(p, 0)) for p, end in ends.items()}
            cap = self.config.sink.max_records_per_partition
            more = bool(plan(topic, committed, ends, cap, self._starts.get(topic)))
            since = self.unread_since.get(topic, {})
            fresh = _fresh_until(since) if set(ends) <= set(since) else None
            if fresh is not None:
                self._fresh[topic] = fresh
                metrics.FRESH_UNTIL.labels(self.table_name(topic)).set(fresh / 1000)
        self.board.publish(status["table"])
        if topic not in self.stopped:
            self._maintain_if_due(topic)
        return Outcome(read, more)

    def _maintain_if_due(self, topic: str) -> None:
        """Maintain ``topic``'s table (:mod:`spark_sink.maintenance`) once
        ``sink.maintain_interval_s`` has passed since its last maintenance, as the table's
        properties say (:func:`~spark_sink.maintenance.first_due_in_s`). In the table's
        own turn: none of its commits can meet the maintenance's, on any catalog. A
        failure is logged and counted, and tried again an interval later; the table merges
        on. Only the long-running sink maintains, and none starts once it is stopping."""
        interval = self.config.sink.maintain_interval_s
        if not interval or not self._serving or self.stopping.is_set():
            return
        now = time.monotonic()
        due = self._maintain_due.get(topic)
        if due is not None and now < due:
            return
        self._maintain_due[topic] = now + interval  # also after an error below
        name = self.table_name(topic)
        try:
            table = self.table(topic)
            if due is None:  # first seen by this process: when was it last maintained?
                if not table.exists():
                    del self._maintain_due[topic]  # looked at again next round
                    return
                last = maintained_at(table)
                if last is not None:
                    metrics.MAINTAINED_AT.labels(name).set(last / 1000)
                wait_s = first_due_in_s(topic, interval, last, int(time.time() * 1000))
                self._maintain_due[topic] = now + wait_s
                if wait_s > 0:
                    return
            with metrics.MAINTENANCE_SECONDS.labels(name).time():
                done = maintain_table(self.config.sink, self.spark, table, self.stopping.is_set)
            failed, unfinished = done.failed, {**done.failed, **done.conflicted}
        except Exception as exc:  # noqa: BLE001 - the table merges on; tried again later
            failed = unfinished = {"maintenance": reason_of(exc)}
        else:
            metrics.FILES_COMPACTED.labels(name).inc(
                done.rewritten_files + done.rewritten_delete_files
            )
            if done.recorded_ms is not None:
                metrics.MAINTAINED_AT.labels(name).set(done.recorded_ms / 1000)
        if failed:  # not a writer beside it (`sink maintain`), which comes and goes
            metrics.MAINTENANCE_FAILURES.labels(name).inc()
        if unfinished:
            log.warning(
                "%s: maintenance did not complete, tried again in %.0f s: %s",
                name,
                interval,
                "; ".join(f"{step}: {reason}" for step, reason in unfinished.items()),
            )

    def _retry(self, topic: str, reason: str) -> int:
        """Try ``topic``'s batch again from its table's commits (1), or stop the table once
        it has been tried for longer than the outage deadline (0)."""
        self.progress.pop(topic, None)
        self.unread_since.pop(topic, None)
        self._shapes.pop(topic, None)
        self._laid_out.discard(topic)
        lasted = time.monotonic() - self.retrying.setdefault(topic, time.monotonic())
        deadline = self.config.kafka.outage_deadline_s
        if lasted > deadline:
            self._stop(topic, f"{reason} (tried again for {lasted:.0f} s)")
            return 0
        metrics.RETRIES.labels(self.table(topic).path).inc()
        log.warning("%s: %s; the batch is tried again", topic, reason)
        return 1

    def _stop(self, topic: str, reason: str) -> None:
        self.stopped[topic] = reason
        metrics.TABLE_STOPPED.labels(self.table_name(topic)).set(1)
        status = self.board.of(self.table_name(topic), topic)
        status.update(stopped=True, reason=reason, retrying=None)
        log.error("%s: the table stops, the others go on: %s", topic, reason)

    def table_name(self, topic: str) -> str:
        """``<catalog>.<schema>.<table>`` of the table ``topic`` feeds."""
        namespace, name = topic.split(".")[-2:]
        return f"{self.config.sink.catalog_name}.{namespace}.{name}"

    def table(self, topic: str) -> Table:
        """The table that ``topic`` (``<prefix>.reconciled.<schema>.<table>``) feeds; a
        :class:`SchemaError` for a name Spark SQL cannot take unquoted."""
        namespace, name = topic.split(".")[-2:]
        sink = self.config.sink
        kept = self._keeps.get(topic) or keeping(sink, f"{namespace}.{name}")
        return Table(self.spark, sink.catalog_name, namespace, name, sink.soft_delete, kept)

    def _kept(self, topic: str, table: Table) -> Keeping:
        """What ``table`` keeps, checked once against the configuration: a table keeps
        the mode it was made with (a :class:`SchemaError`, which stops it, otherwise), and
        gets the metadata columns when they are asked for."""
        found = self._keeps.get(topic)
        if found is not None or not table.exists():
            return found or table.keeping
        wanted = keeping(self.config.sink, self.table_name(topic).split(".", 1)[1])
        found = table.kept()
        if found.mode != wanted.mode:
            raise SchemaError(
                f"{table.path} was made in {found.mode} mode and the configuration asks for "
                f"{wanted.mode}: a table keeps its mode; drop it to make it again in the other"
            )
        if wanted.metadata and not found.metadata:
            table.add_metadata()
            found = Keeping(found.mode, True)
        self._keeps[topic] = found
        return found

    def _topic_batch(self, topic: str, ends: dict[int, int]) -> int:
        table = self.table(topic)
        if topic not in self.progress:
            self.progress[topic], holder = table.committed()
            self.unread_since[topic] = unread_since_of(holder)
        committed, since = self.progress[topic], self.unread_since[topic]
        starts = self._starts.get(topic, {})
        for partition, end in ends.items():
            lag = end - committed.get(partition, starts.get(partition, 0))
            metrics.LAG.labels(topic, str(partition)).set(lag)
        found = self._checked_gap(topic, ends)  # may read the ends again
        if found is not None:
            if not (found.rebuildable and self.config.sink.rebuild_on_gap):
                raise TableStop(found.reason)
            return self._rebuild(topic, table, ends, found)
        read_ms = self._read_ms.get(topic, int(time.time() * 1000))  # of the last read
        starts = self._starts.get(topic, {})
        for partition, end in ends.items():
            if committed.get(partition, starts.get(partition, 0)) >= end:
                since[partition] = read_ms  # caught up: what comes next is newer
        ranges = self._past_stable(
            topic, plan(topic, committed, ends, self.config.sink.max_records_per_partition, starts)
        )
        if ranges:
            reached = {r.partition: read_ms for r in ranges if r.end == ends[r.partition]}
            with metrics.BATCH_SECONDS.labels(table.path).time():
                self._merge(topic, table, ranges, {**since, **reached})
        return len(ranges)

    def _checked_gap(self, topic: str, ends: dict[int, int]) -> Gap | None:
        """:meth:`_gap`; one that only data lost for good explains (a topic made again, a
        start past the table's offsets) is read again :data:`GAP_CHECKS` times first, and
        counts only if every read finds one: a read of a topic's ends under load once gave
        0. ``ends`` takes the fresh ends."""
        found = self._gap(topic, ends)
        for _ in range(GAP_CHECKS):
            if found is None or found.rebuildable:
                break
            time.sleep(GAP_PAUSE_S)
            ends.update(self._read_offsets(topic, len(ends)))
            found = self._gap(topic, ends)
        return found

    def _gap(self, topic: str, ends: dict[int, int]) -> Gap | None:
        """The first partition of ``topic`` the table cannot merge on (:mod:`spark_sink.gaps`);
        sets each partition's unread age."""
        if topic not in self._retention:
            self._retention[topic] = delete_retention_ms(self.admin, topic)
        retention = self._retention[topic]
        committed, since = self.progress[topic], self.unread_since[topic]
        starts, high = self._starts.get(topic, {}), self._high.get(topic, {})
        now_ms = int(time.time() * 1000)
        # Past the last stable offset too: a transaction still open does not make the
        # topic look made again.
        partitions = [
            Partition(p, committed.get(p), starts.get(p, 0), max(end, high.get(p, 0)), since.get(p))
            for p, end in sorted(ends.items())
        ]
        wanted = {
            p.partition: p.committed
            for p in partitions
            if p.committed is not None and needs_first_unread(p, now_ms, retention)
        }
        firsts = first_unread(self.context, topic, wanted) if wanted else {}
        if set(wanted) - set(firsts):  # Kafka slow: no gap is known, and none is assumed
            missing = sorted(set(wanted) - set(firsts))
            raise TableRetry(f"{topic}{missing}: the first unread record did not come")
        partitions = self._dated_by_last_read(topic, partitions, firsts)
        if retention is not None:
            metrics.DELETE_RETENTION.labels(topic).set(retention / 1000)
        for p in partitions:
            found = gap(topic, p, now_ms, retention, firsts.get(p.partition))
            if found is not None:
                return found
            first = firsts.get(p.partition)
            if first is not None and first.offset == p.committed:
                since[p.partition] = first.timestamp_ms  # dates every unread record
            elif p.unread_since_ms is not None:
                since.setdefault(p.partition, p.unread_since_ms)  # by the last one read
            aged = Partition(p.partition, p.committed, p.start, p.end, since.get(p.partition))
            age = unread_age_ms(aged, now_ms) / 1000
            metrics.UNREAD_AGE.labels(topic, str(p.partition)).set(age)
        return None

    def _dated_by_last_read(
        self, topic: str, partitions: list[Partition], firsts: dict[int, FirstUnread]
    ) -> list[Partition]:
        """``partitions``, those of unknown age whose first unread record is past the
        committed offset dated by the record just before that offset, read uncommitted.

        The offset between can be a transaction's marker, not a record compaction
        removed: a batch cut by ``max_records_per_partition`` ends where it ends. Every
        unread record was written after the last one read, so that record's time dates
        them. When it is not there (compacted away), nothing is dated."""
        undated = {
            p.partition: p.committed - 1
            for p in partitions
            if p.unread_since_ms is None
            and p.committed
            and p.partition in firsts
            and firsts[p.partition].offset != p.committed
        }
        if not undated:
            return partitions
        every = dataclasses.replace(
            self.context, consumer={**self.context.consumer, "isolation.level": "read_uncommitted"}
        )
        lasts = {
            partition: found.timestamp_ms
            for partition, found in first_unread(every, topic, undated).items()
            if found.offset == undated[partition]
        }
        return [
            dataclasses.replace(p, unread_since_ms=lasts[p.partition])
            if p.partition in lasts
            else p
            for p in partitions
        ]

    def _rebuild(self, topic: str, table: Table, ends: dict[int, int], found: Gap) -> int:
        """Make ``topic``'s table again from the whole topic, in one batch: every key's
        newest record is still there, and rows whose key is not are deleted."""
        log.warning("%s: %s; the table is made again from the whole topic", topic, found.reason)
        starts = self._starts.get(topic, {})
        ranges = [Range(topic, p, starts.get(p, 0), end) for p, end in sorted(ends.items())]
        ranges = self._past_stable(topic, [r for r in ranges if r.end > r.start])
        read_ms = self._read_ms.get(topic, int(time.time() * 1000))
        with metrics.BATCH_SECONDS.labels(table.path).time():
            self._merge(topic, table, ranges, {r.partition: read_ms for r in ranges}, whole=True)
        for r in ranges:
            metrics.LAG.labels(topic, str(r.partition)).set(0)
        metrics.REBUILDS.labels(table.path).inc()
        return len(ranges)

    def _merge(
        self,
        topic: str,
        table: Table,
        ranges: list[Range],
        since: dict[int, int],
        whole: bool = False,
    ) -> None:
        started = time.monotonic()
        known = self._shape(topic, table)
        sampled: list[Spec] = []
        if known is not None and known.keys:
            # The table's columns are the plan: new ones show up as drift, rarely.
            specs, keys = known.columns, known.keys
        else:
            sampled, keys = sample(self.context, ranges)
            specs = sampled
        try:
            merged = self._apply(topic, table, ranges, union(specs, topic), keys, since, whole)
        except Exception as exc:  # Spark wraps what the executors raised
            if DRIFT_MARKER not in str(exc):
                raise
            log.info("%s: an event's schema is not in the plan; planning from all", topic)
            everything = self.spark.sparkContext.parallelize(ranges, len(ranges))
            context = self.context
            found = everything.flatMap(lambda r: scan(context, r)).distinct().collect()
            planned = union(sampled + found, topic)
            merged = self._apply(topic, table, ranges, planned, keys, since, whole)
        self._committed.passed()
        self.unread_since[topic] = since
        for r in ranges:
            self.progress[topic][r.partition] = r.end
            metrics.COMMITTED_OFFSET.labels(topic, str(r.partition)).set(r.end)
            metrics.LAG.labels(topic, str(r.partition)).dec(r.end - r.start)
        metrics.BATCHES.labels(table.path).inc()
        metrics.ROWS_MERGED.labels(table.path).inc(merged)
        status = self.board.of(self.table_name(topic), topic)
        status.update(last_commit_ms=int(time.time() * 1000), last_commit_rows=merged)
        log.info(
            "%s: merged offsets %s into %s (%d rows) in %.1f s",
            topic,
            ", ".join(f"[{r.partition}] {r.start}-{r.end}" for r in ranges),
            table.path,
            merged,
            time.monotonic() - started,
        )

    def _shape(self, topic: str, table: Table) -> Shape | None:
        """The table's columns and key, read once (this sink is the table's only writer)."""
        known = self._shapes.get(topic)
        if known is None and table.exists():
            known = self._shapes[topic] = Shape(table.columns(), table.key_names())
        return known

    def _apply(
        self,
        topic: str,
        table: Table,
        ranges: list[Range],
        specs: list[Spec],
        keys: list[str],
        since: dict[int, int],
        whole: bool,
    ) -> int:
        """Create or evolve the table for ``specs``, then merge the ranges (``whole``: the
        whole topic, a rebuild); rows merged."""
        table.keeping = self._kept(topic, table)
        known = self._shape(topic, table)
        if known is None:
            if not specs:  # only deletes of rows the table never had
                return 0
            missing = [k for k in keys if k not in {s.name for s in specs}]
            if not keys or missing:
                raise SchemaError(f"{topic}: the key columns {missing or keys} are not columns")
            layout = resolve(self.config.sink, self.table_name(topic).split(".", 1)[1])
            check_columns(layout, _typed(specs, table.keeping), table.path)
            with self._making:
                table.create(specs, keys, self.config.sink.write_mode, layout)
            self._laid_out.discard(topic)  # made again (dropped by hand): its sort order
            known = self._shapes[topic] = Shape(table.columns(), keys)
        evolution = evolve(known.columns, specs, topic)
        if evolution.add or evolution.widen:
            table.evolve(evolution)
            self._shapes[topic] = Shape(evolution.columns, known.keys or keys)
        if topic not in self._laid_out:  # after the columns a layout may name are added
            self._lay_out(topic, table, evolution.columns)
        planned = evolution.columns
        offsets = dict(self.progress[topic])
        offsets.update({r.partition: r.end for r in ranges})
        batch = self.batch_frame(ranges, planned, keys, table.keeping)
        return table.merge(batch, keys, [c.name for c in planned], offsets, since, whole)

    def _lay_out(self, topic: str, table: Table, columns: list[Spec]) -> None:
        """Bring the table's layout to the configured one, where the configuration changed
        since the layout the table records (:mod:`spark_sink.layout`); once a process. The
        fields a change adds must name columns of a type their transform takes; one that
        names a column the table lacks waits (the batch may bring it), and the layout is
        tried again at the next round."""
        sink = self.config.sink
        wanted = resolve(sink, self.table_name(topic).split(".", 1)[1])
        actual, properties = table.layout()
        last = recorded(properties, table.path)
        defaults = dict.fromkeys(WRITE_MODES, sink.write_mode)
        change = layout_change(actual, last, wanted, table.path, defaults)
        if change or properties.get(LAYOUT_PROPERTY) != wanted.record():
            added = Layout(change.add_partitions, change.sort_by or ())
            typed = _typed(columns, table.keeping)
            missing = sorted({f.column for f in added.partition_by + added.sort_by} - set(typed))
            if missing:  # new in the source: the batch's drift adds them, then this runs
                if topic not in self._layout_waits:
                    log.warning("%s: the layout waits for the columns %s", table.path, missing)
                    self._layout_waits.add(topic)
                return
            check_columns(added, typed, table.path)
            table.lay_out(change, wanted.record())
            if change:
                log.info("%s: layout: %s", table.path, change.describe())
        self._laid_out.add(topic)

    def batch_frame(
        self, ranges: list[Range], planned: list[Spec], keys: list[str], kept: Keeping
    ) -> DataFrame:
        """The events of ``ranges`` as rows ``(offset, deleted, time, *planned)``, and the
        events' metadata where the table keeps it, read and decoded lazily by Spark tasks:
        ranges are cut so each core gets about two."""
        ddl = ", ".join(
            [f"{OFFSET} bigint", f"{DELETED} boolean", f"{TIME} bigint"]
            + [f"{quote(c.name)} {c.sql_type}" for c in planned]
            + (
                [f"{name} {sql_type}" for name, sql_type, _c, _m in BATCH_COLUMNS]
                if kept.metadata
                else []
            )
        )
        context = self.context
        schema = _parse_datatype_string(ddl)
        assert isinstance(schema, StructType)
        pieces = split(ranges, 2 * self.spark.sparkContext.defaultParallelism)
        rows = self.spark.sparkContext.parallelize(pieces, len(pieces)).flatMap(
            lambda r: decode_range(context, r, planned, keys, schema, kept)
        )
        return self.spark.createDataFrame(rows, schema=schema, verifySchema=False)  # verified


def _typed(columns: list[Spec], kept: Keeping) -> dict[str, str]:
    """A table's columns and their types, with the metadata columns where it keeps them
    (a history table is often partitioned by the commit time)."""
    typed = {c.name: c.sql_type for c in columns}
    if kept.metadata:
        typed.update({c.name: c.sql_type for c in METADATA_COLUMNS})
    return typed


def _verdict(exc: BaseException) -> BaseException:
    """What a failed batch means for its table: a :class:`TableStop` (the data cannot go
    in), a :class:`TableRetry` (a passing failure), or ``exc`` itself (fatal)."""
    if isinstance(exc, SchemaError | TableStop | TableRetry):
        return exc
    if isinstance(exc, KafkaException) and not _fatal(exc):
        return TableRetry(f"Kafka: {exc}")
    text = str(exc)
    for marker, verdict in (
        (STOP_MARKER, TableStop),
        (DRIFT_MARKER, TableStop),  # still, once planned from every schema of the batch
        (RETRY_MARKER, TableRetry),
    ):
        if marker in text:
            return verdict(text[text.index(marker) :].splitlines()[0].removeprefix(f"{marker}: "))
    if commit_conflict(exc):
        return TableRetry(f"a concurrent commit: {text.splitlines()[0][:300]}")
    return exc


def _fatal(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.fatal()


def run_sink(config: Config, once: bool, *, spark: SparkSession | None = None) -> int:
    """Run the sink (see the module docstring); 0 on a clean stop, 1 if a table stopped."""
    check_all(config.sink)
    own = spark is None
    session = spark if spark is not None else create_session(config)
    stop = threading.Event()
    restore = _install_stop_handlers(stop)
    try:
        sink = Sink(config, session)
        if once:
            targets = _waiting_out_kafka(sink.ends, config, stop)
            log.info("draining %d topics to their current ends", len(targets))
            while not stop.is_set() and sink.run_batch(targets, stop):
                pass
        else:
            _serve_metrics(config)
            sink.serve(stop)
        for topic, reason in sorted(sink.stopped.items()):
            log.error("%s stopped: %s", topic, reason)
        sink.board.flush()
        return 1 if sink.stopped else 0
    finally:
        restore()
        if own:
            stop_session(session)


Listed = TypeVar("Listed")


def _waiting_out_kafka(read: Callable[[], Listed], config: Config, stop: threading.Event) -> Listed:
    """``read()`` (a listing of topics), waiting while Kafka does not answer, up to the
    outage deadline."""
    since = time.monotonic()
    while True:
        try:
            return read()
        except KafkaException as exc:
            lasted = time.monotonic() - since
            if _fatal(exc) or lasted > config.kafka.outage_deadline_s or stop.is_set():
                raise
            log.warning("Kafka unreachable for %.0f s: %s; trying again", lasted, exc)
            stop.wait(min(10.0, 1.0 + lasted / 10))


def _fresh_until(since: dict[int, int]) -> int | None:
    """The time (ms) before which every record of a topic is in its table: the oldest of
    its partitions' :attr:`Sink.unread_since` (``None``: none known)."""
    return min(since.values(), default=None)


def _serve_metrics(config: Config) -> None:
    if config.sink.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(config.sink.metrics_port, config.sink.metrics_host)
        log.info("metrics on port %d", config.sink.metrics_port)


def _install_stop_handlers(stop: threading.Event) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(_sig: int, _frame: Any) -> None:
        log.info("stopping after the batch in flight")
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
