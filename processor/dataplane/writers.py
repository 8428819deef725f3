"""The transactional producers of the owned input partitions: how a zombie's writes are fenced.

An instance that stalls past the session timeout (a long GC pause, SIGSTOP, a
frozen VM) loses its partitions to another instance, but does not know it
until it runs again, and then it may write the outputs and changelog records
of the batch it was in. Kafka fences such a zombie by producer: every input
partition's records (its outputs, dead letters, source positions and changelog
records) go through a producer whose ``transactional.id`` the partition's next
owner knows, and initializes first thing. That fences the previous owner's
producer: its next produce or commit fails with ``PRODUCER_FENCED`` and nothing
more of it reaches the log. The data plane then leaves its group and joins
again (:mod:`processor.outages`).

The id is not the partition's but its *slot*'s: its partition number and its
topic's partition count. The group assigns with the range assignor, which gives
partition ``p`` of every topic of ``n`` partitions (and its backfill topic) to
the same member, so an instance holds one producer per slot it owns, never more
than the partition counts in use (three producers for 500 tables of three
partitions), where a producer per partition cost threads, connections and a
commit each (bench/results/scale.json). Fencing holds whatever the assignor
does: the group rebalances eagerly (every partition is revoked before an
assignment, and every slot's producer closed), so whoever is given a partition
initializes its slot's id, and the partition's last owner is fenced. An
assignment that splits a slot between two live members (while their
subscriptions differ, for the few seconds a new topic takes to be seen by both)
fences the one that held it first: it joins again.

Kafka's own answer, one producer per instance that sends its offsets with the
group's generation (KIP-447), needs a broker that refuses a stale generation's
offset commit and hides aborted records; the embedded broker does neither.

Each batch is one transaction per slot. Transactions serve the fencing here, not
atomic visibility: the commit protocol orders outputs before state either way
(:mod:`processor.dataplane.commit`), and the embedded broker shows aborted
records to every reader.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from confluent_kafka import KafkaException, Producer

from processor import metrics
from processor.errors import WriterFailedError
from processor.reconcile.batch import TopicPartitionKey
from tidemark.core.config import Config
from tidemark.core.kafka import (
    FAILURES_ONLY,
    TRANSACTION_TIMEOUT,
    Acknowledgements,
    producer_config,
)
from tidemark.core.topics import transactional_id

log = logging.getLogger(__name__)

#: A partition's slot: its topic's partition count and its partition number.
Slot = tuple[int, int]


class SlotWriter:
    """The producer of one slot's records, one transaction per batch."""

    def __init__(self, config: Config, slot: Slot) -> None:
        settings = {
            "transactional.id": transactional_id(config.processor.pipeline, *slot),
            "linger.ms": 5,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
        #: Only failures are reported back (no Python call per acknowledged record).
        self.producer = Producer(producer_config(config.kafka, **settings, **FAILURES_ONLY))
        self.acks = Acknowledgements(self.producer)
        self._open = False
        # Fences the previous holder's producer: its writes fail from here on.
        self.producer.init_transactions(TRANSACTION_TIMEOUT)

    def begin(self) -> None:
        """Open the batch's transaction, unless it is open already."""
        if not self._open:
            self.producer.begin_transaction()
            self._open = True

    def wait(self) -> None:
        """Wait until Kafka acknowledged every record produced so far."""
        with self._failing():
            self.acks.wait("batch's outputs")

    def commit(self) -> None:
        """Deliver everything produced in the transaction and commit it."""
        if self._open:
            with self._failing():
                self.producer.commit_transaction(TRANSACTION_TIMEOUT)
            self._open = False

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """confluent-kafka reports a fatal error met while it runs delivery callbacks (a
        fenced producer) as a ``SystemError``: say what it is."""
        try:
            yield
        except SystemError as exc:
            raise WriterFailedError(f"the partition's producer failed: {exc}") from exc

    def close(self) -> None:
        """Give the slot up: a transaction left open is aborted (a fenced producer has
        nothing left to abort or deliver)."""
        with contextlib.suppress(KafkaException, SystemError):
            if self._open:
                self.producer.abort_transaction(5.0)
            self.producer.flush(0)
        self._open = False


class Writers:
    """The owned input partitions' writers: one per slot, shared by its partitions."""

    def __init__(self, config: Config) -> None:
        self._config = config
        #: Each owned input partition's writer.
        self.of: dict[TopicPartitionKey, SlotWriter] = {}
        self._slots: dict[Slot, SlotWriter] = {}
        self._members: dict[Slot, set[TopicPartitionKey]] = {}
        self._slot_of: dict[TopicPartitionKey, Slot] = {}

    def take(self, tp: TopicPartitionKey, partition_count: int) -> None:
        """Write ``tp``'s records from now on; the first partition of a slot makes its
        producer, which fences the slot's previous holder."""
        slot = (partition_count, tp[1])
        writer = self._slots.get(slot)
        if writer is None:
            started = time.monotonic()
            writer = self._slots[slot] = SlotWriter(self._config, slot)
            log.debug("producer of slot %s in %.2f s", slot, time.monotonic() - started)
            metrics.PRODUCERS.set(len(self._slots))
        self._members.setdefault(slot, set()).add(tp)
        self._slot_of[tp] = slot
        self.of[tp] = writer

    def give_up(self, tp: TopicPartitionKey) -> None:
        """Stop writing ``tp``'s records; the slot's last partition closes its producer."""
        slot = self._slot_of.pop(tp, None)
        if slot is None:
            return
        del self.of[tp]
        members = self._members[slot]
        members.discard(tp)
        if not members:
            del self._members[slot]
            self._slots.pop(slot).close()
            metrics.PRODUCERS.set(len(self._slots))
