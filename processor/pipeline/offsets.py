"""Reading and writing a pipeline's offsets (DDD-4), with its safety rules.

The document (:mod:`processor.pipeline.offsets_schema`) lists, per partition of the
pipeline's input and backfill topics, the data plane's committed offset and
the source position last applied, with the lifecycle and the incremental
snapshot in progress. Everything here runs against Kafka alone, so the API and
the CLI behave the same whether or not a processor runs.

Rules:

- Reading is always allowed.
- A write (set, reset, delete) is refused with :class:`PipelineActiveError` (HTTP
  409) while the data plane's consumer group has members, that is while any
  instance is RUNNING or PAUSED; a STOPPED instance has left the group.
- A write is applied whole or not at all: its plan is first recorded in the
  control topic (:mod:`processor.pipeline.control_topic`), which keeps every data plane out
  of the group, then applied (state, then offsets, then positions), then
  removed. Every step can run twice; a plan left behind by a writer that died
  is completed by the next writer or by a data plane (:func:`complete_write`).
- By default state is kept: a rewind's replay is deduplicated by the
  envelopes' rules. ``reset_state`` deletes the state of the partitions
  written (tombstones for every key of their changelog), so the replay
  rebuilds it and the output carries it again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from processor.errors import InvalidOffsetsError, PipelineActiveError
from processor.pipeline.control_topic import OFFSETS_WRITE, ControlView, read_control, write_control
from processor.pipeline.offsets_lease import Lease, abandoned, new_writer
from processor.pipeline.offsets_schema import VERSION, validate
from processor.snapshot.client import read_state
from processor.snapshot.progress_record import ProgressRecordError
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError
from tidemark.core.failpoints import Failpoint
from tidemark.core.kafka import (
    Acknowledgements,
    client_config,
    data_messages,
    ensure_topics,
    exact_end_offsets,
    produce_waiting,
    producer_config,
    read_range,
    reader_config,
    record_topic_config,
)
from tidemark.core.topics import (
    backfill_topic,
    backfilled_topic,
    changelog_topic,
    dataplane_group,
    positions_topic,
    reader_group,
)

#: Where ``reset`` can go.
RESET_TARGETS = ("beginning", "end", "timestamp")
#: Changelog keys ``--reset-state`` remembers as tombstoned, to skip their repeats.
RECENT_KEYS = 10_000

Partition = tuple[str, int]


class Offsets:
    """The offsets of one pipeline, read and written through Kafka."""

    def __init__(self, config: Config, admin: AdminClient | None = None) -> None:
        self.config = config
        self.pipeline = config.processor.pipeline
        self.group = dataplane_group(self.pipeline)
        self.admin = admin or AdminClient(client_config(config.kafka))

    # -- reading ---------------------------------------------------------------

    def partitions(self) -> dict[Partition, str]:
        """The partitions of the pipeline's input and backfill topics, with their kind."""
        listed = self.admin.list_topics(timeout=10).topics
        pattern = re.compile(self.config.input_pattern())
        found: dict[Partition, str] = {}
        for topic in sorted(t for t in listed if pattern.match(t)):
            for kind, name in (
                ("input", topic),
                ("backfill", backfill_topic(self.pipeline, topic)),
            ):
                if name in listed:
                    for partition in sorted(listed[name].partitions):
                        found[(name, partition)] = kind
        return found

    def members(self) -> bool:
        """Whether any instance is in the data plane's group (running or paused). Only a
        group that does not exist is taken for empty: any other error (a timeout, a
        coordinator still loading, a missing ACL) raises, so that no write goes ahead."""
        future = self.admin.describe_consumer_groups([self.group])[self.group]
        try:
            description = future.result()
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.GROUP_ID_NOT_FOUND:
                return False
            raise TidemarkError(
                f"cannot tell whether instances of pipeline {self.pipeline!r} run (consumer "
                f"group {self.group}): {error.str()}; nothing was written, try again"
            ) from None
        state = getattr(description.state, "name", str(description.state))
        # Only EMPTY and DEAD are known to be empty: a group being joined may show
        # UNKNOWN (the embedded broker) or a rebalance state, with no members listed yet.
        return bool(description.members) or state not in ("EMPTY", "DEAD")

    def committed(self, partitions: Iterable[Partition]) -> dict[Partition, int | None]:
        """The group's committed offset of each partition (``None``: none)."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        request = ConsumerGroupTopicPartitions(self.group, tps)
        result = self.admin.list_consumer_group_offsets([request])[self.group].result()
        return {
            (tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None
            for tp in result.topic_partitions
        }

    def positions(self) -> dict[Partition, dict[str, Any]]:
        """The last source position recorded per input partition."""
        topic = positions_topic(self.pipeline)
        if topic not in self.admin.list_topics(timeout=10).topics:
            return {}
        found: dict[Partition, dict[str, Any]] = {}
        for key, value in _read_all(self.config, topic, 0):
            if key is None:
                continue
            name, _, number = key.decode().rpartition("/")
            if value is None:
                found.pop((name, int(number)), None)
            else:
                found[(name, int(number))] = orjson.loads(value)
        return found

    def read(self, control: ControlView | None = None) -> dict[str, Any]:
        """The offsets document."""
        control = control or read_control(self.config)
        kinds = self.partitions()
        committed = self.committed(kinds)
        positions = self.positions()
        entries = []
        for (topic, partition), kind in kinds.items():
            entry: dict[str, Any] = {"topic": topic, "partition": partition, "kind": kind}
            entry["offset"] = committed.get((topic, partition))
            if kind == "input":
                entry["envelope"] = self.config.envelope_of(topic)
                entry["source_position"] = positions.get((topic, partition))
            entries.append(entry)
        return {
            "version": VERSION,
            "pipeline": self.pipeline,
            "group": self.group,
            "lifecycle": control.lifecycle.value,
            "members": self.members(),
            "partitions": entries,
            "incremental_snapshot": self._incremental_snapshot(),
        }

    def _incremental_snapshot(self) -> dict[str, Any] | None:
        """Debezium's incremental-snapshot offset fields, keys as JSON arrays (the reason,
        where the progress record is refused: the offsets are still read and written)."""
        try:
            state = read_state(self.config)
        except ProgressRecordError as exc:
            return {"refused": str(exc)}
        pending = state.pending() if state is not None else []
        if not pending:
            return None
        current = pending[0]
        return {
            "incremental_snapshot_collections": [
                {
                    "incremental_snapshot_collections_id": t.table,
                    "incremental_snapshot_collections_additional_condition": t.condition,
                    "incremental_snapshot_collection_surrogate_key": t.surrogate_key,
                }
                for t in pending
            ],
            "incremental_snapshot_primary_key": current.last_key,
            "incremental_snapshot_maximum_key": current.maximum_key,
        }

    # -- writing ---------------------------------------------------------------

    def write(self, body: Any, *, replace: bool, reset_state: bool = False) -> dict[str, Any]:
        """Set the offsets ``body`` lists (``replace``: ``body`` must list every committed one).

        Returns ``{"previous": ..., "current": ...}``: writing ``previous`` back undoes it.
        """
        document = validate(body)
        if document.get("pipeline", self.pipeline) != self.pipeline:
            raise InvalidOffsetsError(
                f"/pipeline: the document is for {document['pipeline']!r}, not {self.pipeline!r}"
            )
        kinds = self.partitions()
        committed = self.committed(kinds)
        listed: set[Partition] = set()
        wanted: dict[Partition, int] = {}
        unset: list[Partition] = []
        positions: dict[Partition, dict[str, Any] | None] = {}
        for index, entry in enumerate(document["partitions"]):
            tp = (entry["topic"], entry["partition"])
            if tp not in kinds:
                raise InvalidOffsetsError(
                    f"/partitions/{index}: {tp[0]}[{tp[1]}] is not a partition of an input or "
                    f"backfill topic of pipeline {self.pipeline!r}"
                )
            if tp in listed:
                raise InvalidOffsetsError(f"/partitions/{index}: {tp[0]}[{tp[1]}] is listed twice")
            listed.add(tp)
            offset = entry.get("offset")
            if offset is None:
                # Nothing committed means reading from the beginning (auto.offset.reset is
                # earliest): null is written as the first offset, so that a read's document
                # written back restores what it read.
                unset.append(tp)
            else:
                wanted[tp] = offset
            if kinds[tp] == "input":
                positions[tp] = entry.get("source_position")
        if unset:
            wanted.update(_resolve(self.config, unset, "beginning", None))
        if replace:
            missing = [tp for tp, o in committed.items() if o is not None and tp not in listed]
            if missing:
                t, p = missing[0]
                raise InvalidOffsetsError(
                    f"/partitions: {t}[{p}] is missing; PUT replaces every committed offset "
                    "(PATCH changes some)"
                )
        self._check_range(wanted)
        return self._apply(self._plan(wanted, positions, wanted if reset_state else ()))

    def reset(
        self,
        to: str,
        *,
        timestamp_ms: int | None = None,
        topics: list[str] | None = None,
        reset_state: bool = False,
    ) -> dict[str, Any]:
        """Move the offsets of ``topics`` (default: all of the pipeline's) to the beginning, the
        end, or the first record at or after ``timestamp_ms``."""
        if to not in RESET_TARGETS:
            raise InvalidOffsetsError(f"/to: {to!r} is not one of {', '.join(RESET_TARGETS)}")
        if (to == "timestamp") != (timestamp_ms is not None):
            raise InvalidOffsetsError("/timestamp: needed with to=timestamp, and only then")
        kinds = self.partitions()
        if topics:
            unknown = sorted(set(topics) - {t for t, _ in kinds})
            if unknown:
                raise InvalidOffsetsError(
                    f"/topics: {unknown[0]} is not an input or backfill topic of "
                    f"pipeline {self.pipeline!r}"
                )
            kinds = {tp: k for tp, k in kinds.items() if tp[0] in topics}
        if self.members():
            raise self._active()
        wanted = _resolve(self.config, list(kinds), to, timestamp_ms)
        plan = self._plan(wanted, _unknown_positions(kinds), wanted if reset_state else ())
        return self._apply(plan)

    def delete(self, *, reset_state: bool = False) -> dict[str, Any]:
        """Forget every committed offset (the group is deleted; a restart reads from the
        beginning, deduplicated against state unless ``reset_state``)."""
        kinds = self.partitions()
        states = kinds if reset_state else ()
        return self._apply(self._plan({}, _unknown_positions(kinds), states, delete_group=True))

    # -- the write protocol ------------------------------------------------------

    def _plan(
        self,
        wanted: dict[Partition, int],
        positions: dict[Partition, dict[str, Any] | None],
        reset_state_of: Iterable[Partition],
        *,
        delete_group: bool = False,
    ) -> dict[str, Any]:
        """The plan of a write: offsets to commit, positions to record, the state to delete
        (of the input partitions that ``reset_state_of``'s partitions belong to)."""
        states = sorted({self._state_partition(tp) for tp in reset_state_of})
        return {
            "group": self.group,
            "delete_group": delete_group,
            "offsets": [[t, p, o] for (t, p), o in sorted(wanted.items())],
            "positions": [[t, p, v] for (t, p), v in sorted(positions.items())],
            "reset_state": [[changelog_topic(self.pipeline, t), p] for t, p in states],
        }

    def _state_partition(self, tp: Partition) -> Partition:
        input_topic = backfilled_topic(self.pipeline, tp[0])
        return tp if input_topic is None else (input_topic, tp[1])

    def _apply(self, plan: dict[str, Any]) -> dict[str, Any]:
        control = read_control(self.config)
        left = control.offsets_write
        if left is not None:
            # A writer left its write: finish it (:mod:`.offsets_lease`), keeping its record
            # (which holds every data plane out) until this write's own plan replaces it.
            # One still renewed is another writer's, at work.
            taken = Lease(self.config, left, new_writer("offsets"))
            if not abandoned(self.config, left, int(time.time() * 1000)) or not taken.claim():
                raise self._in_progress()
            complete_write(self.config, taken.plan, release=False, lease=taken)
        if self.members():
            if left is not None:
                write_control(self.config, OFFSETS_WRITE, None, released=taken.writer)
            raise self._active()
        previous = self.read(control)
        lease = Lease(self.config, plan, new_writer("offsets"))
        lease.write()
        # An instance may have joined between the check and the plan; it leaves on seeing
        # the plan, but the write does not wait for that: it is refused.
        if self.members():
            write_control(self.config, OFFSETS_WRITE, None, released=lease.writer)
            raise self._active()
        complete_write(self.config, lease.plan, lease=lease)
        return {"previous": previous, "current": self.read()}

    def _in_progress(self) -> PipelineActiveError:
        """The refusal of a write while another writer's is being applied."""
        return PipelineActiveError(
            f"an offsets write of pipeline {self.pipeline!r} is being applied by another "
            "writer; try again once it is done"
        )

    def _active(self) -> PipelineActiveError:
        """The refusal of a write while instances are in the group."""
        return PipelineActiveError(
            f"pipeline {self.pipeline!r} has running or paused instances (consumer group "
            f"{self.group} has members): stop it first (tidemark pipeline stop, or "
            f"POST /api/v1/pipelines/{self.pipeline}/stop); offsets can be read at any time"
        )

    def _check_range(self, wanted: dict[Partition, int]) -> None:
        consumer = Consumer(
            reader_config(self.config.kafka, reader_group(self.pipeline, "offsets"))
        )
        try:
            lows, ends = _bounds(consumer, list(wanted))
        finally:
            consumer.close()
        for tp, offset in wanted.items():
            if not lows[tp] <= offset <= ends[tp]:
                raise InvalidOffsetsError(
                    f"/partitions: offset {offset} of {tp[0]}[{tp[1]}] is outside "
                    f"its records, {lows[tp]} to {ends[tp]}"
                )


def complete_write(
    config: Config, plan: dict[str, Any], *, lease: Lease, release: bool = True
) -> None:
    """Apply an offsets write's ``plan`` under ``lease`` (renewed as it goes; it stops at
    :class:`~processor.pipeline.offsets_lease.LeaseLost`), and (``release``) remove it from
    the control topic.

    Each step gives the same result when run again, so a plan found half
    applied is completed by running it whole.
    """
    admin = AdminClient(client_config(config.kafka))
    for topic, partition in plan["reset_state"]:
        _delete_state(config, topic, partition, lease)
    Failpoint("offsets-write").passed()
    lease.renew()
    group = plan["group"]
    if plan["delete_group"]:
        try:
            admin.delete_consumer_groups([group])[group].result()
        except KafkaException as exc:
            if "not found" not in exc.args[0].str().lower():
                raise TidemarkError(f"cannot delete consumer group {group}: {exc}") from None
    if plan["offsets"]:
        tps = [TopicPartition(t, p, o) for t, p, o in plan["offsets"]]
        result = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])
        for tp in result[group].result().topic_partitions:
            if tp.error is not None:
                raise TidemarkError(f"cannot commit {tp.topic}[{tp.partition}]: {tp.error}")
    write_positions(config, admin, plan["positions"])
    if release:  # done whole: released even if a claim came meanwhile (it finds none)
        write_control(config, OFFSETS_WRITE, None, released=lease.writer)


def write_positions(
    config: Config, admin: AdminClient, positions: list[tuple[str, int, Any]]
) -> None:
    """Write each input partition's source position, ``(topic, partition, position)``
    (``None``: a tombstone, none known), and wait for them. The topic is made here if no
    data plane ran yet: no producer makes a topic."""
    if not positions:
        return
    topic = positions_topic(config.processor.pipeline)
    ensure_topics(
        admin,
        {topic: 1},
        config.kafka.replication_factor,
        config=record_topic_config(config.kafka, **{"cleanup.policy": "compact"}),
    )
    producer = Producer(producer_config(config.kafka))
    acks = Acknowledgements(producer)
    for name, partition, value in positions:
        body = None if value is None else orjson.dumps(value)
        producer.produce(topic, body, f"{name}/{partition}".encode(), 0, acks.on_delivery)
    acks.wait("source positions")


def _unknown_positions(kinds: dict[Partition, str]) -> dict[Partition, dict[str, Any] | None]:
    """No source position for each input partition: where a reset goes, none is known."""
    return {tp: None for tp, kind in kinds.items() if kind == "input"}


def _delete_state(config: Config, topic: str, partition: int, lease: Lease) -> None:
    """Write a tombstone for every key of a changelog partition that has a value, streamed:
    a changelog may hold more keys than memory, so they are not collected first. A key
    written often gets a tombstone per value (idempotent) unless seen lately."""
    producer = Producer(producer_config(config.kafka, **{"linger.ms": 5}))
    acks = Acknowledgements(producer)
    on_delivery = acks.on_delivery  # one object: each record in flight holds a reference
    recent: set[bytes] = set()
    for key, value in _read_all(config, topic, partition):
        lease.renew()
        if key is None or value is None or key in recent:
            continue
        if len(recent) >= RECENT_KEYS:
            recent.clear()
            producer.poll(0)  # delivery reports free the records Kafka acknowledged
        recent.add(key)
        produce_waiting(producer, topic, None, key, on_delivery, partition)
    acks.wait(f"tombstones of {topic}[{partition}]")


def _read_all(
    config: Config, topic: str, partition: int
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Every record's key and value of ``topic[partition]``, in order, streamed."""
    consumer = Consumer(
        reader_config(config.kafka, reader_group(config.processor.pipeline, "offsets"))
    )
    try:
        end = exact_end_offsets(consumer, [TopicPartition(topic, partition)])[(topic, partition)]
        for msg in read_range(consumer, topic, partition, 0, end, timeout=60):
            yield msg.key(), msg.value()
    finally:
        consumer.close()


def _bounds(
    consumer: Consumer, partitions: list[Partition]
) -> tuple[dict[Partition, int], dict[Partition, int]]:
    """The first offset and the end of each partition's records."""
    ends = exact_end_offsets(consumer, [TopicPartition(t, p) for t, p in partitions])
    lows = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10)[0] for tp in ends}
    return lows, ends


def _resolve(
    config: Config, partitions: list[Partition], to: str, timestamp_ms: int | None
) -> dict[Partition, int]:
    """The offset each partition goes to for a reset ``to`` the beginning, end or a time."""
    consumer = Consumer(
        reader_config(config.kafka, reader_group(config.processor.pipeline, "offsets"))
    )
    try:
        lows, ends = _bounds(consumer, partitions)
        if to == "beginning":
            return lows
        if to == "end":
            return ends
        assert timestamp_ms is not None
        return {
            tp: _first_at_or_after(consumer, tp, lows[tp], ends[tp], timestamp_ms) for tp in ends
        }
    finally:
        consumer.close()


def _first_at_or_after(
    consumer: Consumer, tp: Partition, low: int, end: int, timestamp_ms: int
) -> int:
    """The offset of the first record of ``tp`` whose timestamp is at or after ``timestamp_ms``
    (``end`` if none).

    The broker's answer (ListOffsets) is checked against the records around it;
    where it does not hold (the embedded broker answers 0), the partition is
    scanned from ``low``.
    """
    answer = consumer.offsets_for_times([TopicPartition(*tp, timestamp_ms)], timeout=10)[0].offset
    candidate = end if answer < 0 else answer
    if _holds(consumer, tp, low, end, candidate, timestamp_ms):
        return candidate
    consumer.assign([TopicPartition(*tp, low)])
    try:
        position = low
        while position < end:
            for msg in data_messages(consumer.consume(min(10_000, end - position), 0.5)):
                position = (msg.offset() or 0) + 1
                if msg.timestamp()[1] >= timestamp_ms:
                    return msg.offset() or 0
        return end
    finally:
        consumer.unassign()


def _holds(
    consumer: Consumer, tp: Partition, low: int, end: int, offset: int, timestamp_ms: int
) -> bool:
    """Whether the record before ``offset`` is before ``timestamp_ms`` and the one at it not."""
    before = _timestamp(consumer, tp, offset - 1) if offset > low else None
    at = _timestamp(consumer, tp, offset) if offset < end else None
    return (before is None or before < timestamp_ms) and (at is None or at >= timestamp_ms)


def _timestamp(consumer: Consumer, tp: Partition, offset: int) -> int | None:
    consumer.assign([TopicPartition(*tp, offset)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for msg in data_messages(consumer.consume(1, 0.5)):
                if msg.offset() == offset:
                    return int(msg.timestamp()[1])
        return None
    finally:
        consumer.unassign()
