"""The commit protocol of a batch, written once, as numbered steps with their crash windows.

Step 1 (deciding outputs and state updates in memory) is
:meth:`processor.reconcile.batch.Reconciler.decide`; :meth:`Committer.commit`
runs the rest. Each step's crash window:

2. produce outputs, dead letters and the partitions' source positions, and
   wait until Kafka acknowledged every one: a crash before that replays the
   batch against state that has not moved; outputs already written are
   re-emitted (equal versions);
3. produce the batch's changelog records, and wait for them: no state of the
   batch, in the changelog or in a store, is durable before the outputs it
   implies. A crash before they all land leaves the changelog at the previous
   batch or partly into this one, whose outputs are all in Kafka already: a
   restore from it drops nothing that was not emitted;
4. write state, the next input offsets and the changelog position in one
   RocksDB batch per partition: a crash before it leaves local state at the
   previous batch; on restart the changelog brings it forward (or the replay
   re-applies);
5. commit the input offsets to Kafka: a crash before it replays the batch
   against a store whose checkpoint already covers it; its outputs are in
   Kafka, so it is not emitted again (a store restored from the changelog has
   no checkpoint, and re-emits its equal versions).

Two producers, both idempotent: one reports failures only (outputs, dead
letters, positions and most changelog records, without a Python callback per
record); the other carries the last changelog record of each partition and
reports its offset, the changelog position of the store's checkpoint.

Guarantee: at least once, without loss. A crash anywhere replays at most the
batch in flight, whose changes the rules re-emit (equal versions) instead of
dropping; the output is idempotent per key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from processor import metrics
from processor.dataplane.positions import source_position
from processor.reconcile.batch import Batch, InputTopic, TopicPartitionKey
from state.store import Checkpoint, PartitionStore
from tidemark.config import Config
from tidemark.errors import InputError
from tidemark.failpoints import Failpoint
from tidemark.kafka import (
    FAILURES_ONLY,
    Acknowledgements,
    produce_waiting,
    producer_config,
)
from tidemark.topics import dead_letter_topic, positions_topic

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


class Committer:
    """Steps 2 to 5 of the protocol, and the producers they use."""

    def __init__(self, config: Config, topic: Callable[[str], InputTopic]) -> None:
        self._topic = topic
        self._partitions = config.kafka.topic_partitions
        pipeline = config.processor.pipeline
        self.dead_letter_topic = dead_letter_topic(pipeline)
        self.positions_topic = positions_topic(pipeline)
        settings = {
            "linger.ms": 5,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
        #: Outputs, dead letters, positions and changelog records: only their
        #: failures are reported back.
        self._producer = Producer(producer_config(config.kafka, **settings, **FAILURES_ONLY))
        self._acks = Acknowledgements(self._producer)
        #: The last changelog record of each partition's batch, on a producer that
        #: reports its offset: where the store's changelog has reached.
        self._changelog = Producer(producer_config(config.kafka, **settings))
        self._changelog_acks = Acknowledgements(self._changelog)
        #: Per changelog partition, the offset after its last acknowledged record.
        self._changelog_ends: dict[TopicPartitionKey, int] = {}
        #: Bound once: passed with every record.
        self._on_delivery = self._acks.on_delivery
        self._outputs_acked = Failpoint("outputs-acked")
        self._after_flush = Failpoint("after-flush")
        self._window_release = Failpoint("window-release")

    def commit(
        self, batch: Batch, stores: Mapping[TopicPartitionKey, PartitionStore], consumer: Consumer
    ) -> None:
        """Make ``batch`` durable: outputs first, then state, then input offsets."""
        # Step 2: outputs, dead letters and source positions, acknowledged.
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
        self._acks.wait("batch's outputs")
        self._outputs_acked.passed()
        # Step 3: the changelog records, acknowledged.
        for (topic, partition), state in batch.states.items():
            if not state.updates:
                continue
            # The last record's offset, reported by its own producer, is the changelog
            # position of the checkpoint. The batch's other records may land after it:
            # a restore from that position then applies them again, which changes
            # nothing (one batch writes a key once, and the next batch's records follow
            # all of this one's, which are acknowledged before it is decided).
            changelog, changes = self._topic(topic).changelog, list(state.updates.items())
            for key, value in changes[:-1]:
                try:
                    produce(changelog, value, key, partition, on_delivery)
                except BufferError:
                    produce_waiting(self._producer, changelog, value, key, on_delivery, partition)
            key, value = changes[-1]
            produce_waiting(self._changelog, changelog, value, key, self._on_changelog, partition)
        self._acks.wait("batch's changelog records")
        self._changelog_acks.wait("batch's last changelog records")
        self._after_flush.passed()
        if batch.released:
            self._window_release.passed()
        # Step 4: state, the next input offsets and the changelog position, per partition.
        for tp, state in batch.states.items():
            store = stores.get(tp)
            if store is None:
                continue
            changelog_end = self._changelog_ends.get((self._topic(tp[0]).changelog, tp[1]))
            store.commit(state.updates, Checkpoint(batch.next_offsets.get(tp), changelog_end))
        # Step 5: the input offsets in Kafka.
        if batch.next_offsets:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in batch.next_offsets.items()],
                asynchronous=False,
            )
        for (topic, partition), offset in batch.rewinds.items():
            rewind = TopicPartition(topic, partition, offset)
            consumer.pause([rewind])
            consumer.seek(rewind)

    def flush(self, timeout: float) -> None:
        """Deliver what is still queued (on close)."""
        self._producer.flush(timeout)
        self._changelog.flush(timeout)

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
            msg.partition % self._partitions,
            headers,
        )
        metrics.DEAD_LETTERS.labels(msg.topic, error.kind).inc()
