"""The incremental-snapshot coordinator: signals in, chunk rows to backfill topics, progress out.

One instance of a pipeline coordinates at a time: the member of the consumer
group ``<pipeline>-snapshots`` that owns the single partition of the signal
topic ``<pipeline>.signals``. Kafka's group protocol elects it; when it stops
or dies, another instance takes over within the session timeout and continues
from the progress record.

The coordinator reads signals from two channels, with the same meaning
(:mod:`processor.snapshot.signals`): the Kafka signal topic (``tidemark snapshot ...``
writes there) and the change topic of Tidemark's signal table in the source.
It splits the queued tables, one after the other, into parts of about a chunk
each (:mod:`processor.snapshot.chunk_reader`, an index-only boundary query) and hands each
part to one of ``snapshot.readers`` reader processes
(:mod:`processor.snapshot.reader_pool`), each of which writes every
row as Debezium's own ``r`` event (:mod:`processor.snapshot.chunk_events`) to the
partition of the table's backfill topic that matches the key's change-topic
partition (:mod:`processor.events.chunk_tag`); the data plane decides each row against
that partition's state. Progress, the queue and the signal channels'
offsets are one record in the compacted topic ``<pipeline>.snapshots``;
notifications in Debezium's format go to ``<pipeline>.notifications``.

Guarantees (DESIGN.md, I2 and I4): a chunk's rows are acknowledged by Kafka
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
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.errors import ChunkError, SignalError, SnapshotRefusedError, SourceUnavailableError
from processor.events.change import Change
from processor.events.source_codec import SourceCodec
from processor.snapshot.chunk_events import TableShape
from processor.snapshot.chunk_reader import (
    ChunkReader,
    PostgresChunkReader,
    TableInfo,
    next_chunk_size,
)
from processor.snapshot.postgres.values import column
from processor.snapshot.postgres.watermarks import WINDOW_TYPES
from processor.snapshot.progress import (
    COMPLETED,
    PROGRESS_KEY,
    QUEUED,
    RUNNING,
    Notification,
    SnapshotState,
    TableProgress,
    key_from_json,
    key_to_json,
)
from processor.snapshot.reader_pool import ChunkJob, ChunkWorkers
from processor.snapshot.signals import PauseSnapshot, Signal, parse_signal
from tidemark.config import Config
from tidemark.errors import InputError, TidemarkError
from tidemark.kafka import (
    Acknowledgements,
    client_config,
    consumer_config,
    data_messages,
    ensure_topics,
    exact_end_offsets,
    last_value,
    partition_counts,
    read_range,
)
from tidemark.messages import RawMessage
from tidemark.schema_registry import SchemaCache
from tidemark.topics import (
    backfill_topic,
    change_topic,
    notification_topic,
    progress_topic,
    reader_group,
    signal_topic,
    snapshot_group,
)

log = logging.getLogger(__name__)

#: Consecutive failed reads of one table before it is aborted.
READ_ATTEMPTS = 5


@dataclass
class _Prepared:
    """What reading one table needs, worked out once per table and leadership."""

    info: TableInfo
    #: Key and value of one of Debezium's events of the table.
    event: tuple[bytes, bytes]
    backfill: str


class Coordinator:
    """Runs incremental snapshots for one pipeline while this instance leads."""

    def __init__(
        self,
        config: Config,
        schemas: SchemaCache | None = None,
        reader_factory: Callable[[], ChunkReader] | None = None,
    ) -> None:
        self.config = config
        pipeline = config.processor.pipeline
        self.signals = signal_topic(pipeline)
        self.progress = progress_topic(pipeline)
        self.notifications = notification_topic(pipeline)
        self.signal_table_topic = change_topic(
            config.source.topic_prefix, config.snapshot.signal_table
        )
        self._schemas = schemas
        self._reader_factory = reader_factory or (
            lambda: PostgresChunkReader(config.source.conninfo())
        )
        kafka = config.kafka
        self._admin = AdminClient(client_config(kafka))
        self._producer = Producer(
            client_config(
                kafka,
                **{"enable.idempotence": True, "acks": "all", "linger.ms": 5},
            )
        )
        self._acks = Acknowledgements(self._producer)
        settings = {"enable.partition.eof": False}
        self._group = Consumer(consumer_config(kafka, snapshot_group(pipeline), **settings))
        #: Reads the signal table's change topic by assignment (only the leader does).
        self._rows = Consumer(
            consumer_config(kafka, reader_group(pipeline, "snapshots-rows"), **settings)
        )
        #: Reads progress and change-topic tails; reassigned freely.
        self._probe = Consumer(
            consumer_config(kafka, reader_group(pipeline, "snapshots-probe"), **settings)
        )
        self._signal_codec = SourceCodec("debezium-upsert", "", schemas)
        self.state: SnapshotState | None = None
        self._prepared: dict[tuple[str, str], _Prepared] = {}
        self._reader: ChunkReader | None = None
        self._workers = ChunkWorkers(config, config.snapshot.readers)
        #: Chunks being read, by number: the table they belong to.
        self._in_flight: dict[int, TableProgress] = {}
        self._chunk_size = config.snapshot.chunk_size
        self._failures = 0
        self._not_before = 0.0
        self._rows_assigned = False
        self._next_channel_check = 0.0
        self._stop = threading.Event()
        self.failure: BaseException | None = None

    @property
    def leader(self) -> bool:
        return self.state is not None

    # -- lifecycle -------------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop`; an unexpected error is kept in ``failure``."""
        try:
            replication = self.config.kafka.replication_factor
            ensure_topics(self._admin, {self.signals: 1, self.notifications: 1}, replication)
            ensure_topics(
                self._admin, {self.progress: 1}, replication, config={"cleanup.policy": "compact"}
            )
            self._group.subscribe(
                [self.signals], on_assign=self._on_assign, on_revoke=self._on_revoke
            )
            while not self._stop.is_set():
                if self._can_read():
                    wait = max(0.0, self._not_before - time.monotonic())
                else:
                    wait = 0.0 if self._workers.busy() else 0.2
                messages = self._group.consume(100, min(wait, 0.2))
                if self.state is None:
                    self._collect(0)  # reads for a leadership lost: dropped
                    continue
                for msg in data_messages(messages):
                    self._kafka_signal(msg)
                self._signal_rows()
                # The signals just read may have paused or stopped the work.
                self._collect(0 if self._can_read() else 0.05)
                if self._can_read() and time.monotonic() >= self._not_before:
                    self._step()
        except BaseException as exc:
            self.failure = exc
            log.exception("snapshot coordinator stopped on an error")
        finally:
            self._close()

    def stop(self) -> None:
        self._stop.set()

    def _close(self) -> None:
        for consumer in (self._group, self._rows, self._probe):
            consumer.close()
        if self._reader is not None:
            self._reader.close()
        self._workers.close()
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
        state = self._load()
        if state is None:
            state = SnapshotState()
            # Signal rows written before the pipeline first ran are history, not requests.
            state.signal_offsets[self.signal_table_topic] = self._channel_ends()
        self.state = state.resumed()
        self._persist([])
        offset = state.signal_offsets.get(self.signals, {}).get(0, 0)
        consumer.assign([TopicPartition(self.signals, 0, offset)])
        self._rows_assigned = False
        metrics.SNAPSHOT_LEADER.set(1)
        self._export(state)
        log.info(
            "coordinating incremental snapshots: %d tables queued%s",
            len(state.pending()),
            " (paused)" if state.paused else "",
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.state is not None:
            log.info("no longer coordinating incremental snapshots")
        self.state = None
        self._prepared.clear()
        self._in_flight.clear()
        self._rows.unassign()
        self._rows_assigned = False
        consumer.unassign()
        metrics.SNAPSHOT_LEADER.set(0)

    def _load(self) -> SnapshotState | None:
        """The last progress record, or ``None`` for a pipeline that never ran a snapshot."""
        raw = last_value(self._probe, self.progress, PROGRESS_KEY)
        return None if raw is None else SnapshotState.from_json(raw)

    def _channel_ends(self) -> dict[int, int]:
        counts = partition_counts(self._admin, [self.signal_table_topic])
        if self.signal_table_topic not in counts:
            return {}
        tps = [
            TopicPartition(self.signal_table_topic, p)
            for p in range(counts[self.signal_table_topic])
        ]
        return {p: end for (_t, p), end in exact_end_offsets(self._probe, tps).items()}

    # -- signals -----------------------------------------------------------------

    def _kafka_signal(self, msg: Message) -> None:
        """A record of the signal topic: ``{"id", "type", "data"}`` (``id`` optional)."""
        state = self.state
        assert state is not None
        offset = msg.offset() or 0
        default_id = f"kafka-{msg.partition()}-{offset}"
        try:
            doc = orjson.loads(msg.value() or b"")
            if not isinstance(doc, dict):
                raise SignalError("a signal record must be a JSON object")
            data = doc.get("data")
            text = orjson.dumps(data) if isinstance(data, dict) else data
            signal = parse_signal(str(doc.get("id") or default_id), str(doc.get("type")), text)
        except (SignalError, ValueError) as exc:
            log.warning("signal topic %s@%d ignored: %s", self.signals, offset, exc)
            signal = None
        state.signal_offsets.setdefault(self.signals, {})[0] = offset + 1
        self._act(signal)

    def _signal_rows(self) -> None:
        """Inserts into the signal table, from its change topic."""
        state = self.state
        assert state is not None
        topic = self.signal_table_topic
        if not self._rows_assigned:
            now = time.monotonic()
            if now < self._next_channel_check:
                return
            self._next_channel_check = now + 5.0
            counts = partition_counts(self._admin, [topic])
            if topic not in counts:
                return
            offsets = state.signal_offsets.setdefault(topic, {})
            self._rows.assign(
                [TopicPartition(topic, p, offsets.get(p, 0)) for p in range(counts[topic])]
            )
            self._rows_assigned = True
        for msg in data_messages(self._rows.consume(100, 0)):
            partition, offset = msg.partition() or 0, msg.offset() or 0
            state.signal_offsets.setdefault(topic, {})[partition] = offset + 1
            self._act(self._row_signal(msg))

    def _row_signal(self, msg: Message) -> Signal | None:
        raw = RawMessage(
            msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()
        )
        if raw.value is None:
            return None
        try:
            change: Change = self._signal_codec.decode(raw)
        except InputError as exc:
            log.warning("signal table event ignored: %s", exc)
            return None
        if change.op != "c" or change.after is None:
            return None  # only inserts are requests; snapshots, updates and deletes of rows are not
        row = change.after
        if row.get("type") in WINDOW_TYPES:
            return None  # a chunk's watermark, not a request
        try:
            return parse_signal(str(row.get("id") or ""), str(row.get("type")), row.get("data"))
        except SignalError as exc:
            log.warning("signal table row ignored: %s", exc)
            return None

    def _act(self, signal: Signal | None) -> None:
        state = self.state
        assert state is not None
        notes = state.apply(signal, time.time()) if signal is not None else []
        if signal is not None:
            log.info("signal %s: %s", signal.request_id, type(signal).__name__)
        if notes and isinstance(signal, PauseSnapshot):
            # Paused means quiet: the parts being read are recorded before PAUSED is sent.
            while self._workers.busy():
                self._collect(1.0)
        self._persist(notes)

    # -- reading chunks ------------------------------------------------------------

    def _collect(self, timeout: float) -> None:
        """Record the parts whose reads finished (a read for another leader's state, or for
        a table stopped meanwhile, is dropped: its part is read again if still wanted)."""
        for job, result in self._workers.finished(timeout):
            state = self.state
            entry = self._in_flight.pop(job.chunk, None)
            if state is None or entry is None or entry.status != RUNNING:
                continue
            if isinstance(result, ChunkError):
                state.failed(entry, job.chunk)
                self._failed(entry, result)
                continue
            self._failures = 0
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
            if entry.status == COMPLETED:
                log.info(
                    "snapshot of %s completed: %d rows in %d chunks",
                    entry.table,
                    entry.rows,
                    entry.chunks,
                )
                self._prepared.pop((entry.table, entry.request_id), None)

    def _step(self) -> None:
        """Give the current table's next part to an idle reader, if there is one."""
        state = self.state
        assert state is not None
        entry = state.current()
        assert entry is not None
        now = time.time()
        try:
            prepared = self._prepare(entry)
        except SnapshotRefusedError as exc:
            log.error("snapshot of %s aborted: %s", entry.table, exc)
            self._persist(state.abort(entry, str(exc), now))
            return
        except SourceUnavailableError as exc:
            self._failed(entry, exc)
            return
        try:
            if entry.status == QUEUED:
                reader = self._connected()
                info = prepared.info
                top = reader.max_key(info, entry.condition)
                estimate = reader.estimate_rows(info, entry.condition) if top is not None else 0
                state.begin(entry, key_to_json(top), estimate, now)
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
        except ChunkError as exc:
            self._failed(entry, exc)
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

    def _prepare(self, entry: TableProgress) -> _Prepared:
        """Check that the table can be backfilled and learn how its events look."""
        found = self._prepared.get((entry.table, entry.request_id))
        if found is not None:
            return found
        topic = change_topic(self.config.source.topic_prefix, entry.table)
        envelope = self.config.envelope_of(topic)
        if envelope != "debezium-upsert":
            raise SnapshotRefusedError(
                f"{entry.table} uses the {envelope} envelope; incremental snapshots need "
                "debezium-upsert (per-key state decides chunk rows against changes)"
            )
        counts = partition_counts(self._admin, [topic])
        if topic not in counts:
            raise SnapshotRefusedError(
                f"no change topic {topic}: Debezium has not captured {entry.table} yet"
            )
        reader = self._connected()
        try:
            info = reader.table_info(entry.table, entry.surrogate_key)
        except SourceUnavailableError:
            raise
        except ChunkError as exc:
            raise SnapshotRefusedError(str(exc)) from None
        try:
            for name, kind in zip(info.columns, info.types, strict=True):
                column(name, *kind)  # refuses a type whose encoding is not reproduced
        except TidemarkError as exc:
            raise SnapshotRefusedError(str(exc)) from None
        event = latest_event(self._probe, topic, counts[topic])
        if event is None:
            raise SnapshotRefusedError(
                f"{topic} holds no Debezium event yet to learn the table's event layout from; "
                "change one row of the table (or let Debezium's initial snapshot run) and "
                "signal again"
            )
        try:
            shape = TableShape.learn(event[0], event[1], self._schemas)
        except (TidemarkError, ValueError) as exc:
            raise SnapshotRefusedError(f"cannot learn the events of {topic}: {exc}") from None
        missing = [c for c in shape.key_columns if c not in info.columns]
        if missing:
            raise SnapshotRefusedError(
                f"Debezium's key columns {missing} are not columns of {entry.table}"
            )
        backfill = backfill_topic(self.config.processor.pipeline, topic)
        ensure_topics(self._admin, {backfill: counts[topic]}, self.config.kafka.replication_factor)
        prepared = _Prepared(info, event, backfill)
        self._prepared[(entry.table, entry.request_id)] = prepared
        return prepared

    def _connected(self) -> ChunkReader:
        if self._reader is None:
            self._reader = self._reader_factory()
        return self._reader

    def _failed(self, entry: TableProgress, exc: Exception) -> None:
        """A read failed: reconnect and retry with a growing pause; abort after a few."""
        self._failures += 1
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        state = self.state
        assert state is not None
        if self._failures >= READ_ATTEMPTS:
            log.error(
                "snapshot of %s aborted after %d failed reads: %s", entry.table, self._failures, exc
            )
            self._failures = 0
            self._persist(state.abort(entry, str(exc), time.time()))
            return
        wait = min(30.0, 2.0**self._failures)
        log.warning("snapshot of %s: read failed (%s); retrying in %.0f s", entry.table, exc, wait)
        self._not_before = time.monotonic() + wait

    # -- writing progress --------------------------------------------------------

    def _persist(self, notes: list[Notification]) -> None:
        """Write the progress record and ``notes``, and wait until Kafka has them."""
        state = self.state
        assert state is not None
        pipeline = self.config.processor.pipeline
        for note in notes:
            self._producer.produce(
                self.notifications,
                note.to_json(pipeline),
                note.request_id.encode(),
                0,
                self._acks.on_delivery,
            )
            log.info("snapshot notification %s for request %s", note.type, note.request_id)
        self._producer.produce(
            self.progress, state.to_json(), PROGRESS_KEY, 0, self._acks.on_delivery
        )
        self._acks.wait("snapshot progress")
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


def latest_event(consumer: Consumer, topic: str, partitions: int) -> tuple[bytes, bytes] | None:
    """Key and value of the newest change event in ``topic`` (tombstones skipped)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = exact_end_offsets(consumer, tps)
    best: tuple[int, bytes, bytes] | None = None
    for (_topic, partition), end in ends.items():
        for msg in read_range(consumer, topic, partition, max(0, end - 50), end):
            key, value = msg.key(), msg.value()
            stamp = msg.timestamp()[1]
            if key is not None and value is not None and (best is None or stamp >= best[0]):
                best = (stamp, key, value)
    return None if best is None else (best[1], best[2])
