"""One transactional producer per owned input partition: how a zombie's writes are fenced.

An instance that stalls past the session timeout (a long GC pause, SIGSTOP, a
frozen VM) loses its partitions to another instance, but does not know it
until it runs again, and then it may write the outputs and changelog records
of the batch it was in. Kafka fences such a zombie by producer: every input
partition's records (its outputs, dead letters, source positions and changelog
records) go through a producer whose ``transactional.id`` names that
partition. The instance that is assigned the partition initializes a producer
with the same id first thing, which fences the previous owner's: its next
produce or commit fails with ``PRODUCER_FENCED`` and nothing more of it
reaches the log. The data plane then leaves its group and joins again
(:mod:`processor.outages`).

Each batch is one transaction per partition. Transactions serve the fencing
here, not atomic visibility: the commit protocol orders outputs before state
either way (:mod:`processor.dataplane.commit`), and the embedded broker shows
aborted records to every reader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from confluent_kafka import KafkaException, Producer

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


class PartitionWriter:
    """The producer of one input partition's records, one transaction per batch."""

    def __init__(self, config: Config, tp: TopicPartitionKey) -> None:
        settings = {
            "transactional.id": transactional_id(config.processor.pipeline, *tp),
            "linger.ms": 5,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
        #: Only failures are reported back (no Python call per acknowledged record).
        self.producer = Producer(producer_config(config.kafka, **settings, **FAILURES_ONLY))
        self.acks = Acknowledgements(self.producer)
        self._open = False
        # Fences the previous owner's producer: its writes fail from here on.
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
        """Give the partition up: a transaction left open is aborted (a fenced producer
        has nothing left to abort or deliver)."""
        with contextlib.suppress(KafkaException, SystemError):
            if self._open:
                self.producer.abort_transaction(5.0)
            self.producer.flush(0)
        self._open = False
