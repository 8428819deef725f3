"""The change-topic data plane: a confluent-kafka batch loop with RocksDB state.

Faust's per-event stream caps far below what librdkafka delivers, so the Faust
worker hosts this loop in a thread of its own. Each turn: follow the control
topic, obey the pipeline's lifecycle (join or leave the consumer group, pause
or resume), consume a batch, decide it (:mod:`processor.reconcile.batch`),
commit it (:mod:`processor.dataplane.commit`, the one place where the protocol
lives), and take a step of any state restore (:mod:`processor.dataplane.partitions`).
A partition whose state holds a crashed batch's reads decides exactly those
again first (:mod:`processor.dataplane.replay`).

Guarantee: at least once, without loss; see :mod:`processor.dataplane.commit`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.dataplane.batch_limit import Limit, after_assignment, next_limit, take_batch
from processor.dataplane.commit import Committer
from processor.dataplane.partitioner_watch import PartitionerWatch
from processor.dataplane.partitions import Partitions
from processor.dataplane.removals import Removals
from processor.dataplane.replay import Replays
from processor.errors import ProcessorError, RegistryRefusedSourceError
from processor.events.chunk_records import ROWS_PER_RECORD, framed_rows, rows_of
from processor.events.chunk_tag import UNSIGNED, ChunkTags
from processor.outages import Outage, is_outage
from processor.pipeline.control_topic import ControlReader, ControlView, Lifecycle
from processor.pipeline.offsets import complete_write
from processor.pipeline.offsets_lease import Lease, LeaseLost, abandoned, new_writer
from processor.reconcile.batch import Batch, Reconciler, TopicPartitionKey
from processor.tuning import keep_freed_memory, tune_garbage_collector
from state.store import StateBackend
from tidemark.core.config import Config
from tidemark.core.failpoints import Failpoint
from tidemark.core.group_repair import RebalanceWatch, repair_stuck
from tidemark.core.kafka import (
    RebalanceErrors,
    client_config,
    consumer_config,
    data_messages,
    dead_letter_topic_config,
    ensure_topics,
    headers_of,
    partition_counts,
    queue_topic_config,
    record_topic_config,
)
from tidemark.core.messages import RawMessage
from tidemark.core.record_auth import record_keys
from tidemark.core.schema_registry import configured_schemas
from tidemark.core.topics import (
    backfill_prefix,
    backfill_topic,
    backfilled_topic,
    dataplane_group,
    instances_topic,
)

log = logging.getLogger(__name__)


class DataPlane:
    """Consumes change topics, reconciles them, produces reconciled topics."""

    def __init__(self, config: Config, backend: StateBackend) -> None:
        self.config = config
        self.group = dataplane_group(config.processor.pipeline)
        self._rebalance = RebalanceWatch(config.kafka.stuck_rebalance_s)
        #: What the group's callbacks raised, raised again after the consume that ran them.
        self._callback_errors = RebalanceErrors()
        self.reconciler = Reconciler(
            config,
            configured_schemas(config.kafka),
            partition_count=lambda topic: self.partitions.partition_counts.get(topic),
        )
        self._admin = AdminClient(client_config(config.kafka))
        self._replays = Replays(config.processor.pipeline)
        self.partitions = Partitions(
            config,
            backend,
            self.reconciler,
            self._admin,
            paused=lambda: self.lifecycle is Lifecycle.PAUSED,
            released=self._replays.forget,
        )
        #: The tables being removed, and which of them this data plane has let go of.
        self.removals = Removals()
        #: Whether state of removed tables may be left to delete.
        self._forget_due = True
        self._committer = Committer(config, self.reconciler)
        self._input = re.compile(config.input_pattern())
        self._backfill = backfill_prefix(config.processor.pipeline)
        self._partitioner = PartitionerWatch(
            config.source.partitioner,
            lambda topic: self.partitions.partition_counts.get(topic, 0),
            self._backfill,
        )
        #: Rows a batch takes now (:mod:`processor.dataplane.batch_limit`), and the time a
        #: batch may take before the limit is cut.
        self._batch_limit = Limit(config.processor.batch_size)
        #: Whether the turn's take of records ran an assignment (which set the limit).
        self._assigned_in_turn = False
        self._batch_budget = config.kafka.max_poll_interval_ms / 1000 / 4
        metrics.BATCH_LIMIT.set(self._batch_limit.rows)
        self._chunk_tags = ChunkTags()
        self._record_keys = record_keys()
        self._subscribed: list[str] = []
        self._next_discovery = 0.0
        self._next_lag = 0.0
        #: When the next check for pending keys due to be asked for again comes.
        self._next_ask_check = 0.0
        #: Kafka not answering: the loop waits and tries again, up to a deadline.
        self.outage = Outage("data plane", config.kafka.outage_deadline_s)
        self._decided = Failpoint("batch-decided")
        self._stop = threading.Event()
        self.running = False
        #: The lifecycle state this instance has applied (:mod:`processor.pipeline.control_topic`).
        self.lifecycle = Lifecycle.STOPPED
        self.failure: BaseException | None = None
        #: The group's consumer while the data plane is a member (not STOPPED).
        self._consumer: Consumer | None = None

    # -- the loop -------------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop`; on an unexpected error record it in ``failure`` and return.

        A turn that fails because Kafka did not answer leaves the group and releases
        every partition; the next turn joins again and replays from the committed
        offsets (:mod:`processor.outages`): nothing of the failed batch was committed.
        """
        tune_garbage_collector()
        keep_freed_memory()  # a batch's messages, decisions and outputs: tens of MB, each batch
        control: ControlReader | None = None
        try:
            while not self._stop.is_set():
                try:
                    if control is None:
                        control = self._start()
                    self._turn(control)
                    self.outage.passed()
                except RegistryRefusedSourceError as exc:
                    # nothing of the batch was committed: stop the topic, replay the rest
                    log.error("input topic %s stopped: %s", exc.topic, exc.reason)
                    self.reconciler.refuse_topic(exc.topic, exc.reason)
                    self._leave_quietly()
                except Exception as exc:
                    if not is_outage(exc):
                        raise
                    wait = self.outage.failed(exc)
                    self._leave_quietly()
                    self._stop.wait(wait)
        except BaseException as exc:
            self.failure = exc
            log.exception("data plane stopped on an error")
        finally:
            self.running = False
            self._close()
            if control is not None:
                control.close()

    def _start(self) -> ControlReader:
        """The pipeline's topics, and the control topic followed from its beginning."""
        kafka = self.config.kafka
        ensure_topics(
            self._admin,
            {self._committer.dead_letter_topic: kafka.topic_partitions},
            kafka.replication_factor,
            config=dead_letter_topic_config(kafka),
        )
        pipeline = self.config.processor.pipeline
        ensure_topics(
            self._admin,
            {self._committer.positions_topic: 1, instances_topic(pipeline): 1},
            kafka.replication_factor,
            config=record_topic_config(kafka, **{"cleanup.policy": "compact"}),
        )
        control = ControlReader(self.config)
        self.running = True
        return control

    def _turn(self, control: ControlReader) -> None:
        """Obey the lifecycle, consume a batch, decide and commit it, restore a little."""
        control.poll()
        marks_changed = self.removals.read(control.removing)
        if not self._obey(control):
            self.removals.update(member=False, held=set())
            self._stop.wait(0.2)
            return
        consumer = self._member()
        self._note_released(consumer)
        now = time.monotonic()
        if now >= self._next_discovery or marks_changed:
            self._forget_due |= marks_changed
            self._discover_topics()
            if self._forget_due:
                self._forget_due = self.partitions.forget_removed(self.removals.marked)
            self._next_discovery = now + 5.0
        restoring = self.partitions.busy
        timeout = 0.01 if restoring else self.config.processor.batch_timeout_ms / 1000
        self._assigned_in_turn = False
        messages = take_batch(
            consumer.consume,
            self._batch_limit.rows,
            timeout,
            self._rows_in,
            lambda: self._callback_errors.calls,
        )
        self._callback_errors.raise_pending()
        if now >= self._next_ask_check:
            self._next_ask_check = now + 1.0
            asks = self.reconciler.asks_due(self.partitions.stores, self.partitions.restoring)
        else:
            asks = False
        asks = asks or self.reconciler.wipes_due(self.partitions.stores, self.partitions.restoring)
        if messages or self._replays.waiting or asks:
            started = time.perf_counter()
            partitions = self.partitions
            batch = self.decide(messages)
            self._decided.passed()
            self._committer.commit(batch, partitions.stores, partitions.writers.of, consumer)
            self._replays.resume(consumer, self._held)
            seconds = time.perf_counter() - started
            metrics.BATCH_SECONDS.observe(seconds)
            limit = self._batch_limit
            if not self._assigned_in_turn:  # else this turn's work was not the new limit's
                limit = next_limit(
                    limit, seconds, self._batch_budget, self.config.processor.batch_size
                )
            if limit.rows != self._batch_limit.rows:
                log.info("batch limit %d rows (the last batch took %.1f s)", limit.rows, seconds)
                metrics.BATCH_LIMIT.set(limit.rows)
            self._batch_limit = limit
        if self.partitions.busy:
            self.partitions.restore_step(consumer, self._subscribed)
        if now >= self._next_lag:
            self.partitions.resume_again(consumer)
            self.partitions.update_lag(consumer)
            self._next_lag = now + 2.0
            if self._subscribed:  # subscribed to nothing, no rebalance is awaited
                repair_stuck(self._rebalance, self.config.kafka, self.group)

    def _rows_in(self, message: Message) -> int:
        """The most rows ``message`` may hold: a backfill record frames several."""
        return ROWS_PER_RECORD if (message.topic() or "").startswith(self._backfill) else 1

    def stop(self) -> None:
        """Ask the loop to finish its batch and leave the group."""
        self._stop.set()

    def decide(self, messages: list[Message]) -> Batch:
        """Reconcile ``messages`` against state, in memory (protocol step 1)."""
        groups: dict[TopicPartitionKey, list[RawMessage]] = {}
        backfill = self._backfill
        make = tuple.__new__  # RawMessage(...) without the named tuple's Python-level __new__
        tp: TopicPartitionKey = ("", -1)
        group: list[RawMessage] = []
        tagged = False
        keys = self._record_keys
        for msg in data_messages(messages):
            topic, partition = msg.topic() or "", msg.partition() or 0
            if partition != tp[1] or topic != tp[0]:  # a run of one partition's messages ends
                tp = (topic, partition)
                group = groups.setdefault(tp, [])
                tagged = topic.startswith(backfill)
            chunk = None
            if tagged:
                headers = headers_of(msg)
                if keys is not None and not keys.verify(
                    topic, partition, msg.key(), msg.value(), headers
                ):
                    unsigned = (
                        topic,
                        partition,
                        msg.offset() or 0,
                        msg.key(),
                        msg.value(),
                        UNSIGNED,
                    )
                    group.append(make(RawMessage, unsigned))  # a dead letter (review A3)
                    continue
                chunk = self._chunk_tags.parse(headers)
                count = framed_rows(headers)
                if count is not None:
                    rows = rows_of(topic, partition, msg.offset() or 0, msg.value(), chunk, count)
                    if rows is not None:
                        group += rows
                        continue
            fields = (topic, partition, msg.offset() or 0, msg.key(), msg.value(), chunk)
            group.append(make(RawMessage, fields))
        self._partitioner.observe(groups)
        for tp in groups:
            self.partitions.read(tp)
        consumer = self._member()
        partitions = self.partitions
        replays = self._replays
        replays.check(partitions.stores, lambda owned: not partitions.restoring(owned))
        if replays.waiting:
            replays.take(groups, consumer)

        def reached(owned: TopicPartitionKey) -> int:
            # The batch's own messages first: a replay's consumer position may be elsewhere.
            group = groups.get(owned)
            decided = group[-1].offset + 1 if group else -1
            return max(decided, partitions.reached(consumer, owned))

        def waiting(owned: TopicPartitionKey) -> bool:
            # No decision on a partition whose replay is still collecting its batch.
            return partitions.restoring(owned) or replays.collecting(owned)

        return self.reconciler.decide(groups, partitions.stores, waiting, reached)

    @property
    def refused(self) -> dict[str, str]:
        """Input topics stopped because they break their envelope's constraints."""
        return self.reconciler.refused

    @property
    def released_for_removal(self) -> list[str]:
        """The input topics of the tables being removed that this data plane let go of."""
        return sorted(self.removals.released)

    def _note_released(self, consumer: Consumer) -> None:
        """Work out which tables being removed this data plane has let go of."""
        held: set[str] = set()
        if self.removals.marked:
            pipeline = self.config.processor.pipeline
            held = {backfilled_topic(pipeline, p.topic) or p.topic for p in consumer.assignment()}
        self.removals.update(member=True, held=held)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.partitions.on_assign(consumer, partitions)
        self.removals.assigned()
        if partitions:
            self._batch_limit = after_assignment(
                self._batch_limit, self.config.processor.batch_size
            )
            self._assigned_in_turn = True
            metrics.BATCH_LIMIT.set(self._batch_limit.rows)

    @property
    def assigned(self) -> list[TopicPartitionKey]:
        """The input partitions this instance owns."""
        return sorted(self.partitions.stores)

    # -- membership and the lifecycle ---------------------------------------------

    def _obey(self, control: ControlView) -> bool:
        """Apply the pipeline's lifecycle; whether to consume now.

        An offsets write in progress keeps the data plane out of the group; one its
        writer has not renewed for ``processor.offsets_write_abandoned_s`` is completed
        here, by one instance.
        """
        wanted = control.lifecycle
        pending = control.offsets_write
        if pending is not None:
            if abandoned(self.config, pending, int(time.time() * 1000)):
                self._complete_left(pending)
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

    def _complete_left(self, plan: dict[str, Any]) -> None:
        """Claim an offsets write its writer left, and complete it if the claim holds
        (:mod:`processor.pipeline.offsets_lease`)."""
        lease = Lease(self.config, plan, new_writer("dataplane"))
        log.warning("claiming an offsets write its writer left unfinished (%s)", lease.writer)
        if not lease.claim():
            log.info("another instance claimed the offsets write; it completes it")
            return
        try:
            complete_write(self.config, lease.plan, lease=lease)
        except LeaseLost as exc:
            log.warning("%s", exc)
            return
        log.warning("completed the offsets write its writer left unfinished")

    def _join(self) -> None:
        self._consumer = Consumer(
            consumer_config(
                self.config.kafka,
                self.group,
                **{
                    "enable.partition.eof": False,
                    "fetch.wait.max.ms": self.config.kafka.fetch_wait_max_ms,
                    # Partition p of an input topic and of its backfill topic go together.
                    "partition.assignment.strategy": "range",
                    **self._rebalance.settings(),
                },
            )
        )
        self._rebalance.restart()
        self._subscribed = []
        self._next_discovery = 0.0
        self.lifecycle = Lifecycle.RUNNING

    def _leave(self) -> None:
        """Leave the consumer group and release every partition's state."""
        consumer, self._consumer = self._member(), None
        try:
            consumer.close()
        finally:
            self._callback_errors.clear()  # a revoke that failed: every store is closed here
            self.partitions.release_all()

    def _leave_quietly(self) -> None:
        """Leave the group after a failed turn (the broker may not answer the goodbye)."""
        if self._consumer is None:
            return
        try:
            self._leave()
        except KafkaException as exc:
            log.warning("leaving the group: %s", exc)
        self.lifecycle = Lifecycle.STOPPED

    def _member(self) -> Consumer:
        if self._consumer is None:
            raise ProcessorError("the data plane is not a member of its consumer group")
        return self._consumer

    def _held(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Those of ``partitions`` that must not be read now."""
        if self.lifecycle is Lifecycle.PAUSED:
            return partitions
        return self.partitions.held(partitions)

    def _set_paused(self, paused: bool) -> None:
        """Pause every assigned partition, or resume those not held back for a reason."""
        consumer = self._member()
        assigned = consumer.assignment()
        if paused:
            consumer.pause(assigned)
            return
        consumer.resume(assigned)
        held = self.partitions.held(assigned)
        if held:
            consumer.pause(held)

    def _discover_topics(self) -> None:
        """Subscribe to the input topics that exist now, and to their backfill topics, but
        those of tables being removed.

        librdkafka's own pattern subscription uses POSIX regular expressions (no
        look-ahead), so topics are matched here with Python's and subscribed by name.
        """
        pipeline = self.config.processor.pipeline
        listed = self._admin.list_topics(timeout=10).topics
        marked = self.removals.marked
        inputs = [t for t in listed if self._input.match(t) and t not in marked]
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
                config=queue_topic_config(self.config.kafka),
            )
        names = sorted([*inputs, *wanted])
        changed = names != self._subscribed
        if changed:
            self._forget_due = True
            if names:
                if not self._subscribed:
                    self._rebalance.restart()  # the first rebalance is awaited from now
                self._member().subscribe(
                    names,
                    on_assign=self._callback_errors.wrap(self._on_assign),
                    on_revoke=self._callback_errors.wrap(self.partitions.on_revoke),
                    on_lost=self._callback_errors.wrap(self.partitions.on_revoke),
                )
            else:
                self._member().unsubscribe()
            log.info("input topics: %s", ", ".join(names) or "none yet")
            self._subscribed = names
        self.removals.subscribed(names, changed)

    def _close(self) -> None:
        try:
            if self._consumer is not None:
                self._leave()
        finally:
            self.partitions.close()
