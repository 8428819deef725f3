"""The commit protocol of a batch, written once, as numbered steps with their crash windows.

Step 1 (deciding outputs and state updates in memory) is
:meth:`processor.reconcile.batch.Reconciler.decide`; :meth:`Committer.commit`
runs the rest. Each step's crash window:

2. produce outputs, dead letters, the partitions' source positions and the
   signals that ask for pending keys' rows, and wait until Kafka acknowledged
   every one: a crash before that replays the
   batch against state that has not moved; outputs already written are
   re-emitted (equal versions). A partition whose batch read chunk rows or
   released window rows first records, in its changelog, what it read
   (:mod:`processor.reconcile.batch_reads`): its replay reads exactly that
   again, so it decides as the crashed batch did;
3. produce the batch's changelog records, and wait for them: no state of the
   batch, in the changelog or in a store, is durable before the outputs it
   implies. A crash before they all land leaves the changelog at the previous
   batch or partly into this one, whose outputs are all in Kafka already: a
   restore from it drops nothing that was not emitted. The removal of the
   batch's reads goes last in its partition, so it lands only with all of them;
4. write state, the next input offsets and the changelog position in one
   RocksDB batch per partition: a crash before it leaves local state at the
   previous batch; on restart the changelog brings it forward (or the replay
   re-applies). The flushed offset, below which every input offset's outputs
   are in Kafka, never moves back: a rewind that kept state is replayed in
   batches of any size without emitting again what it emitted before;
5. commit the input offsets to Kafka: a crash before it replays the batch
   against a store whose checkpoint already covers it; its outputs are in
   Kafka, so it is not emitted again (a store restored from the changelog has
   no checkpoint, and re-emits its equal versions). A commit the group refuses
   because it is rebalancing is the same case: the partitions move at the next
   poll, and the batch is not failed (leaving the group would cost every
   member one more rebalance).

Every record of an input partition goes through the transactional producer
of its slot (:mod:`processor.dataplane.writers`), one transaction a batch: a
zombie that lost the partition is fenced, and none of its records lands after
the next owner's. The store's checkpoint keeps how far its
changelog goes: the partition's end, read at most every few seconds while a
batch's transaction is still open (after its commit a next owner may have
written there), so a restore replays at most those seconds again.

Guarantee: at least once, without loss. A crash anywhere replays at most the
batch in flight, whose changes the rules re-emit (equal versions) instead of
dropping; the output is idempotent per key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.dataplane.positions import source_position
from processor.dataplane.writers import SlotWriter
from processor.reconcile.batch import Batch, Reconciler, TopicPartitionKey
from processor.reconcile.batch_reads import READS_KEY
from processor.snapshot.signals import read_again_signals
from state.store import Checkpoint, PartitionStore
from tidemark.core.config import Config
from tidemark.core.errors import InputError
from tidemark.core.failpoints import Failpoint
from tidemark.core.kafka import client_config, produce_waiting, watermarks
from tidemark.core.record_auth import record_keys
from tidemark.core.topics import dead_letter_topic, positions_topic, signal_topic

log = logging.getLogger(__name__)

Headers = list[tuple[str, str | bytes | None]]


#: Offset commits a rebalance refuses: the member's generation is over.
_REBALANCE_CODES = frozenset(
    {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS}
)


def _rebalancing(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in _REBALANCE_CODES


#: Seconds between two readings of a changelog partition's end (the checkpoint's position).
CHANGELOG_POSITION_EVERY = 5.0


class Committer:
    """Steps 2 to 5 of the protocol over the owned partitions' writers."""

    def __init__(self, config: Config, reconciler: Reconciler) -> None:
        self._reconciler = reconciler
        #: Each output topic's input topic (records name their output topic).
        self._inputs: dict[str, str] = {}
        self._partitions = config.kafka.topic_partitions
        pipeline = config.processor.pipeline
        self.dead_letter_topic = dead_letter_topic(pipeline)
        self.positions_topic = positions_topic(pipeline)
        self.signal_topic = signal_topic(pipeline)
        self._topic_prefix = config.source.topic_prefix
        #: Reads where changelog partitions end.
        self._admin = AdminClient(client_config(config.kafka))
        #: Per input partition: when its changelog's end was last read.
        self._positions_read: dict[TopicPartitionKey, float] = {}
        self._record_keys = record_keys()
        self._outputs_acked = Failpoint("outputs-acked")
        self._after_flush = Failpoint("after-flush")
        self._window_release = Failpoint("window-release")

    def commit(
        self,
        batch: Batch,
        stores: Mapping[TopicPartitionKey, PartitionStore],
        writers: Mapping[TopicPartitionKey, SlotWriter],
        consumer: Consumer,
    ) -> None:
        """Make ``batch`` durable: outputs first, then state, then input offsets
        (``writers``: the owned input partitions')."""
        used: dict[TopicPartitionKey, SlotWriter] = {}
        #: The writers of the batch's transactions, each once (partitions share a slot's).
        opened: dict[int, SlotWriter] = {}

        def writer(tp: TopicPartitionKey) -> SlotWriter:
            found = used.get(tp)
            if found is None:
                found = used[tp] = writers[tp]
                if id(found) not in opened:
                    opened[id(found)] = found
                    found.begin()
            return found

        # Step 2: first what partitions whose decisions depend on how their two topics
        # interleaved read (processor.reconcile.batch_reads); then outputs, dead letters and
        # source positions, acknowledged.
        if batch.reads:
            self._record_reads(batch, writer)
        last: tuple[str, int] = ("", -1)
        target: Any = None
        produce: Any = None
        on_delivery: Any = None
        for record in batch.records:
            if record[1] != last[1] or record[0] != last[0]:  # a run of one partition ends
                last = (record[0], record[1])
                target = writer((self._input_of(record[0]), record[1]))
                produce, on_delivery = target.producer.produce, target.acks.on_delivery
            try:
                produce(record[0], record[3], record[2], record[1], on_delivery)
            except BufferError:
                produce_waiting(
                    target.producer, record[0], record[3], record[2], on_delivery, record[1]
                )
        signing = self._record_keys
        for tp, markers in batch.markers.items():  # a truncate's, in its own partition's
            target = writer(tp)
            for record in markers:
                produce_waiting(
                    target.producer,
                    record[0],
                    record[3],
                    record[2],
                    target.acks.on_delivery,
                    record[1],
                    None
                    if signing is None
                    else [signing.sign(record[0], record[1], record[2], record[3])],
                )
        for topic, count in batch.produced.items():
            metrics.EVENTS_OUT.labels(topic).inc(count)
        for tp, keys in batch.read_again.items():
            self._ask_again(writer(tp), tp[0], list(keys.values()))
        for error in batch.dead_letters:
            msg = error.message
            owner = self._reconciler.state_partition((msg.topic, msg.partition))
            self._produce_dead_letter(writer(owner), error)
        self._record_positions(batch, writer)
        for target in opened.values():
            target.wait()
        self._outputs_acked.passed()
        # Step 3: the changelog records, acknowledged with the transaction's commit.
        for (topic, partition), state in batch.states.items():
            if not state.updates:
                continue
            target = writer((topic, partition))
            changelog = self._reconciler.topic(topic).changelog
            on_delivery = target.acks.on_delivery
            for key, value in state.updates.items():
                try:
                    target.producer.produce(changelog, value, key, partition, on_delivery)
                except BufferError:
                    produce_waiting(target.producer, changelog, value, key, on_delivery, partition)
        # Where each changelog goes, read before the commits: no other owner's records can
        # be there yet (see _changelog_positions).
        positions = self._changelog_positions(
            [tp for tp, state in batch.states.items() if state.updates and tp in stores]
        )
        for target in opened.values():
            target.commit()
        self._after_flush.passed()
        if batch.released:
            self._window_release.passed()
        # Step 4: state, the next input offsets and the changelog position, per partition.
        for tp, state in batch.states.items():
            store = stores.get(tp)
            if store is None:
                continue
            checkpoint = Checkpoint.after_batch(batch.next_offsets.get(tp), positions.get(tp))
            store.commit(state.updates, checkpoint)
        # Step 5: the input offsets in Kafka.
        if batch.next_offsets:
            try:
                consumer.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in batch.next_offsets.items()],
                    asynchronous=False,
                )
            except KafkaException as exc:
                if not _rebalancing(exc):
                    raise
                # As a crash before this step: the partitions move at the next poll, and
                # their next owner replays the batch from the committed offsets.
                log.info("input offsets not committed, the group is rebalancing: %s", exc)
        for (topic, partition), offset in batch.rewinds.items():
            rewind = TopicPartition(topic, partition, offset)
            consumer.pause([rewind])
            consumer.seek(rewind)

    def _input_of(self, output: str) -> str:
        """The input topic whose output topic ``output`` is."""
        found = self._inputs.get(output)
        if found is None:
            self._inputs = {t.output: name for name, t in self._reconciler.topics.items()}
            found = self._inputs[output]
        return found

    def _changelog_positions(self, tps: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The end of each of ``tps``' changelogs, read at most every few seconds a partition,
        all in one request (a partition left out: not now; its store keeps its last
        position, a lower bound).

        It is read while the batch's transaction is open. If that transaction then
        commits, no other instance had been given the partition (its writer would have
        fenced this one's first), so the end holds none of a next owner's records. Read
        after the commit, it could: an owner that stalled there would checkpoint records
        its store never saw, and a later restore would skip them. What the batch wrote
        itself may lie above it (a reader sees up to the open transaction), and a restore
        reads it again."""
        now = time.monotonic()
        due = [
            tp for tp in tps if now - self._positions_read.get(tp, 0.0) >= CHANGELOG_POSITION_EVERY
        ]
        if not due:
            return {}
        for tp in due:
            self._positions_read[tp] = now
        topic = self._reconciler.topic
        asked = {TopicPartition(topic(t).changelog, p): (t, p) for t, p in due}
        marks = watermarks(self._admin, list(asked))
        return {asked[TopicPartition(c, p)]: high for (c, p), (_low, high) in marks.items()}

    def _record_positions(
        self, batch: Batch, writer: Callable[[TopicPartitionKey], SlotWriter]
    ) -> None:
        """Produce each input partition's source position at its next offset (step 2)."""
        for tp, event in batch.last_events.items():
            position = source_position(event)
            if position is not None and tp in batch.next_offsets:
                record = orjson.dumps({"at_offset": batch.next_offsets[tp], **position})
                key = f"{tp[0]}/{tp[1]}".encode()
                target = writer(tp)
                produce_waiting(
                    target.producer, self.positions_topic, record, key, target.acks.on_delivery, 0
                )

    def _record_reads(
        self, batch: Batch, writer: Callable[[TopicPartitionKey], SlotWriter]
    ) -> None:
        """Produce each partition's batch reads to its changelog, and wait for them."""
        for tp, reads in batch.reads.items():
            target = writer(tp)
            changelog = self._reconciler.topic(tp[0]).changelog
            produce_waiting(
                target.producer,
                changelog,
                reads.encode(),
                READS_KEY,
                target.acks.on_delivery,
                tp[1],
            )
        for target in {id(writer(tp)): writer(tp) for tp in batch.reads}.values():
            target.wait()

    def _ask_again(self, target: SlotWriter, topic: str, keys: list[dict[str, object]]) -> None:
        """Ask the snapshot coordinator for the rows of ``keys`` of ``topic``'s table: signals
        in the partition's transaction, so in Kafka before the state that marks them
        pending."""
        table = topic.removeprefix(self._topic_prefix + ".")
        for request_id, value in read_again_signals(table, keys):
            produce_waiting(
                target.producer,
                self.signal_topic,
                value,
                request_id.encode(),
                target.acks.on_delivery,
                0,
            )
        metrics.ROWS_ASKED_AGAIN.labels(topic).inc(len(keys))

    def _produce_dead_letter(self, target: SlotWriter, error: InputError) -> None:
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
            target.producer,
            self.dead_letter_topic,
            msg.value,
            msg.key,
            target.acks.on_delivery,
            msg.partition % self._partitions,
            headers,
        )
        metrics.DEAD_LETTERS.labels(msg.topic, error.kind).inc()
