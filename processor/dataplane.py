"""The change-topic data plane: a confluent-kafka batch loop with RocksDB state.

Faust's per-event stream caps far below what librdkafka delivers (DESIGN.md),
so the Faust worker hosts this loop in a thread of its own. The loop consumes
batches from a consumer group separate from Faust's, reconciles them with the
rules of :mod:`processor.reconcile`, and commits each batch with the protocol
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
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.codec import Change, decode_debezium, decode_upsert, encode_output
from processor.errors import InputError, ProcessorError, RawMessage
from processor.reconcile import Action, Entry, reconcile
from state.store import PartitionStore, StateBackend
from tidemark.config import Config
from tidemark.kafka import client_config, consumer_config, ensure_topics, partition_counts

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
Headers = list[tuple[str, str | bytes | None]]


def output_topic(prefix: str, input_topic: str) -> str:
    """``<prefix>.<schema>.<table>`` becomes ``<prefix>.reconciled.<schema>.<table>``."""
    head = prefix + "."
    rest = input_topic[len(head) :] if input_topic.startswith(head) else input_topic
    return f"{prefix}.reconciled.{rest}"


@dataclass
class Batch:
    """What one batch decided: records to produce, state to write, offsets to commit."""

    records: list[tuple[str, int, bytes | None, bytes | None]] = field(default_factory=list)
    dead_letters: list[InputError] = field(default_factory=list)
    updates: dict[TopicPartitionKey, dict[bytes, bytes | None]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    next_offsets: dict[TopicPartitionKey, int] = field(default_factory=dict)


class DataPlane:
    """Consumes change topics, reconciles them, produces reconciled topics."""

    def __init__(self, config: Config, backend: StateBackend) -> None:
        self.config = config
        self.backend = backend
        self.group = f"{config.processor.pipeline}-dataplane"
        self.dead_letter_topic = f"{config.processor.pipeline}.dlq"
        self._decode: Callable[[RawMessage], Change] = (
            decode_upsert if config.processor.envelope == "upsert" else decode_debezium
        )
        self._stores: dict[TopicPartitionKey, PartitionStore] = {}
        self._outputs: set[str] = set()
        self._delivery_errors: list[KafkaError] = []
        self._input = re.compile(config.input_pattern())
        self._subscribed: list[str] = []
        self._stop = threading.Event()
        self.running = False
        self.failure: BaseException | None = None
        self.last_batch_at = 0.0
        self._admin = AdminClient(client_config(config.kafka))
        self._producer = Producer(
            client_config(
                config.kafka,
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "compression.type": "lz4",
                },
            )
        )
        self._consumer = Consumer(
            consumer_config(
                config.kafka, self.group, **{"enable.partition.eof": False, "fetch.wait.max.ms": 50}
            )
        )

    # -- lifecycle ----------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop`; on an unexpected error record it in ``failure`` and return."""
        next_lag = next_discovery = 0.0
        try:
            ensure_topics(
                self._admin,
                {self.dead_letter_topic: self.config.kafka.topic_partitions},
                self.config.kafka.replication_factor,
            )
            self.running = True
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_discovery:
                    self._discover_topics()
                    next_discovery = now + 5.0
                messages = self._consumer.consume(
                    self.config.processor.batch_size, self.config.processor.batch_timeout_ms / 1000
                )
                if messages:
                    started = time.perf_counter()
                    self.commit_batch(self.decide(messages))
                    metrics.BATCH_SECONDS.observe(time.perf_counter() - started)
                self.last_batch_at = time.time()
                if now >= next_lag:
                    self._update_lag()
                    next_lag = now + 2.0
        except BaseException as exc:
            self.failure = exc
            log.exception("data plane stopped on an error")
        finally:
            self.running = False
            self._close()

    def _discover_topics(self) -> None:
        """Subscribe to the input topics that exist now.

        librdkafka's own pattern subscription uses POSIX regular expressions (no
        look-ahead), so topics are matched here with Python's and subscribed by name.
        """
        names = sorted(
            t for t in self._admin.list_topics(timeout=10).topics if self._input.match(t)
        )
        if names != self._subscribed:
            if names:
                self._consumer.subscribe(
                    names,
                    on_assign=self._on_assign,
                    on_revoke=self._on_revoke,
                    on_lost=self._on_revoke,
                )
            else:
                self._consumer.unsubscribe()
            log.info("input topics: %s", ", ".join(names) or "none yet")
            self._subscribed = names

    def stop(self) -> None:
        """Ask the loop to finish its batch and leave the group."""
        self._stop.set()

    def _close(self) -> None:
        try:
            self._consumer.close()
        finally:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self._producer.flush(10)

    # -- one batch: decide, then commit -------------------------------------

    def decide(self, messages: list[Message]) -> Batch:
        """Reconcile ``messages`` against state, in memory (protocol step 1)."""
        batch = Batch()
        by_partition: dict[TopicPartitionKey, list[RawMessage]] = defaultdict(list)
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            raw = RawMessage(
                msg.topic() or "", msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()
            )
            by_partition[(raw.topic, raw.partition)].append(raw)
        envelope = self.config.processor.envelope
        prefix = self.config.source.topic_prefix
        for tp, group in by_partition.items():
            store = self._stores.get(tp)
            if store is None:  # revoked while the batch was in flight
                continue
            out = output_topic(prefix, tp[0])
            metrics.EVENTS_IN.labels(tp[0]).inc(len(group))
            keys = list({m.key for m in group if m.key is not None})
            state = dict(zip(keys, store.get_many(keys), strict=True))
            updates = batch.updates[tp]
            for raw in group:
                try:
                    self._reconcile_one(raw, state, updates, batch, out, envelope)
                except InputError as exc:
                    batch.dead_letters.append(exc)
            batch.next_offsets[tp] = group[-1].offset + 1
        return batch

    def _reconcile_one(
        self,
        raw: RawMessage,
        state: dict[bytes, bytes | None],
        updates: dict[bytes, bytes | None],
        batch: Batch,
        out: str,
        envelope: str,
    ) -> None:
        if raw.key is None:
            raise InputError("message without a key (the primary key is required)", raw)
        if raw.value is None and envelope != "upsert":
            return  # Debezium's tombstone after a delete event: the delete was handled
        change = self._decode(raw)
        stored = state.get(raw.key)
        outcome = reconcile(
            change.version, change.after, Entry.decode(stored) if stored is not None else None
        )
        if outcome.action is Action.DROP:
            metrics.EVENTS_DROPPED.labels(raw.topic).inc()
            return
        if outcome.entry is not None:
            encoded = outcome.entry.encode()
            state[raw.key] = encoded
            updates[raw.key] = encoded
        value = encode_output(change, outcome.previous, outcome.action.value, envelope, raw)
        batch.records.append((out, raw.partition, raw.key, value))
        if change.after is None:
            batch.records.append((out, raw.partition, raw.key, None))

    def commit_batch(self, batch: Batch) -> None:
        """The commit protocol, written once. Each step's crash window:

        2. produce outputs and dead letters: a crash before (3) completes replays the
           batch; outputs already written are re-emitted (equal versions);
        3. flush and wait for every acknowledgement: nothing below runs unless all
           outputs are durable in Kafka;
        4. write state and next offsets in one RocksDB batch per partition: a crash
           before it leaves state at the previous batch, and the replay re-applies;
        5. commit the input offsets to Kafka: a crash before it replays the batch
           against state that already holds it, so its changes are re-emitted.
        """
        for topic, partition, key, value in batch.records:
            self._produce(topic, partition, key, value)
            metrics.EVENTS_OUT.labels(topic).inc()
        for error in batch.dead_letters:
            self._produce_dead_letter(error)
        remaining = self._producer.flush(60)
        failures, self._delivery_errors = self._delivery_errors, []
        if remaining or failures:
            raise ProcessorError(
                "Kafka did not acknowledge the batch's outputs: "
                + (failures[0].str() if failures else f"{remaining} pending")
            )
        for tp, next_offset in batch.next_offsets.items():
            store = self._stores.get(tp)
            if store is not None:
                store.commit(batch.updates.get(tp, {}), next_offset)
        if batch.next_offsets:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in batch.next_offsets.items()],
                asynchronous=False,
            )

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._delivery_errors.append(err)

    def _produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=self._on_delivery,
                )
                return
            except BufferError:
                self._producer.poll(0.05)

    def _produce_dead_letter(self, error: InputError) -> None:
        msg = error.message
        log.warning("dead letter: %s", error)
        headers: Headers = [
            ("tidemark.source.topic", msg.topic.encode()),
            ("tidemark.source.partition", str(msg.partition).encode()),
            ("tidemark.source.offset", str(msg.offset).encode()),
            ("tidemark.error", error.reason.encode()),
        ]
        self._produce(
            self.dead_letter_topic,
            msg.partition % self.config.kafka.topic_partitions,
            msg.key,
            msg.value,
            headers,
        )
        metrics.DEAD_LETTERS.labels(msg.topic).inc()

    # -- partitions ---------------------------------------------------------

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        topics = {p.topic for p in partitions}
        new = topics - self._outputs
        if new:
            counts = partition_counts(self._admin, new)
            prefix = self.config.source.topic_prefix
            ensure_topics(
                self._admin,
                {output_topic(prefix, t): counts[t] for t in new},
                self.config.kafka.replication_factor,
                config={"cleanup.policy": "compact"},
            )
            self._outputs |= new
        for p in partitions:
            self._stores[(p.topic, p.partition)] = self.backend.open(p.topic, p.partition)
        metrics.ASSIGNED_PARTITIONS.set(len(self._stores))
        log.info(
            "assigned %d partitions: %s",
            len(partitions),
            ", ".join(f"{p.topic}[{p.partition}]" for p in partitions),
        )

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            store = self._stores.pop((p.topic, p.partition), None)
            if store is not None:
                store.close()
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(p.topic, str(p.partition))
        metrics.ASSIGNED_PARTITIONS.set(len(self._stores))
        log.info("revoked %d partitions", len(partitions))

    def _update_lag(self) -> None:
        if not self._stores:
            return
        assigned = [TopicPartition(t, p) for t, p in self._stores]
        for tp in self._consumer.position(assigned):
            try:
                _low, high = self._consumer.get_watermark_offsets(tp, cached=True)
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
