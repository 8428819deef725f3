"""The incremental-snapshot coordinator: signals in, chunk rows to backfill topics, progress out.

One instance of a pipeline coordinates at a time: the member of the consumer
group ``<pipeline>-snapshots`` that owns the single partition of the signal
topic ``<pipeline>.signals``. Kafka's group protocol elects it; when it stops
or dies, another instance takes over within the session timeout and continues
from the progress record.

The coordinator takes signals from two channels with the same meaning
(:mod:`processor.snapshot.signal_channels`), checks each requested table
(:mod:`processor.snapshot.tables`), splits the queued tables, one after the
other, into parts of about a chunk each (the source's chunk reader, an
index-only boundary query) and hands each part to one of ``snapshot.readers``
reader processes (:mod:`processor.snapshot.reader_pool`). Each writes every
row as Debezium's own ``r`` event (:mod:`processor.snapshot.chunk_events`) to
the partition of the table's backfill topic that matches the key's
change-topic partition; the data plane decides each row against that
partition's state. Progress, the queue and the signal channels' offsets are
one record in the compacted topic ``<pipeline>.snapshots``
(:mod:`processor.snapshot.progress`); notifications in Debezium's format go to
``<pipeline>.notifications``. Everything that speaks to the source database
comes from its connector (:mod:`processor.snapshot.connector`).

Guarantees (I2 and I4): a chunk's rows are acknowledged by Kafka
before the progress record moves past them, so a crash at any point reads at
most the chunk in flight again, with a new snapshot and a new chunk number
(the rules then let the newer read win). A table that cannot be read (no key,
an unsupported column type, no change topic) is aborted with a message and
the queue goes on; a source that cannot be reached is retried.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.errors import (
    ChunkError,
    SnapshotRefusedError,
    SourceUnavailableError,
    TableChangedError,
)
from processor.outages import Outage, is_outage
from processor.snapshot.chunk_reader import ChunkReader, next_chunk_size
from processor.snapshot.connector import Connector
from processor.snapshot.delivery import delivery
from processor.snapshot.filters import refused_filters
from processor.snapshot.progress import (
    DELIVERING,
    PROGRESS_KEY,
    QUEUED,
    RUNNING,
    Notification,
    SnapshotState,
    TableProgress,
    key_from_json,
    key_to_json,
)
from processor.snapshot.progress_record import ProgressRecordError, read_progress
from processor.snapshot.reader_pool import ChunkJob, ChunkWorkers
from processor.snapshot.signal_channels import SignalChannels
from processor.snapshot.signals import ExecuteSnapshot, PauseSnapshot, Signal
from processor.snapshot.tables import TableChecks
from tidemark.core.config import Config
from tidemark.core.errors import RegistryRefusedError, TidemarkError, TopicError
from tidemark.core.group_repair import RebalanceWatch, repair_stuck
from tidemark.core.kafka import (
    TRANSACTION_TIMEOUT,
    RebalanceErrors,
    client_config,
    consumer_config,
    data_messages,
    ensure_topics,
    exact_end_offsets,
    partition_counts,
    producer_config,
    queue_topic_config,
    read_range,
    reader_config,
    record_topic_config,
)
from tidemark.core.record_auth import record_keys
from tidemark.core.schema_registry import SchemaCache
from tidemark.core.topics import (
    backfill_topic,
    change_topic,
    coordinator_transactional_id,
    dataplane_group,
    notification_topic,
    progress_topic,
    reader_group,
    signal_topic,
    snapshot_group,
)

log = logging.getLogger(__name__)

#: How often a leader whose progress record is unreadable reads it again (seconds).
REFUSED_RETRY_S = 10.0
#: How often the data plane's offsets are read for tables read whole (seconds).
DELIVERY_CHECK_S = 2.0
#: The records read back from a backfill partition's end for its last data record.
DATA_TAIL = 16


class Coordinator:
    """Runs incremental snapshots for one pipeline while this instance leads."""

    def __init__(
        self, config: Config, connector: Connector, schemas: SchemaCache | None = None
    ) -> None:
        self.config = config
        pipeline = config.processor.pipeline
        self.signals = signal_topic(pipeline)
        self.progress = progress_topic(pipeline)
        self.notifications = notification_topic(pipeline)
        self._connector = connector
        kafka = config.kafka
        self._admin = AdminClient(client_config(kafka))
        #: Progress and notifications, made anew with each leadership (a fenced producer
        #: cannot be used again): its transactional id fences the last leader's.
        self._producer: Producer | None = None
        settings = {"enable.partition.eof": False}
        self._group_id = snapshot_group(config.processor.pipeline)
        self._rebalance = RebalanceWatch(kafka.stuck_rebalance_s)
        #: What the group's callbacks raised, raised again after the consume that ran them.
        self._callback_errors = RebalanceErrors()
        self._group = self._group_consumer()
        self._joined = False
        #: Kafka not answering: the loop waits and tries again, up to a deadline.
        self.outage = Outage("snapshot coordinator", kafka.outage_deadline_s)
        #: Reads progress and change-topic tails; reassigned freely, so it fetches without
        #: a long poll (a fetch left waiting at a range's end would hold the next one back).
        self._probe = Consumer(
            reader_config(kafka, reader_group(pipeline, "snapshots-probe"), **settings)
        )
        self._channels = SignalChannels(config, self._admin, schemas)
        self._tables = TableChecks(config, connector, self._admin, self._probe, schemas)
        self.state: SnapshotState | None = None
        #: Why this leader does not coordinate: its progress record is unreadable (read
        #: again every :data:`REFUSED_RETRY_S`).
        self.refused: str | None = None
        self._retry_refused = 0.0
        self._record_keys = record_keys()
        #: The coordinator's own connection to the source (catalog and boundaries).
        self._reader: ChunkReader | None = None
        self._workers = ChunkWorkers(config, connector, config.snapshot.readers)
        #: Chunks being read, by number: the table they belong to.
        self._in_flight: dict[int, TableProgress] = {}
        self._chunk_size = config.snapshot.chunk_size
        #: Failed reads in a row, and since when the source cannot be reached.
        self._failures = 0
        self._unreachable_since: float | None = None
        self._not_before = 0.0
        self._next_delivery = 0.0
        self._stop = threading.Event()
        self.failure: BaseException | None = None

    @property
    def leader(self) -> bool:
        return self.state is not None

    @property
    def role(self) -> str:
        """``leader``, ``refused`` (it leads, but its progress record is unreadable) or
        ``standby``: what ``/health`` and the instance's status say."""
        if self.state is not None:
            return "leader"
        return "refused" if self.refused is not None else "standby"

    def _group_consumer(self) -> Consumer:
        """A member of the group whose owner of the signal topic coordinates snapshots."""
        self._rebalance.restart()
        return Consumer(
            consumer_config(
                self.config.kafka,
                self._group_id,
                **{"enable.partition.eof": False, **self._rebalance.settings()},
            )
        )

    # -- lifecycle -------------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop`; an unexpected error is kept in ``failure``.

        A turn that fails because Kafka did not answer steps down (leadership, and
        the reads for it, are dropped) and joins the group again after a pause
        (:mod:`processor.outages`): the progress record is the truth to resume from.
        """
        try:
            while not self._stop.is_set():
                try:
                    if not self._joined:
                        self._join()
                    self._turn()
                    self.outage.passed()
                except Exception as exc:
                    # the registry refusing to decode signal-table events stops no source
                    # here: the coordinator waits, as for an outage, and the data plane goes on
                    if not is_outage(exc) and not isinstance(exc, RegistryRefusedError):
                        raise
                    wait = self.outage.failed(exc)
                    self._step_down()
                    self._stop.wait(wait)
        except BaseException as exc:
            self.failure = exc
            log.exception("snapshot coordinator stopped on an error")
        finally:
            self._close()

    def _join(self) -> None:
        """The pipeline's snapshot topics, and membership of the group that elects a leader."""
        replication = self.config.kafka.replication_factor
        kafka = self.config.kafka
        ensure_topics(self._admin, {self.signals: 1}, replication, queue_topic_config(kafka))
        records = record_topic_config(kafka)
        ensure_topics(self._admin, {self.notifications: 1}, replication, records)
        compacted = record_topic_config(kafka, **{"cleanup.policy": "compact"})
        ensure_topics(self._admin, {self.progress: 1}, replication, config=compacted)
        errors = self._callback_errors
        self._group.subscribe(
            [self.signals],
            on_assign=errors.wrap(self._on_assign),
            on_revoke=errors.wrap(self._on_revoke),
        )
        self._joined = True

    def _turn(self) -> None:
        """Read signals, collect finished parts, hand out the next one."""
        if self._can_read():
            wait = max(0.0, self._not_before - time.monotonic())
        else:
            wait = 0.0 if self._workers.busy() else 0.2
        messages = self._group.consume(100, min(wait, 0.2))
        self._callback_errors.raise_pending()
        repair_stuck(self._rebalance, self.config.kafka, self._group_id)
        if self.state is None:
            self._collect(0)  # reads for a leadership lost: dropped
            if self.refused is not None and time.monotonic() >= self._retry_refused:
                self._take_lead(self._group)
            return
        offsets = self.state.signal_offsets
        for msg in data_messages(messages):
            self._act(self._channels.from_topic(msg, offsets))
        for signal in self._channels.from_table(offsets):
            self._act(signal)
        # The signals just read may have paused or stopped the work.
        self._collect(0 if self._can_read() else 0.05)
        self._deliver()
        if self._can_read() and time.monotonic() >= self._not_before:
            self._step()

    def _step_down(self) -> None:
        """After a failed turn: no longer lead, and leave the group (a new member joins)."""
        self._lose_leadership()
        try:
            self._group.close()
        except KafkaException as exc:
            log.warning("leaving the snapshot group: %s", exc)
        self._callback_errors.clear()
        self._group = self._group_consumer()
        self._joined = False

    def stop(self) -> None:
        self._stop.set()

    def _close(self) -> None:
        for consumer in (self._group, self._probe):
            consumer.close()
        self._channels.close()
        if self._reader is not None:
            self._reader.close()
        self._workers.close()
        if self._producer is not None:
            self._producer.flush(10)
        metrics.SNAPSHOT_LEADER.set(0)

    def _can_read(self) -> bool:
        """Whether a part can be read now: a table has one left to read, nothing is paused,
        a reader is idle."""
        state = self.state
        if state is None or state.paused or not self._workers.free():
            return False
        entry = state.current()
        return entry is not None and (not entry.planned or state.waiting(entry) is not None)

    # -- leadership ------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        # Fence the last leader first: from here on it can write no progress, so the record
        # read next is the last it wrote.
        self._producer = Producer(
            producer_config(
                self.config.kafka,
                **{
                    "transactional.id": coordinator_transactional_id(
                        self.config.processor.pipeline
                    ),
                    "linger.ms": 5,
                },
            )
        )
        self._producer.init_transactions(TRANSACTION_TIMEOUT)
        consumer.assign([TopicPartition(self.signals, 0, OFFSET_END)])  # until it leads
        self._take_lead(consumer)

    def _take_lead(self, consumer: Consumer) -> None:
        """Load the progress record and coordinate from it; refuse to while it is
        unreadable (the data plane goes on; no other instance could read it either)."""
        try:
            state = self._load()
        except ProgressRecordError as exc:
            if self.refused is None:
                log.error(
                    "snapshot coordination refused: the progress record of %s is unreadable "
                    "(%s); backfills wait. Repair: tidemark snapshot reset-progress",
                    self.progress,
                    exc,
                )
            self.refused = str(exc)
            self._retry_refused = time.monotonic() + REFUSED_RETRY_S
            metrics.SNAPSHOT_PROGRESS_REFUSED.set(1)
            return
        if self.refused is not None:
            log.info("the progress record of %s is readable again", self.progress)
        self.refused = None
        metrics.SNAPSHOT_PROGRESS_REFUSED.set(0)
        if state is None:
            state = SnapshotState()
            # Signal rows written before the pipeline first ran are history, not requests.
            state.signal_offsets[self._channels.table_topic] = self._channels.table_ends(
                self._probe
            )
        self.state = state.resumed()
        self._persist([])
        offset = state.signal_offsets.get(self.signals, {}).get(0, 0)
        consumer.assign([TopicPartition(self.signals, 0, offset)])
        metrics.SNAPSHOT_LEADER.set(1)
        self._export(state)
        log.info(
            "coordinating incremental snapshots: %d tables queued%s",
            len(state.pending()),
            " (paused)" if state.paused else "",
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._lose_leadership()
        consumer.unassign()

    def _lose_leadership(self) -> None:
        if self.state is not None:
            log.info("no longer coordinating incremental snapshots")
        self.state = None
        self.refused = None
        metrics.SNAPSHOT_PROGRESS_REFUSED.set(0)
        self._tables.clear()
        self._in_flight.clear()
        self._channels.release()
        metrics.SNAPSHOT_LEADER.set(0)

    def _load(self) -> SnapshotState | None:
        """The last progress record, or ``None`` for a pipeline that never ran a snapshot;
        :class:`ProgressRecordError` if it is unreadable."""
        return read_progress(self._probe, self.progress, self._record_keys)

    def _act(self, signal: Signal | None) -> None:
        state = self.state
        assert state is not None
        notes = state.apply(signal, time.time()) if signal is not None else []
        if signal is not None:
            log.info("signal %s: %s", signal.request_id, type(signal).__name__)
        if isinstance(signal, ExecuteSnapshot) and signal.conditions:
            notes += self._check_filters(signal)
        if isinstance(signal, ExecuteSnapshot):
            self._make_topics(signal)
        if notes and isinstance(signal, PauseSnapshot):
            # Paused means quiet: the parts being read are recorded before PAUSED is sent.
            while self._workers.busy():
                self._collect(1.0)
        self._persist(notes)

    def _make_topics(self, signal: ExecuteSnapshot) -> None:
        """Make the topics of the request's tables at once (one rebalance of the data
        plane); a source that does not answer leaves it to each table's turn."""
        state = self.state
        assert state is not None
        entries = [
            e for e in state.tables if e.request_id == signal.request_id and e.status == QUEUED
        ]
        if not entries:
            return
        try:
            self._tables.make_topics(entries, self._connected())
        except (SourceUnavailableError, TopicError, KafkaException) as exc:
            # Each table's turn makes its topics, refuses the table, or waits for Kafka.
            log.warning(
                "topics of request %s left to each table's turn: %s", signal.request_id, exc
            )

    def _check_filters(self, signal: ExecuteSnapshot) -> list[Notification]:
        """Abort, as they arrive, the tables of ``signal`` whose filter is refused."""
        state = self.state
        assert state is not None
        refused = refused_filters(signal.conditions, self._connected)
        notes: list[Notification] = []
        for entry in state.tables:
            reason = refused.get(entry.table)
            if entry.request_id == signal.request_id and reason and entry.status == QUEUED:
                log.error("snapshot of %s refused: %s", entry.table, reason)
                metrics.SNAPSHOT_REFUSED.labels(entry.table, "filter").inc()
                notes += state.abort(entry, reason, time.time())
        return notes

    # -- reading chunks ------------------------------------------------------------

    def _collect(self, timeout: float) -> None:
        """Record the parts whose reads finished (a read for another leader's state, or for
        a table stopped meanwhile, is dropped: its part is read again if still wanted)."""
        for job, result in self._workers.finished(timeout):
            state = self.state
            entry = self._in_flight.pop(job.chunk, None)
            if state is None or entry is None or entry.status != RUNNING:
                continue
            if isinstance(result, Exception) and self.config.processor.log_key_values:
                log.info(  # processor.log_key_values: key values are personal data
                    "snapshot of %s: the read that failed was of the keys after %r up to %r",
                    entry.table,
                    job.after,
                    job.upto,
                )
            if isinstance(result, SourceUnavailableError):
                state.failed(entry, job.chunk)
                self._failed(entry, result)
                continue
            if isinstance(result, TableChangedError):
                # Learn the table again, and read the part with its new columns.
                log.info("snapshot of %s: %s; the part is read again", entry.table, result)
                state.failed(entry, job.chunk)
                self._tables.changed(entry)
                continue
            if isinstance(result, ChunkError):
                self._abort(entry, str(result))
                continue
            self._failures, self._unreachable_since, entry.waiting = 0, None, None
            # Time left is estimated from busy time: the readers, each kept busy, share it.
            busy = result.seconds / self._workers.count
            self._persist(state.written(entry, job.chunk, result.rows, busy, time.time()))
            metrics.SNAPSHOT_ROWS.labels(entry.table).inc(result.rows)
            metrics.SNAPSHOT_CHUNKS.labels(entry.table).inc()
            self._chunk_size = next_chunk_size(
                self._chunk_size,
                result.seconds,
                self.config.snapshot.chunk_target_seconds,
                self.config.snapshot.min_chunk_size,
                self.config.snapshot.max_chunk_size,
            )
            if entry.status == DELIVERING:
                log.info(
                    "snapshot of %s read whole: %d rows in %d chunks",
                    entry.table,
                    entry.rows,
                    entry.chunks,
                )
                self._tables.forget(entry)

    def _step(self) -> None:
        """Give the current table's next part to an idle reader, if there is one."""
        state = self.state
        assert state is not None
        entry = state.current()
        assert entry is not None
        now = time.time()
        try:
            prepared = self._tables.prepare(entry, self._connected())
        except SnapshotRefusedError as exc:
            metrics.SNAPSHOT_REFUSED.labels(entry.table, exc.reason).inc()
            self._abort(entry, str(exc))
            return
        except SourceUnavailableError as exc:
            self._failed(entry, exc)
            return
        try:
            if entry.status == QUEUED:
                reader = self._connected()
                info = prepared.info
                if entry.keys is not None:  # a keys request: its keys become its filter
                    entry.condition = reader.key_condition(info, entry.keys)
                top = reader.max_key(info, entry.condition)
                estimate = reader.estimate_rows(info, entry.condition) if top is not None else 0
                starts = self._ends(prepared.backfill)
                state.begin(entry, key_to_json(top), estimate, now, starts)
                log.info(
                    "snapshot of %s started (request %s): about %d rows, keys up to %s",
                    entry.table,
                    entry.request_id,
                    estimate,
                    entry.maximum_key,
                )
                if top is None:
                    self._persist(state.scanned(entry, now))
                    return
            part = state.waiting(entry)
            if part is None and not entry.planned:
                maximum = entry.maximum_key
                assert maximum is not None
                end = self._connected().boundary(
                    prepared.info,
                    key_from_json(entry.cursor),
                    key_from_json(maximum) or (),
                    self._chunk_size,
                    entry.condition,
                )
                part = state.plan(entry, maximum if end is None else key_to_json(end) or maximum)
        except SourceUnavailableError as exc:
            self._failed(entry, exc)
            return
        except ChunkError as exc:  # the source refused the table's query (its filter, say)
            self._abort(entry, str(exc))
            return
        if part is None:
            return  # every part is being read
        chunk = state.take(part)
        self._in_flight[chunk] = entry
        self._workers.submit(
            ChunkJob(
                prepared.info,
                prepared.event,
                prepared.backfill,
                key_from_json(part.after),
                key_from_json(part.upto) or (),
                entry.condition,
                chunk,
                entry.request_id,
                self.config.snapshot.watermarks,
            )
        )
        self._persist([])  # the part and its chunk number, before its rows can arrive
        ceiling = self.config.snapshot.max_rows_per_second
        if ceiling:
            start = max(time.monotonic(), self._not_before)
            self._not_before = start + self._chunk_size / ceiling

    def _deliver(self) -> None:
        """Complete the tables read whole whose rows the data plane has read past, and
        abort those some of whose rows expired unread (:mod:`.delivery`); every
        :data:`DELIVERY_CHECK_S`."""
        state, now = self.state, time.monotonic()
        if state is None or now < self._next_delivery:
            return
        self._next_delivery = now + DELIVERY_CHECK_S
        notes: list[Notification] = []
        changed = False
        for entry in state.delivering_tables():
            topic = self._backfill_of(entry)
            try:
                if entry.deliver_upto is None:
                    state.delivering(entry, self._data_ends(topic))
                    changed = True
                    continue
                partitions = [int(p) for p in entry.deliver_upto]
                committed = self._committed(topic, partitions) if partitions else {}
                lows = {
                    p: max(self._probe.get_watermark_offsets(TopicPartition(topic, p), 10)[0], 0)
                    for p in partitions
                }
            except (KafkaException, TidemarkError) as exc:  # read again at the next check
                log.warning("the data plane's offsets of %s were not read: %s", topic, exc)
                continue
            found = delivery(entry.deliver_from, entry.deliver_upto, committed, lows)
            if found.lost is not None:
                log.error("snapshot of %s aborted: %s", entry.table, found.lost)
                notes += state.abort(entry, found.lost, time.time())
            elif found.passed:
                log.info("snapshot of %s completed: the data plane read its rows", entry.table)
                notes += state.delivered(entry, time.time())
        if changed or notes:
            self._persist(notes)

    def _backfill_of(self, entry: TableProgress) -> str:
        topic = change_topic(self.config.source.topic_prefix, entry.table)
        return backfill_topic(self.config.processor.pipeline, topic)

    def _ends(self, topic: str) -> dict[int, int]:
        """Where each partition of ``topic`` ends now (nothing: no such topic)."""
        counts = partition_counts(self._admin, [topic])
        if topic not in counts:
            return {}
        tps = [TopicPartition(topic, p) for p in range(counts[topic])]
        return {p: end for (_t, p), end in exact_end_offsets(self._probe, tps).items()}

    def _data_ends(self, topic: str) -> dict[int, int]:
        """Where each partition of ``topic`` ends, not counting the transaction markers
        after its last record (the data plane's truncate markers are written in
        transactions, and a reader commits the offset after the last record it read);
        nothing if the topic cannot be read (no row, then: nothing to wait for)."""
        ends = self._ends(topic)
        for partition, end in ends.items():
            low = max(self._probe.get_watermark_offsets(TopicPartition(topic, partition), 10)[0], 0)
            tail = read_range(self._probe, topic, partition, max(low, end - DATA_TAIL), end)
            last = max(((msg.offset() or 0) + 1 for msg in tail), default=None)
            if last is not None:
                ends[partition] = last
        return ends

    def _committed(self, topic: str, partitions: list[int]) -> dict[int, int | None]:
        """The data plane group's committed offsets of ``topic``'s ``partitions``."""
        group = dataplane_group(self.config.processor.pipeline)
        asked = [TopicPartition(topic, p) for p in partitions]
        listed = self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, asked)]
        )
        found: dict[int, int | None] = dict.fromkeys(partitions)
        for tp in listed[group].result().topic_partitions:
            if tp.error is None and tp.offset >= 0:
                found[tp.partition] = tp.offset
        return found

    def _connected(self) -> ChunkReader:
        if self._reader is None:
            self._reader = self._connector.chunk_reader()
        return self._reader

    def _abort(self, entry: TableProgress, reason: str) -> None:
        """``entry``'s table cannot be read: abort it with ``reason``; the queue goes on."""
        log.error("snapshot of %s aborted: %s", entry.table, reason)
        state = self.state
        assert state is not None
        self._persist(state.abort(entry, reason, time.time()))

    def _failed(self, entry: TableProgress, exc: Exception) -> None:
        """The source could not be reached: connect again after a growing pause, saying why
        the table waits, for up to ``snapshot.source_outage_deadline_s``; then abort it.
        A keys request is never aborted for an outage: its keys are pending in the data
        plane, whose outputs stay at their old rows until their rows are read."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        lasted = now - self._unreachable_since
        if lasted > self.config.snapshot.source_outage_deadline_s and entry.keys is None:
            self._failures, self._unreachable_since, entry.waiting = 0, None, None
            self._abort(entry, f"the source was unreachable for {lasted:.0f} s: {exc}")
            return
        self._failures += 1
        wait = min(30.0, 2.0**self._failures)
        entry.waiting = f"the source cannot be reached; trying again in {wait:.0f} s: {exc}"
        log.warning("snapshot of %s: %s", entry.table, entry.waiting)
        self._persist([])  # the reason, for status
        self._not_before = now + wait

    # -- writing progress --------------------------------------------------------

    def _persist(self, notes: list[Notification]) -> None:
        """Write the progress record and ``notes`` in one transaction, and wait until Kafka
        has them."""
        state, producer = self.state, self._producer
        assert state is not None and producer is not None
        pipeline = self.config.processor.pipeline
        producer.begin_transaction()
        for note in notes:
            producer.produce(
                self.notifications, note.to_json(pipeline), note.request_id.encode(), 0
            )
            log.info("snapshot notification %s for request %s", note.type, note.request_id)
        value = state.to_json()
        keys = self._record_keys
        headers = None if keys is None else [keys.sign(self.progress, 0, PROGRESS_KEY, value)]
        producer.produce(self.progress, value, PROGRESS_KEY, 0, headers=headers)
        # Raises if a record failed, or if this instance was fenced: it leads no more.
        producer.commit_transaction(TRANSACTION_TIMEOUT)
        self._export(state)

    @staticmethod
    def _export(state: SnapshotState) -> None:
        metrics.SNAPSHOT_PAUSED.set(1 if state.paused else 0)
        metrics.SNAPSHOT_QUEUED_TABLES.set(len(state.pending()))
        for entry in state.tables:
            percent = entry.percent
            if percent is not None:
                metrics.SNAPSHOT_PROGRESS.labels(entry.table).set(percent / 100)
            left = entry.seconds_left
            metrics.SNAPSHOT_REMAINING_SECONDS.labels(entry.table).set(left or 0.0)
