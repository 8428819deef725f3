"""Start the snapshot progress over, or sign it: the repairs of a refused progress record.

A leader whose progress record is unreadable (or unsigned where a record key is set)
refuses to coordinate (:mod:`processor.snapshot.progress_record`). ``tidemark snapshot
reset-progress`` writes a new record in its place: no table queued, the signal channels
read up to where they end now (signals written before it are not carried out again),
and a chunk number above every chunk row the backfill topics hold, so the rows of later
backfills still beat earlier ones. It writes under the coordinator's transactional id,
which fences a leader still at work; the leader joins again and reads the new record.
The backfills that were queued or running are forgotten: ask for them again.

``tidemark snapshot sign-progress`` is the repair where the record is whole but not
signed, as after the record key is turned on: it reads the record, checks it, and
writes it again, signed, under the same transactional id. Nothing is forgotten.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from processor.events.chunk_tag import CHUNK_HEADER
from processor.snapshot.progress import PROGRESS_KEY, SnapshotState
from processor.snapshot.progress_record import ProgressRecordError, read_progress
from tidemark.core.config import Config
from tidemark.core.kafka import (
    TRANSACTION_TIMEOUT,
    client_config,
    exact_end_offsets,
    headers_of,
    partition_counts,
    producer_config,
    read_range,
    reader_config,
)
from tidemark.core.record_auth import KEY_ENV, record_keys
from tidemark.core.topics import (
    backfill_prefix,
    change_topic,
    coordinator_transactional_id,
    progress_topic,
    reader_group,
    signal_topic,
)

#: The records read at the end of each backfill partition for its newest chunk number.
_TAIL = 20


def reset_progress(config: Config) -> SnapshotState:
    """Write a new, empty progress record for ``config``'s pipeline; the state written."""
    pipeline = config.processor.pipeline
    producer = _fencing_producer(config)  # first: no leader acts on what is read next
    admin = AdminClient(client_config(config.kafka))
    consumer = Consumer(reader_config(config.kafka, reader_group(pipeline, "reset-progress")))
    try:
        state = SnapshotState()
        table_topic = change_topic(config.source.topic_prefix, config.snapshot.signal_table)
        for topic in (signal_topic(pipeline), table_topic):
            state.signal_offsets[topic] = _ends(consumer, admin, topic)
        # Chunk numbers only grow: above every chunk row still kept, and above the time
        # in microseconds, which no count of chunks since an earlier reset reaches.
        state.chunk_sequence = max(_newest_chunk(consumer, admin, pipeline), time.time_ns() // 1000)
    finally:
        consumer.close()
    _write(config, producer, state)
    return state


def sign_progress(config: Config) -> SnapshotState:
    """Write the pipeline's progress record again, signed with the record key (after the
    key was turned on, its unsigned record is refused): the state, checked whole first."""
    if record_keys() is None:
        raise ProgressRecordError(f"{KEY_ENV} is not set: there is no key to sign with")
    pipeline = config.processor.pipeline
    producer = _fencing_producer(config)
    consumer = Consumer(reader_config(config.kafka, reader_group(pipeline, "sign-progress")))
    try:
        state = read_progress(consumer, progress_topic(pipeline), None)
    finally:
        consumer.close()
    if state is None:
        raise ProgressRecordError("the pipeline has no progress record: nothing to sign")
    _write(config, producer, state)
    return state


def _fencing_producer(config: Config) -> Producer:
    """A producer under the coordinator's transactional id: a leader still at work is
    fenced (it writes nothing more, steps down, and reads the record written next)."""
    pipeline = config.processor.pipeline
    producer = Producer(
        producer_config(
            config.kafka, **{"transactional.id": coordinator_transactional_id(pipeline)}
        )
    )
    producer.init_transactions(TRANSACTION_TIMEOUT)
    return producer


def _write(config: Config, producer: Producer, state: SnapshotState) -> None:
    """Write ``state`` as the progress record, signed where a record key is set."""
    producer.begin_transaction()
    value, topic = state.to_json(), progress_topic(config.processor.pipeline)
    keys = record_keys()
    headers = None if keys is None else [keys.sign(topic, 0, PROGRESS_KEY, value)]
    producer.produce(topic, value, PROGRESS_KEY, 0, headers=headers)
    producer.commit_transaction(TRANSACTION_TIMEOUT)


def _ends(consumer: Consumer, admin: AdminClient, topic: str) -> dict[int, int]:
    counts = partition_counts(admin, [topic])
    if topic not in counts:
        return {}
    tps = [TopicPartition(topic, p) for p in range(counts[topic])]
    return {p: end for (_t, p), end in exact_end_offsets(consumer, tps).items()}


def _newest_chunk(consumer: Consumer, admin: AdminClient, pipeline: str) -> int:
    """The largest chunk number in the last records of the pipeline's backfill topics."""
    keys = record_keys()  # where records are signed, a forged row's number is not counted
    prefix = backfill_prefix(pipeline)
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    newest = 0
    for topic in topics:
        for partition, end in _ends(consumer, admin, topic).items():
            low = max(consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[0], 0)
            for msg in read_range(consumer, topic, partition, max(low, end - _TAIL), end):
                if keys is not None and not keys.verify(
                    topic, partition, msg.key(), msg.value(), headers_of(msg)
                ):
                    continue
                header = dict(headers_of(msg) or ()).get(CHUNK_HEADER)
                if isinstance(header, bytes) and header.isdigit() and len(header) < 19:
                    newest = max(newest, int(header))
    return newest
