"""The change-topic data plane: a confluent-kafka batch loop with RocksDB state.

Faust's per-event stream caps far below what librdkafka delivers (DESIGN.md),
so the Faust worker hosts this loop in a thread of its own. The loop consumes
batches from a consumer group separate from Faust's, reconciles them with the
rules of :mod:`processor.reconcile.versions`, and commits each batch with the protocol
of :meth:`DataPlane.commit_batch`, the one place where that protocol lives.

Guarantee: at least once, without loss. A crash anywhere replays at most the
batch in flight, whose changes the rules re-emit (equal versions) instead of
dropping; the output is idempotent per key.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.dataplane.positions import source_position
from processor.errors import ProcessorError
from processor.events.chunk_tag import ChunkTags
from processor.pipeline.control_topic import ControlReader, ControlView, Lifecycle
from processor.pipeline.offsets import ABANDONED_WRITE_SECONDS, complete_write
from processor.reconcile.batch import Batch, Reconciler, Source, TopicPartitionKey
from processor.tuning import tune_garbage_collector
from state.changelog import Restorer
from state.store import Checkpoint, PartitionStore, StateBackend
from tidemark.config import Config
from tidemark.errors import InputError
from tidemark.failpoints import Failpoint
from tidemark.kafka import (
    FAILURES_ONLY,
    Acknowledgements,
    client_config,
    consumer_config,
    data_messages,
    ensure_topics,
    partition_counts,
    produce_waiting,
)
from tidemark.messages import RawMessage
from tidemark.schema_registry import configured_schemas
from tidemark.topics import (
    backfill_prefix,
    backfill_topic,
    backfilled_topic,
    dataplane_group,
    dead_letter_topic,
    positions_topic,
    reader_group,
)

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


class DataPlane:
    """Consumes change topics, reconciles them, produces reconciled topics."""

    def __init__(self, config: Config, backend: StateBackend) -> None:
        self.config = config
        self.backend = backend
        self.group = dataplane_group(config.processor.pipeline)
        self.dead_letter_topic = dead_letter_topic(config.processor.pipeline)
        self.positions_topic = positions_topic(config.processor.pipeline)
        self.reconciler = Reconciler(config, configured_schemas(config.kafka))
        self._stores: dict[TopicPartitionKey, PartitionStore] = {}
        self._changelog_ends: dict[TopicPartitionKey, int] = {}
        #: Committed offsets of input partitions whose restored state has no checkpoint.
        self._committed: dict[TopicPartitionKey, int] = {}
        self._input = re.compile(config.input_pattern())
        self._chunk_tags = ChunkTags()
        self._subscribed: list[str] = []
        self._next_discovery = 0.0
        self._stop = threading.Event()
        self._after_flush = Failpoint("after-flush")
        self._window_release = Failpoint("window-release")
        self.running = False
        #: The lifecycle state this instance has applied (:mod:`processor.pipeline.control_topic`).
        self.lifecycle = Lifecycle.STOPPED
        self.failure: BaseException | None = None
        self._admin = AdminClient(client_config(config.kafka))
        producer_settings = {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
        #: Outputs, dead letters, positions and changelog records: only their
        #: failures are reported back.
        self._producer = Producer(client_config(config.kafka, **producer_settings, **FAILURES_ONLY))
        self._acks = Acknowledgements(self._producer)
        #: The last changelog record of each partition's batch, on a producer that
        #: reports its offset: where the store's changelog has reached.
        self._changelog = Producer(client_config(config.kafka, **producer_settings))
        self._changelog_acks = Acknowledgements(self._changelog)
        #: Bound once: passed with every record.
        self._on_delivery = self._acks.on_delivery
        #: The group's consumer while the data plane is a member (not STOPPED).
        self._consumer: Consumer | None = None
        self._restorer = Restorer(
            consumer_config(config.kafka, reader_group(config.processor.pipeline, "restore"))
        )

    # -- lifecycle ----------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop`; on an unexpected error record it in ``failure`` and return."""
        next_lag = 0.0
        tune_garbage_collector()
        control: ControlReader | None = None
        try:
            ensure_topics(
                self._admin,
                {self.dead_letter_topic: self.config.kafka.topic_partitions},
                self.config.kafka.replication_factor,
            )
            ensure_topics(
                self._admin,
                {self.positions_topic: 1},
                self.config.kafka.replication_factor,
                config={"cleanup.policy": "compact"},
            )
            control = ControlReader(self.config)
            self.running = True
            while not self._stop.is_set():
                control.poll()
                if not self._obey(control):
                    self._stop.wait(0.2)
                    continue
                consumer = self._member()
                now = time.monotonic()
                if now >= self._next_discovery:
                    self._discover_topics()
                    self._next_discovery = now + 5.0
                timeout = self.config.processor.batch_timeout_ms / 1000
                messages = consumer.consume(
                    self.config.processor.batch_size, 0.01 if self._restorer.busy else timeout
                )
                if messages:
                    started = time.perf_counter()
                    self.commit_batch(self.decide(messages))
                    metrics.BATCH_SECONDS.observe(time.perf_counter() - started)
                if self._restorer.busy:
                    self._restore_step()
                if now >= next_lag:
                    self._update_lag()
                    next_lag = now + 2.0
        except BaseException as exc:
            self.failure = exc
            log.exception("data plane stopped on an error")
        finally:
            self.running = False
            self._close()
            if control is not None:
                control.close()

    def _obey(self, control: ControlView) -> bool:
        """Apply the pipeline's lifecycle; whether to consume now.

        An offsets write in progress keeps the data plane out of the group; one
        its writer left for longer than ``ABANDONED_WRITE_SECONDS`` is completed here.
        """
        wanted = control.lifecycle
        pending = control.offsets_write
        if pending is not None:
            if time.time() * 1000 - pending["at_ms"] > ABANDONED_WRITE_SECONDS * 1000:
                log.warning("completing an offsets write its writer left unfinished")
                complete_write(self.config, pending)
            wanted = Lifecycle.STOPPED
        if wanted is Lifecycle.STOPPED:
            if self._consumer is not None:
                self._leave()
                log.info("data plane stopped: left consumer group %s", self.group)
            self.lifecycle = Lifecycle.STOPPED
            return False
        if self._consumer is None:
            self._join()
        paused = wanted is Lifecycle.PAUSED
        if paused != (self.lifecycle is Lifecycle.PAUSED):
            self._set_paused(paused)
            log.info("data plane %s", "paused" if paused else "resumed")
        self.lifecycle = wanted
        return True

    def _join(self) -> None:
        self._consumer = Consumer(
            consumer_config(
                self.config.kafka,
                self.group,
                **{
                    "enable.partition.eof": False,
                    "fetch.wait.max.ms": 50,
                    # Partition p of an input topic and of its backfill topic go together.
                    "partition.assignment.strategy": "range",
                },
            )
        )
        self._subscribed = []
        self._next_discovery = 0.0
        self.lifecycle = Lifecycle.RUNNING

    def _leave(self) -> None:
        """Leave the consumer group and release every partition's state."""
        consumer, self._consumer = self._member(), None
        try:
            consumer.close()
        finally:
            self._release(list(self._stores))

    def _member(self) -> Consumer:
        if self._consumer is None:
            raise ProcessorError("the data plane is not a member of its consumer group")
        return self._consumer

    def _set_paused(self, paused: bool) -> None:
        """Pause every assigned partition, or resume those not held back for a reason."""
        consumer = self._member()
        assigned = consumer.assignment()
        if paused:
            consumer.pause(assigned)
            return
        consumer.resume(assigned)
        held = self._held(assigned)
        if held:
            consumer.pause(held)

    def _discover_topics(self) -> None:
        """Subscribe to the input topics that exist now, and to their backfill topics.

        librdkafka's own pattern subscription uses POSIX regular expressions (no
        look-ahead), so topics are matched here with Python's and subscribed by name.
        """
        pipeline = self.config.processor.pipeline
        listed = self._admin.list_topics(timeout=10).topics
        inputs = [t for t in listed if self._input.match(t)]
        # Each input's backfill topic exists before it is needed, so that starting a
        # snapshot never makes the group rebalance.
        wanted = {backfill_topic(pipeline, t): t for t in inputs}
        missing = [b for b in wanted if b not in listed]
        if missing:
            counts = partition_counts(self._admin, [wanted[b] for b in missing])
            ensure_topics(
                self._admin,
                {b: counts[wanted[b]] for b in missing if wanted[b] in counts},
                self.config.kafka.replication_factor,
            )
        names = sorted([*inputs, *wanted])
        if names != self._subscribed:
            if names:
                self._member().subscribe(
                    names,
                    on_assign=self._on_assign,
                    on_revoke=self._on_revoke,
                    on_lost=self._on_revoke,
                )
            else:
                self._member().unsubscribe()
            log.info("input topics: %s", ", ".join(names) or "none yet")
            self._subscribed = names

    def stop(self) -> None:
        """Ask the loop to finish its batch and leave the group."""
        self._stop.set()

    def _close(self) -> None:
        try:
            if self._consumer is not None:
                self._leave()
        finally:
            self._restorer.close()
            self._producer.flush(10)
            self._changelog.flush(10)

    # -- one batch: decide, then commit -------------------------------------

    def decide(self, messages: list[Message]) -> Batch:
        """Reconcile ``messages`` against state, in memory (protocol step 1)."""
        groups: dict[TopicPartitionKey, list[RawMessage]] = {}
        backfill = backfill_prefix(self.config.processor.pipeline)
        make = tuple.__new__  # RawMessage(...) without the named tuple's Python-level __new__
        tp: TopicPartitionKey = ("", -1)
        group: list[RawMessage] = []
        tagged = False
        for msg in data_messages(messages):
            topic, partition = msg.topic() or "", msg.partition() or 0
            if partition != tp[1] or topic != tp[0]:  # a run of one partition's messages ends
                tp = (topic, partition)
                group = groups.setdefault(tp, [])
                tagged = topic.startswith(backfill)
            chunk = self._chunk_tags.parse(msg.headers()) if tagged else None
            fields = (topic, partition, msg.offset() or 0, msg.key(), msg.value(), chunk)
            group.append(make(RawMessage, fields))
        return self.reconciler.decide(groups, self._stores, self._restoring, self._reached)

    @property
    def refused(self) -> dict[str, str]:
        """Input topics stopped because they break their envelope's constraints."""
        return self.reconciler.refused

    def _source(self, topic: str) -> Source:
        return self.reconciler.source(topic)

    def commit_batch(self, batch: Batch) -> None:
        """The commit protocol, written once. Each step's crash window:

        2. produce outputs, dead letters, changelog records and the partitions' source
           positions: a crash before (3) completes replays the batch; outputs already
           written are re-emitted (equal versions);
        3. flush and wait for every acknowledgement: nothing below runs unless all
           outputs and changelog records are durable in Kafka;
        4. write state, the next input offsets and the changelog position in one
           RocksDB batch per partition: a crash before it leaves local state at the
           previous batch; on restart the changelog brings it forward (or the replay
           re-applies);
        5. commit the input offsets to Kafka: a crash before it replays the batch
           against a store whose checkpoint already covers it; its outputs are in
           Kafka, so it is not emitted again (a store restored from the changelog has
           no checkpoint, and re-emits its equal versions).
        """
        produce, on_delivery = self._producer.produce, self._on_delivery
        for record in batch.records:
            try:
                produce(record[0], record[3], record[2], record[1], on_delivery)
            except BufferError:
                produce_waiting(
                    self._producer, record[0], record[3], record[2], on_delivery, record[1]
                )
        for topic, count in batch.produced.items():
            metrics.EVENTS_OUT.labels(topic).inc(count)
        for error in batch.dead_letters:
            self._produce_dead_letter(error)
        self._record_positions(batch)
        for (topic, partition), state in batch.states.items():
            if not state.updates:
                continue
            # The last record's offset, reported by its own producer, is the changelog
            # position of the checkpoint. The batch's other records may land after it:
            # a restore from that position then applies them again, which changes
            # nothing (one batch writes a key once, and the next batch's records follow
            # all of this one's, which are acknowledged before it is decided).
            changelog, changes = self._source(topic).changelog, list(state.updates.items())
            for key, value in changes[:-1]:
                try:
                    produce(changelog, value, key, partition, on_delivery)
                except BufferError:
                    produce_waiting(self._producer, changelog, value, key, on_delivery, partition)
            key, value = changes[-1]
            produce_waiting(self._changelog, changelog, value, key, self._on_changelog, partition)
        self._acks.wait("batch's outputs and changelog records")
        self._changelog_acks.wait("batch's last changelog records")
        self._after_flush.passed()
        if batch.released:
            self._window_release.passed()
        for tp, state in batch.states.items():
            store = self._stores.get(tp)
            if store is None:
                continue
            changelog_end = self._changelog_ends.get((self._source(tp[0]).changelog, tp[1]))
            store.commit(state.updates, Checkpoint(batch.next_offsets.get(tp), changelog_end))
        consumer = self._member()
        if batch.next_offsets:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in batch.next_offsets.items()],
                asynchronous=False,
            )
        for (topic, partition), offset in batch.rewinds.items():
            rewind = TopicPartition(topic, partition, offset)
            consumer.pause([rewind])
            consumer.seek(rewind)

    def _record_positions(self, batch: Batch) -> None:
        """Produce each input partition's source position at its next offset (step 2)."""
        for tp, event in batch.last_events.items():
            position = source_position(event)
            if position is not None and tp in batch.next_offsets:
                record = orjson.dumps({"at_offset": batch.next_offsets[tp], **position})
                key = f"{tp[0]}/{tp[1]}".encode()
                produce_waiting(
                    self._producer, self.positions_topic, record, key, self._on_delivery, 0
                )

    def _on_changelog(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._changelog_acks.failures.append(err)
            return
        key = (msg.topic() or "", msg.partition() or 0)
        end = (msg.offset() or 0) + 1
        if end > self._changelog_ends.get(key, 0):
            self._changelog_ends[key] = end

    def _produce_dead_letter(self, error: InputError) -> None:
        msg = error.message
        log.warning("dead letter: %s", error)
        headers: Headers = [
            ("tidemark.source.topic", msg.topic.encode()),
            ("tidemark.source.partition", str(msg.partition).encode()),
            ("tidemark.source.offset", str(msg.offset).encode()),
            ("tidemark.error", error.reason.encode()),
            ("tidemark.error.kind", error.kind.encode()),
        ]
        produce_waiting(
            self._producer,
            self.dead_letter_topic,
            msg.value,
            msg.key,
            self._on_delivery,
            msg.partition % self.config.kafka.topic_partitions,
            headers,
        )
        metrics.DEAD_LETTERS.labels(msg.topic, error.kind).inc()

    # -- partitions ---------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        backfills = [p for p in partitions if self._is_backfill(p.topic)]
        partitions = [p for p in partitions if not self._is_backfill(p.topic)]
        topics = {p.topic for p in partitions}
        new = topics - set(self.reconciler.sources)
        if new:
            counts = partition_counts(self._admin, new)
            replication = self.config.kafka.replication_factor
            compacted = {"cleanup.policy": "compact"}
            ensure_topics(
                self._admin,
                {self._source(t).output: counts[t] for t in new},
                replication,
                config=compacted,
            )
            ensure_topics(
                self._admin,
                {self._source(t).changelog: counts[t] for t in new},
                replication,
                config=compacted,
            )
        consumer.assign(partitions + backfills)
        stores = {}
        for p in partitions:
            store = self._stores[(p.topic, p.partition)] = self.backend.open(p.topic, p.partition)
            stores[(self._source(p.topic).changelog, p.partition)] = store
        self._restorer.add(stores)
        everything = partitions + backfills
        paused = everything if self.lifecycle is Lifecycle.PAUSED else self._held(everything)
        if paused:
            consumer.pause(paused)
        waiting = [p for p in partitions if self._restoring((p.topic, p.partition))]
        metrics.ASSIGNED_PARTITIONS.set(len(self._stores))
        metrics.RESTORING_PARTITIONS.set(len(waiting))
        log.info(
            "assigned %d partitions (%d restoring state): %s",
            len(partitions),
            len(waiting),
            ", ".join(f"{p.topic}[{p.partition}]" for p in partitions),
        )

    def _held(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Those of ``partitions`` that must not be read now: input partitions whose state
        is being restored or whose source is refused, and backfill partitions whose
        input partition is held or not assigned here."""
        held = {
            (p.topic, p.partition)
            for p in partitions
            if not self._is_backfill(p.topic)
            and (self._restoring((p.topic, p.partition)) or p.topic in self.refused)
        }

        def held_back(backfill: TopicPartition) -> bool:
            owner = self.reconciler.state_partition((backfill.topic, backfill.partition))
            return owner in held or owner not in self._stores

        return [
            p
            for p in partitions
            if (p.topic, p.partition) in held or (self._is_backfill(p.topic) and held_back(p))
        ]

    def _restore_step(self) -> None:
        for done in self._restorer.step():
            input_topic = next(
                (s.topic for s in self.reconciler.sources.values() if s.changelog == done.topic),
                None,
            )
            if input_topic is None:
                continue
            metrics.RESTORE_RECORDS.labels(input_topic).inc(done.records)
            log.info(
                "restored state of %s[%d]: %d changelog records in %.2f s",
                input_topic,
                done.partition,
                done.records,
                done.seconds,
            )
            if input_topic not in self.refused and self.lifecycle is not Lifecycle.PAUSED:
                pipeline = self.config.processor.pipeline
                self._member().resume(
                    [
                        TopicPartition(topic, done.partition)
                        for topic in (input_topic, backfill_topic(pipeline, input_topic))
                        if topic in self._subscribed
                    ]
                )
        metrics.RESTORING_PARTITIONS.set(sum(1 for tp in self._stores if self._restoring(tp)))

    def _reached(self, tp: TopicPartitionKey) -> int:
        """The next offset of input partition ``tp`` that its state has not seen.

        Every message consumed so far has been decided by then (input partitions
        go first in a batch); the state's checkpoint covers a replay after a crash,
        and the group's committed offset a store restored from the changelog.
        """
        consumer = self._member()
        position = consumer.position([TopicPartition(tp[0], tp[1])])[0].offset
        known = self._stores[tp].checkpoint().input_offset
        if known is None:
            known = self._committed.get(tp)
            if known is None:
                committed = consumer.committed([TopicPartition(tp[0], tp[1])], timeout=10)
                known = self._committed[tp] = max(0, committed[0].offset)
        return max(position, known)

    def _is_backfill(self, topic: str) -> bool:
        return backfilled_topic(self.config.processor.pipeline, topic) is not None

    def _restoring(self, tp: TopicPartitionKey) -> bool:
        return self._restorer.restoring(self._source(tp[0]).changelog, tp[1])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._release(
            [(p.topic, p.partition) for p in partitions if not self._is_backfill(p.topic)]
        )
        consumer.unassign()
        log.info("revoked %d partitions", len(partitions))

    def _release(self, partitions: list[TopicPartitionKey]) -> None:
        """Forget the state of input ``partitions``: they are no longer this instance's."""
        for tp in partitions:
            self._restorer.remove(self._source(tp[0]).changelog, tp[1])
            store = self._stores.pop(tp, None)
            if store is not None:
                store.close()
            self.reconciler.windows.forget(tp)
            self._committed.pop(tp, None)
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(tp[0], str(tp[1]))
        metrics.ASSIGNED_PARTITIONS.set(len(self._stores))

    def _update_lag(self) -> None:
        if not self._stores:
            return
        assigned = [TopicPartition(t, p) for t, p in self._stores]
        consumer = self._member()
        for tp in consumer.position(assigned):
            try:
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high < 0:
                continue
            position = tp.offset if tp.offset >= 0 else high
            metrics.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - position))

    @property
    def assigned(self) -> list[TopicPartitionKey]:
        """The input partitions this instance owns."""
        return sorted(self._stores)
