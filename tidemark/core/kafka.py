"""Kafka client settings and topic administration shared by every component.

Group timeouts are short on purpose: a consumer-group join waits for the
rebalance timeout, and librdkafka's default (300 s) makes the first assignment
take minutes. Topics are always created explicitly, because a producer that
writes to a missing topic makes the broker create it with its own defaults.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from tidemark.core.config import KafkaConfig
from tidemark.core.errors import DeliveryError, RecordTooLargeError, TopicError

#: For a producer whose records need no offset back: its delivery callbacks run for
#: failures only. confluent-kafka then skips building a message object and calling
#: Python for each acknowledged record (about 1.8 CPU-µs per record here), and still
#: frees each record's callback state.
FAILURES_ONLY: dict[str, Any] = {"delivery.report.only.error": True}

log = logging.getLogger(__name__)


Rebalance = Callable[[Consumer, list[TopicPartition]], None]


class RebalanceErrors:
    """The error of a consumer's rebalance callbacks, raised again after the call that ran
    them.

    confluent-kafka (2.16) hands an error raised by one of its own calls inside a
    rebalance callback back from ``consume()`` as a ``KafkaError`` object, which is no
    exception class: no ``except`` clause but a bare one catches it, so a loop's error
    handling is skipped and its thread dies. A callback wrapped by :meth:`wrap` keeps its
    error instead; :meth:`raise_pending`, called after each ``consume()``, raises it as it
    was raised (a ``KafkaException`` for Kafka's), which the loops ride out.
    """

    def __init__(self) -> None:
        self.pending: BaseException | None = None
        #: Callbacks run so far: a change says that a call ran one.
        self.calls = 0

    def wrap(self, callback: Rebalance) -> Rebalance:
        def guarded(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.calls += 1
            try:
                callback(consumer, partitions)
            except BaseException as exc:  # noqa: BLE001 - raised again by raise_pending
                if self.pending is None:
                    self.pending = exc

        return guarded

    def raise_pending(self) -> None:
        """Raise the first error a callback met since the last call, if any."""
        error, self.pending = self.pending, None
        if error is not None:
            raise error

    def clear(self) -> None:
        """Forget an error (the consumer that met it is being closed anyway)."""
        self.pending = None


class Acknowledgements:
    """The delivery failures of one producer's records, and the wait until all are settled.

    Pass :meth:`on_delivery` with each record (bind it once on a hot path); then
    :meth:`wait` returns only when Kafka acknowledged every record since the last wait.
    The producer may report :data:`FAILURES_ONLY`: a failure still reaches the callback.
    """

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.failures: list[KafkaError] = []

    def on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failures.append(err)

    def wait(self, what: str, timeout: float = 60.0) -> None:
        """Flush; :class:`DeliveryError` naming ``what`` if a record failed or is pending."""
        remaining = self.producer.flush(timeout)
        failures, self.failures = self.failures, []
        if remaining or failures:
            too_large = any(f.code() == KafkaError.MSG_SIZE_TOO_LARGE for f in failures)
            raise (RecordTooLargeError if too_large else DeliveryError)(
                f"Kafka did not acknowledge the {what}: "
                + (failures[0].str() if failures else f"{remaining} pending")
            )


def produce_waiting(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    on_delivery: Callable[[KafkaError | None, Message], None],
    partition: int = -1,
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> None:
    """Produce one record, serving delivery reports while the producer's queue is full
    (``partition`` -1: the producer's partitioner chooses)."""
    while True:
        try:
            producer.produce(topic, value, key, partition, on_delivery=on_delivery, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            size = len(value or b"") + len(key or b"")
            raise RecordTooLargeError(
                f"a record of {size} bytes for {topic} is larger than the producer takes "
                "(kafka.max_record_bytes)"
            ) from None


def partition_count(client: Producer, topic: str) -> int:
    """How many partitions ``topic`` has now; :class:`TopicError` while it has none (a
    writer that places records itself then tries again later, as when Kafka is down)."""
    found = client.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        reason = "it does not exist" if found is None else found.error or "no partitions"
        raise TopicError(f"cannot write topic {topic}: {reason}")
    return len(found.partitions)


def client_config(kafka: KafkaConfig, **extra: Any) -> dict[str, Any]:
    """librdkafka settings for any client of ``kafka``."""
    conf: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers}
    conf.update(kafka.client_properties)
    conf.update(extra)
    return conf


#: Seconds to wait for a transaction coordinator (init, commit, abort).
TRANSACTION_TIMEOUT = 60.0

#: Room for a record's framing (headers, batch overhead) above ``kafka.max_record_bytes``.
RECORD_FRAMING = 64 * 1024


def producer_config(kafka: KafkaConfig, **extra: Any) -> dict[str, Any]:
    """Settings for a producer of ``kafka``: idempotent, every write acknowledged by all
    replicas, records up to ``max_record_bytes``. It never makes a topic: Tidemark makes
    each of its topics with its settings first, and a producer that still knows a topic
    deleted since (a table removed) would make it again at its next metadata refresh on
    a broker that creates topics on demand."""
    settings = {
        "allow.auto.create.topics": False,
        "enable.idempotence": True,
        "acks": "all",
        "message.max.bytes": kafka.max_record_bytes + RECORD_FRAMING,
    }
    return client_config(kafka, **{**settings, **extra})


def record_topic_config(kafka: KafkaConfig, **extra: str) -> dict[str, str]:
    """The configuration of a topic Tidemark creates for records up to ``max_record_bytes``."""
    return {"max.message.bytes": str(kafka.max_record_bytes + RECORD_FRAMING), **extra}


def output_topic_config(kafka: KafkaConfig) -> dict[str, str]:
    """The configuration of a reconciled topic: compacted, with how long compaction keeps
    a delete's tombstone and spares a new record set explicitly (a broker's defaults, 24 h
    and 0, would leave the sink a day to see a delete)."""
    return record_topic_config(
        kafka,
        **{
            "cleanup.policy": "compact",
            "delete.retention.ms": str(kafka.output_delete_retention_ms),
            "min.compaction.lag.ms": str(kafka.output_min_compaction_lag_ms),
        },
    )


def queue_topic_config(kafka: KafkaConfig) -> dict[str, str]:
    """The configuration of a topic whose records wait to be read once (backfill rows,
    snapshot signals): a retention of its own, and no size limit, set explicitly (a
    cluster's ``retention.bytes`` would otherwise drop rows a stopped pipeline has not
    read)."""
    return record_topic_config(
        kafka, **{"retention.ms": str(kafka.queue_retention_ms), "retention.bytes": "-1"}
    )


def dead_letter_topic_config(kafka: KafkaConfig) -> dict[str, str]:
    """The configuration of the dead-letter topic: its retention set explicitly (whole
    input rows, which can be personal data, kept for ``kafka.dead_letter_retention_ms``)."""
    return record_topic_config(kafka, **{"retention.ms": str(kafka.dead_letter_retention_ms)})


#: How long a consumer whose prefetch queue is full waits before fetching again. A
#: broker may answer one fetch with a whole partition (the development broker does), and
#: librdkafka's default (1 s) then left consumers idle with a backlog waiting: a backfill's
#: data plane spent about 40 % of its time in ``consume`` (tests/integration/test_kafka_fetch.py).
FETCH_QUEUE_BACKOFF = {"fetch.queue.backoff.ms": 20}


def consumer_config(kafka: KafkaConfig, group: str, **extra: Any) -> dict[str, Any]:
    """Settings for a consumer in ``group`` that commits offsets itself."""
    return client_config(
        kafka,
        **{
            **FETCH_QUEUE_BACKOFF,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": kafka.session_timeout_ms,
            "max.poll.interval.ms": kafka.max_poll_interval_ms,
            "heartbeat.interval.ms": kafka.heartbeat_interval_ms,
            "topic.metadata.refresh.interval.ms": 5000,
            **extra,
        },
    )


def reader_config(kafka: KafkaConfig, group: str, **extra: Any) -> dict[str, Any]:
    """Settings for a consumer that reads known ranges on demand and goes (an API's read):
    the broker answers its fetches at once. With the default long poll (500 ms), the fetch
    left waiting at a partition's end held back the next range's first fetch for as long:
    each read of a topic took half a second more."""
    return consumer_config(kafka, group, **{"fetch.wait.max.ms": 10, **extra})


def ensure_topics(
    admin: AdminClient,
    partitions: Mapping[str, int],
    replication: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create the missing topics among ``partitions`` (name to partition count) and wait;
    the settings ``config`` names are set on those that exist too (:func:`align_configs`)."""
    existing = admin.list_topics(timeout=10).topics
    missing = [name for name in partitions if name not in existing]
    if config:
        align_configs(admin, [name for name in partitions if name in existing], config, timeout)
    if not missing:
        return
    futures = admin.create_topics(
        [
            NewTopic(name, partitions[name], replication, config=dict(config or {}))
            for name in missing
        ],
        request_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicError(f"cannot create topic {name}: {exc.args[0].str()}") from None
    _wait_visible(admin, missing, timeout)


def align_configs(
    admin: AdminClient, topics: list[str], config: Mapping[str, str], timeout: float = 30.0
) -> None:
    """Set, on each of ``topics``, the settings of ``config`` it does not have: a topic
    made by an earlier release, or auto-created by a producer or a broker before Tidemark
    made it, would otherwise keep the broker's defaults (1 MiB records on Apache Kafka).
    Settings it cannot change are logged, not raised: the topic still works for records
    within what it takes."""
    if not topics:
        return
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics]
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            current = future.result()
            differ = {
                key: value
                for key, value in config.items()
                if key not in current or current[key].value != value
            }
            if not differ:
                continue
            entries = [
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in differ.items()
            ]
            target = ConfigResource(
                ConfigResource.Type.TOPIC, resource.name, incremental_configs=entries
            )
            admin.incremental_alter_configs([target], request_timeout=timeout)[target].result()
            log.info("topic %s: set %s", resource.name, differ)
        except KafkaException as exc:
            log.warning(
                "topic %s keeps its settings, not %s: %s",
                resource.name,
                dict(config),
                exc.args[0].str(),
            )


def partition_counts(admin: AdminClient, topics: Iterable[str]) -> dict[str, int]:
    """Number of partitions of each existing topic among ``topics``."""
    return counts_in(admin.list_topics(timeout=10).topics, topics)


def counts_in(meta: Mapping[str, Any], topics: Iterable[str]) -> dict[str, int]:
    """Number of partitions of each of ``topics`` listed without error in ``meta`` (the
    ``topics`` of a ``list_topics`` answer)."""
    return {t: len(meta[t].partitions) for t in topics if t in meta and meta[t].error is None}


#: The id a broker without topic ids (before KIP-516) gives every topic.
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def topic_ids(admin: AdminClient, topics: Iterable[str]) -> dict[str, str | None]:
    """Each of ``topics``' id, asked in one request: a topic deleted and made again under
    its name gets another. ``None`` for a topic the broker says it does not have; a topic
    it gives no id, or answers for with another error, is left out."""
    names = sorted(set(topics))
    if not names:
        return {}
    found: dict[str, str | None] = {}
    for name, future in admin.describe_topics(TopicCollection(names)).items():
        try:
            topic_id = str(future.result().topic_id)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                found[name] = None
            continue
        if topic_id and topic_id != _NO_TOPIC_ID:
            found[name] = topic_id
    return found


def absent_topics(admin: AdminClient, topics: Iterable[str]) -> set[str]:
    """Those of ``topics`` the broker says it does not have (:func:`topic_ids`)."""
    return {name for name, topic_id in topic_ids(admin, topics).items() if topic_id is None}


def _wait_visible(admin: AdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=10).topics
        if all(n in topics and topics[n].partitions for n in names):
            return
        time.sleep(0.1)
    raise TopicError(f"topics {names} did not appear within {timeout:.0f} s")


def data_messages(messages: Iterable[Message]) -> Iterator[Message]:
    """The messages that carry records: end-of-partition events skipped, other errors raised."""
    for msg in messages:
        err = msg.error()
        if err is None:
            yield msg
        elif err.code() != KafkaError._PARTITION_EOF:
            raise KafkaException(err)


#: How long a read of a known range waits for more records in one call.
_POLL_S = 0.02
#: The longest :func:`exact_end_offsets` reads on past the reported end.
_DRAIN_S = 0.5


def watermarks(
    admin: AdminClient,
    partitions: list[TopicPartition],
    committed: bool = True,
    timeout: float = 10.0,
) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's low and high watermark (``committed``: the high one a
    ``read_committed`` consumer sees), in two requests for all of them: a consumer's
    ``get_watermark_offsets`` asks once a partition, and an instance holding 1,500
    partitions waited seconds for them on a busy broker."""
    if not partitions:
        return {}
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    found: dict[str, dict[tuple[str, int], int]] = {}
    for name, spec in (("low", OffsetSpec.earliest()), ("high", OffsetSpec.latest())):
        asked = {TopicPartition(tp.topic, tp.partition): spec for tp in partitions}
        futures = admin.list_offsets(asked, isolation_level=level, request_timeout=timeout)
        found[name] = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
    return {tp: (found["low"][tp], high) for tp, high in found["high"].items()}


def exact_end_offsets(
    consumer: Consumer,
    partitions: list[TopicPartition],
    timeout: float = 10.0,
    marks: Mapping[tuple[str, int], tuple[int, int]] | None = None,
) -> dict[tuple[str, int], int]:
    """The offset after the last readable message of each partition.

    The embedded broker (Tansu 0.6) reports a high watermark of the last record
    batch's base offset + 1, not the end; the records after it are readable. So
    each non-empty partition is read from one before the reported watermark: that
    message exists, and the fetch that brings it brings the rest of its batch.
    On Apache Kafka this returns the high watermark. Where transactions wrote, the
    last offset may hold a commit marker, which no reader is given: the consumer's
    position, past it, says where the partition ends. ``consumer`` is reassigned:
    give it a consumer of its own. ``marks``: the partitions' :func:`watermarks` for
    ``consumer``'s isolation level, when known.
    """
    ends: dict[tuple[str, int], int] = {}
    starts = []
    for tp in partitions:
        if marks is None:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
        else:
            low, high = marks[(tp.topic, tp.partition)]
        ends[(tp.topic, tp.partition)] = high
        if high > max(low, 0):
            starts.append(TopicPartition(tp.topic, tp.partition, high - 1))
    if not starts:
        return ends
    waiting = {(tp.topic, tp.partition) for tp in starts}
    consumer.assign(starts)

    def note(messages: list[Message]) -> None:
        for msg in data_messages(messages):
            key = (msg.topic() or "", msg.partition() or 0)
            ends[key] = max(ends[key], (msg.offset() or 0) + 1)
            waiting.discard(key)
        for tp in consumer.position(starts):  # past markers, too
            key = (tp.topic, tp.partition)
            if tp.offset > ends[key] - 1:
                ends[key] = max(ends[key], tp.offset)
                waiting.discard(key)

    try:
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            note(consumer.consume(1000, 0.1))
        # The rest of the fetched batches, for at most _DRAIN_S: a topic written all the
        # time (a snapshot's progress, the positions) would otherwise be followed for as
        # long as it is written, by a consumer that fetches without a long poll.
        drained = time.monotonic() + _DRAIN_S
        while time.monotonic() < drained and (messages := consumer.consume(10_000, 0.2)):
            note(messages)
    finally:
        consumer.unassign()
    return ends


def newest_records(
    consumer: Consumer, topic: str, partitions: int, most: int, timeout: float = 30.0
) -> list[Message]:
    """About the newest ``most`` records of each of ``topic``'s ``partitions``, in one
    pass over them all (assigns ``consumer``: give it a consumer of its own).

    A sample of a topic's latest records, not an exact range: each partition is read
    from ``most`` before its reported end up to the record at that end, with what the
    same fetch brought after it (on the embedded broker, the rest of the last record
    batch; see :func:`exact_end_offsets`), and its last ``most`` are kept. Unlike
    :func:`exact_end_offsets` followed by :func:`read_range` a partition at a time, it
    waits for no fetch beyond those, so a topic written all the time (a table's change
    topic) answers in one round of fetches.
    """
    reported: dict[int, int] = {}
    starts = []
    for partition in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if high > max(low, 0):
            reported[partition] = high
            starts.append(TopicPartition(topic, partition, max(low, high - most, 0)))
    if not starts:
        return []
    kept: dict[int, deque[Message]] = {p: deque(maxlen=most) for p in reported}
    waiting = set(reported)
    deadline = time.monotonic() + timeout
    consumer.assign(starts)
    try:
        while waiting:
            if time.monotonic() > deadline:
                raise TopicError(f"{topic}: partitions {sorted(waiting)} not read to their end")
            for msg in data_messages(consumer.consume(1000, _POLL_S)):
                partition, offset = msg.partition() or 0, msg.offset() or 0
                kept[partition].append(msg)
                if offset >= reported[partition] - 1:
                    waiting.discard(partition)
            for tp in consumer.position(starts):  # past transaction markers, too
                if tp.offset >= reported[tp.partition]:
                    waiting.discard(tp.partition)
        for msg in data_messages(consumer.consume(10_000, 0)):  # the rest of those fetches
            kept[msg.partition() or 0].append(msg)
    finally:
        consumer.unassign()
    return [msg for partition in sorted(kept) for msg in kept[partition]]


def headers_of(msg: Message) -> list[tuple[str, bytes | None]] | None:
    """``msg``'s headers; ``None`` if it has none, or none that can be read (confluent-kafka
    raises on a header name that is not UTF-8, and anyone who can write to a topic can
    write one)."""
    try:
        return msg.headers()  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - what the client raises for it is not documented
        return None


def last_value(consumer: Consumer, topic: str, key: bytes) -> bytes | None:
    """The value of the last record with ``key`` in partition 0 of ``topic`` (read to its end)."""
    found = last_message(consumer, topic, key)
    return None if found is None else found.value()


def last_message(consumer: Consumer, topic: str, key: bytes) -> Message | None:
    """The last record with ``key`` in partition 0 of ``topic`` (read to its end)."""
    tp = TopicPartition(topic, 0)
    end = exact_end_offsets(consumer, [tp])[(topic, 0)]
    found = None
    for msg in read_range(consumer, topic, 0, 0, end):
        if msg.key() == key:
            found = msg
    return found


def read_newest(
    consumer: Consumer, topic: str, most: int, timeout: float = 30.0
) -> tuple[Iterator[Message], bool]:
    """The newest ``most`` records of ``topic`` (shared evenly among its partitions),
    streamed a partition at a time, and whether they are every record it still keeps
    (assigns ``consumer``: give it a consumer of its own)."""
    listed = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if listed is None or listed.error is not None or not listed.partitions:
        return iter(()), True
    tps = [TopicPartition(topic, p) for p in sorted(listed.partitions)]
    ends = exact_end_offsets(consumer, tps)
    share = max(1, most // len(tps))
    ranges = []
    for tp in tps:
        low = max(consumer.get_watermark_offsets(tp, timeout=10)[0], 0)
        end = ends[(topic, tp.partition)]
        ranges.append((tp.partition, max(low, end - share), end, low))

    def records() -> Iterator[Message]:
        for partition, start, end, _low in ranges:
            yield from read_range(consumer, topic, partition, start, end, timeout)

    return records(), all(start == low for _p, start, _end, low in ranges)


def newest_by_key(
    kafka: KafkaConfig, group: str, topic: str, most: int
) -> dict[bytes, bytes | None]:
    """The last value of each key among the newest ``most`` records of ``topic`` (``None``:
    a tombstone; records without a key are skipped): a compacted topic of statuses, read
    by a consumer of ``group`` of its own."""
    consumer = Consumer(reader_config(kafka, group))
    last: dict[bytes, bytes | None] = {}
    try:
        records, _complete = read_newest(consumer, topic, most)
        for msg in records:
            key = msg.key()
            if key is not None:
                last[key] = msg.value()
    finally:
        consumer.close()
    return last


def ends_past_stable(
    consumer: Consumer,
    stable: dict[tuple[str, int], int],
    marks: Mapping[tuple[str, int], tuple[int, int]] | None = None,
) -> dict[tuple[str, int], int]:
    """The ends of the partitions whose records go past their ``stable`` end (a
    ``read_committed`` reader's, from :func:`exact_end_offsets`): a transaction still
    open, or one the embedded broker never closes. ``consumer`` reads
    ``read_uncommitted`` and is reassigned; the other partitions are left out.
    ``marks``: the partitions' ``read_uncommitted`` :func:`watermarks`, when known."""

    def high(topic: str, partition: int) -> int:
        if marks is not None:
            return marks[(topic, partition)][1]
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])

    above = [TopicPartition(t, p) for (t, p), end in stable.items() if high(t, p) > end]
    if not above:
        return {}
    found = exact_end_offsets(consumer, above, marks=marks)
    return {tp: end for tp, end in found.items() if end > stable[tp]}


def read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, timeout: float = 30.0
) -> Iterator[Message]:
    """The records of ``topic[partition]`` from ``start`` to ``end``, streamed (assigns
    ``consumer`` until the last is read); :class:`TopicError` when no record comes for
    ``timeout`` seconds (a stall: a long range that keeps coming is read whole)."""
    if start >= end:
        return
    assigned = [TopicPartition(topic, partition, start)]
    consumer.assign(assigned)
    deadline = time.monotonic() + timeout
    position = start
    try:
        while position < end:
            if time.monotonic() > deadline:
                raise TopicError(f"{topic}[{partition}] stopped at {position} of {end}")
            before = position
            # as many as are left: the call returns once they are here, not at its timeout
            for msg in data_messages(consumer.consume(min(1000, end - position), _POLL_S)):
                position = (msg.offset() or 0) + 1
                if position <= end:
                    yield msg
            # The consumer's position passes transaction markers, which are no messages.
            position = max(position, consumer.position(assigned)[0].offset)
            if position > before:
                deadline = time.monotonic() + timeout
    finally:
        consumer.unassign()
