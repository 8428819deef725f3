"""Chunk reads in a process of their own: read a page, encode it as Debezium events, produce it.

Reading and encoding a chunk is Python work for every row, and so is deciding
the row in the data plane; in one process both would share one interpreter
lock. The coordinator therefore hands each chunk to a child process, which
works on another core while the data plane decides the previous chunk's rows.

:class:`ChunkWorkers` keeps ``snapshot.readers`` such processes, each with its
own connection, so several parts of a table are read at once.

A chunk's rows go to its backfill topic a few to a record, framed per partition
(:mod:`processor.events.chunk_records`): each row to the partition that the change
topic's partitioner (``source.partitioner``) gives its key.

Guarantee: a chunk is reported finished only once Kafka has acknowledged
every row of it, so the coordinator may then record the chunk as done. The
children exit when their parent does (they watch its pid), so a killed
processor leaves no reader behind. They run at a lower CPU priority than the
processor: where cores are short, the data plane's work comes first.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from processor.errors import ChunkError, SourceUnavailableError, TableChangedError
from processor.events.chunk_records import records, rows_header
from processor.events.chunk_tag import ChunkTag
from processor.events.visibility import PgSnapshot, Window
from processor.snapshot.chunk_events import TableShape
from processor.snapshot.chunk_reader import ChunkReader, Key, TableInfo
from processor.snapshot.connect_values import Column
from processor.snapshot.connector import Connector
from processor.snapshot.watermarks import SignalTableWatermarks
from processor.tuning import keep_freed_memory, tune_garbage_collector
from tidemark.core.config import Config
from tidemark.core.errors import DeliveryError, RecordTooLargeError, TidemarkError, TopicError
from tidemark.core.failpoints import Failpoint
from tidemark.core.kafka import (
    FAILURES_ONLY,
    Acknowledgements,
    consumer_config,
    partition_count,
    produce_waiting,
    producer_config,
)
from tidemark.core.partitioners import partitions_of
from tidemark.core.record_auth import record_keys
from tidemark.core.schema_registry import configured_schemas
from tidemark.core.topics import backfilled_topic, reader_group

log = logging.getLogger(__name__)

#: How much lower than the processor's the readers' CPU priority is (``nice``).
READER_NICENESS = 10
#: The chunk reader's producer: batches of a chunk's records, compressed (the broker's
#: CPU per row grows with the bytes it is sent), failures reported alone, and no topic
#: created by a write or a metadata request: a backfill topic missing here would be
#: made with the broker's default partition count, not its change topic's.
PRODUCER_SETTINGS: dict[str, Any] = {
    "linger.ms": 20,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "allow.auto.create.topics": False,
    **FAILURES_ONLY,
}
#: Jobs handed to a reader at once: the one it reads and the next, so that it never
#: waits for the coordinator (a thread that shares the interpreter with the data plane).
JOBS_PER_READER = 2


@dataclass(frozen=True)
class ChunkJob:
    """One part of a table to read (every key in ``(after, upto]``) and where its rows go."""

    info: TableInfo
    #: Key and value of one of Debezium's events of the table: the layout to reproduce.
    event: tuple[bytes, bytes]
    backfill: str
    after: Key | None
    upto: Key
    condition: str | None
    chunk: int
    request: str
    #: ``read-only`` or ``signal-table`` (:mod:`processor.snapshot.postgres.watermarks`).
    watermarks: str = "read-only"


@dataclass(frozen=True)
class ChunkDone:
    """A page whose rows Kafka has acknowledged."""

    rows: int
    #: Reading and producing the rows (a signal-table window's wait not included).
    seconds: float


class ChunkWorkers:
    """``count`` reader processes, each with up to :data:`JOBS_PER_READER` jobs handed to it;
    collect what they finished."""

    def __init__(self, config: Config, connector: Connector, count: int) -> None:
        self._workers = [ChunkWorker(config, connector) for _ in range(count)]

    @property
    def count(self) -> int:
        """Reader processes."""
        return len(self._workers)

    def free(self) -> bool:
        """Whether a reader has room for another job."""
        return any(len(w.jobs) < JOBS_PER_READER for w in self._workers)

    def busy(self) -> int:
        """Jobs being read or waiting for their reader."""
        return sum(len(w.jobs) for w in self._workers)

    def submit(self, job: ChunkJob) -> None:
        """Give ``job`` to the least loaded reader (:meth:`free` must be true)."""
        worker = min(self._workers, key=lambda w: len(w.jobs))
        worker.submit(job)

    def finished(self, timeout: float) -> list[tuple[ChunkJob, ChunkDone | ChunkError]]:
        """The jobs that finished within ``timeout`` seconds, with their result or error."""
        lost = [r for w in self._workers if w.jobs and w.connection is None for r in w.lost()]
        busy = {w.connection: w for w in self._workers if w.connection and w.jobs}
        if lost or not busy:
            return lost
        ready = multiprocessing.connection.wait(list(busy), timeout)
        return [busy[conn].result() for conn in ready if isinstance(conn, Connection)]

    def close(self) -> None:
        for worker in self._workers:
            worker.close()


class ChunkWorker:
    """The parent's handle on one reader process (started on first use, again if it dies).

    The process reads its jobs in the order they were sent and answers each in that
    order, so a second job waits in the pipe while the first is read: the reader
    starts it the moment the first is done, without waiting for the coordinator.
    """

    def __init__(self, config: Config, connector: Connector) -> None:
        self._config = config
        self._connector = connector
        self._context = multiprocessing.get_context("spawn")
        self._process: Any = None
        self.connection: Connection | None = None
        #: The jobs sent and not answered yet, oldest first.
        self.jobs: deque[ChunkJob] = deque()

    def submit(self, job: ChunkJob) -> None:
        """Queue ``job``; its result comes from :meth:`result`."""
        conn = self._started()
        self.jobs.append(job)
        try:
            conn.send(job)
        except (OSError, BrokenPipeError):
            self.close()  # lost() reports the failure

    def result(self) -> tuple[ChunkJob, ChunkDone | ChunkError]:
        """The oldest job and its result (or why it failed)."""
        job = self.jobs.popleft()
        if self.connection is None:
            return job, _lost()
        try:
            status, result = self.connection.recv()
        except (EOFError, OSError):
            self.close()
            return job, _lost()
        if status == "unavailable":
            return job, SourceUnavailableError(str(result))
        if status == "changed":
            return job, TableChangedError(str(result))
        if status != "ok":
            return job, ChunkError(str(result))
        assert isinstance(result, ChunkDone)
        return job, result

    def lost(self) -> list[tuple[ChunkJob, ChunkDone | ChunkError]]:
        """Every job of a reader process that ended, as failed (each is read again)."""
        jobs, self.jobs = list(self.jobs), deque()
        return [(job, _lost()) for job in jobs]

    def close(self) -> None:
        """Stop the reader process."""
        if self.connection is not None:
            try:
                self.connection.send(None)
            except OSError:
                pass
            self.connection.close()
            self.connection = None
        if self._process is not None:
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(5)
            self._process = None

    def _started(self) -> Connection:
        if self.connection is None:
            mine, theirs = self._context.Pipe()
            self._process = self._context.Process(
                target=_serve,
                args=(theirs, self._config, self._connector),
                name="tidemark-chunks",
                daemon=True,
            )
            self._process.start()
            theirs.close()
            self.connection = mine
        return self.connection


def _lost() -> SourceUnavailableError:
    return SourceUnavailableError("the chunk reader process ended; it is started again")


def _serve(conn: Connection, config: Config, connector: Connector) -> None:
    """The reader process: jobs in, results out, until told to stop or orphaned."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    parent = os.getppid()
    # A backfill is background work: where cores are short, the data plane deciding the
    # live changes (and the chunk rows already read) runs first.
    os.nice(READER_NICENESS)
    tune_garbage_collector()  # a chunk's rows are many short-lived objects
    keep_freed_memory()  # and many MB, chunk after chunk
    reader = _Reader(config, connector)
    try:
        while True:
            if not conn.poll(1.0):
                if os.getppid() != parent:
                    return
                continue
            try:
                job = conn.recv()
            except EOFError:
                return
            if job is None:
                return
            try:
                conn.send(("ok", reader.read(job)))
            except RecordTooLargeError as exc:  # a row: no retry mends it
                reader.reset()
                conn.send(("error", f"{exc}: raise it, and the brokers' limit, to read the table"))
            except (SourceUnavailableError, DeliveryError, TopicError, KafkaException) as exc:
                reader.reset()
                conn.send(("unavailable", str(exc)))
            except TableChangedError as exc:
                conn.send(("changed", str(exc)))
            except TidemarkError as exc:  # the table's fault: its query, a value
                reader.reset()
                conn.send(("error", str(exc)))
    finally:
        reader.close()


class _Reader:
    """What the reader process keeps between jobs: a connection, a producer, table layouts."""

    def __init__(self, config: Config, connector: Connector) -> None:
        self._config = config
        self._connector = connector
        self._schemas = configured_schemas(config.kafka)
        self._producer = Producer(producer_config(config.kafka, **PRODUCER_SETTINGS))
        self._acks = Acknowledgements(self._producer)
        self._source: ChunkReader | None = None
        self._watermarks: SignalTableWatermarks | None = None
        self._probe: Consumer | None = None
        #: A crash of the processor while a window is open (DDD-3's first crash case).
        self._window_open = Failpoint("window-open", victim=os.getppid())
        self._layouts: dict[tuple[TableInfo, tuple[bytes, bytes]], _Layout] = {}
        self._record_keys = record_keys()

    def read(self, job: ChunkJob) -> ChunkDone:
        layout = self._layout(job)
        if self._source is None:
            self._source = self._connector.chunk_reader()
        marks = self._signal_table() if job.watermarks == "signal-table" else None
        window = marks.open(job.chunk) if marks is not None else None
        if window is not None:
            self._window_open.passed()
        chunk = self._source.read_chunk(job.info, job.after, job.upto, job.condition, layout.casts)
        read_in: PgSnapshot | Window = chunk.snapshot
        if marks is not None and window is not None:
            change_topic = backfilled_topic(self._config.processor.pipeline, job.backfill)
            assert change_topic is not None
            read_in = marks.close(window, job.chunk, change_topic, chunk.snapshot)
        started = time.perf_counter()
        headers = ChunkTag(job.chunk, read_in, job.request).headers()
        producer, topic, on_delivery = self._producer, job.backfill, self._acks.on_delivery
        rows = layout.shape.encode_chunk(chunk.rows, layout.columns)
        # the change topic's partitioner (Kafka's murmur2 unless source.partitioner says
        # otherwise): a chunk row goes to the partition of its key's changes
        count = partition_count(producer, topic)
        partitions = partitions_of(self._config.source.partitioner, [k for k, _ in rows], count)
        keys = self._record_keys
        for partition, framed, value in records(rows, partitions):
            with_count = [*headers, rows_header(framed)]
            if keys is not None:
                with_count.append(keys.sign(topic, partition, None, value, with_count))
            produce_waiting(producer, topic, value, None, on_delivery, partition, with_count)
        self._acks.wait("chunk's rows")
        seconds = chunk.seconds + time.perf_counter() - started
        return ChunkDone(len(chunk.rows), seconds)

    def reset(self) -> None:
        """After a failure: connect again for the next job."""
        if self._source is not None:
            self._source.close()
            self._source = None
        if self._watermarks is not None:
            self._watermarks.close_connection()
            self._watermarks = None

    def close(self) -> None:
        self.reset()
        if self._probe is not None:
            self._probe.close()
        self._producer.flush(10)

    def _signal_table(self) -> SignalTableWatermarks:
        if self._probe is None:
            group = reader_group(self._config.processor.pipeline, "snapshots-watermarks")
            self._probe = Consumer(
                consumer_config(self._config.kafka, group, **{"enable.partition.eof": False})
            )
        if self._watermarks is None:
            self._watermarks = SignalTableWatermarks(
                self._config, self._connector.watermark_writer(), self._probe, self._schemas
            )
        return self._watermarks

    def _layout(self, job: ChunkJob) -> _Layout:
        found = self._layouts.get((job.info, job.event))
        if found is None:
            columns = self._connector.columns(job.info)
            shape = TableShape.learn(job.event[0], job.event[1], self._schemas)
            found = _Layout(columns, {c.name: c.cast for c in columns if c.cast}, shape)
            if len(self._layouts) > 16:
                self._layouts.clear()
            self._layouts[(job.info, job.event)] = found
        return found


@dataclass(frozen=True)
class _Layout:
    columns: list[Column]
    casts: dict[str, str]
    shape: TableShape
