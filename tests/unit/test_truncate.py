"""TRUNCATE under ``debezium-upsert`` (:mod:`processor.reconcile.truncates`), over two
input partitions with the batch rules and in-memory state.

Debezium writes a truncate event into one partition; the table's keys are in all of
them. Every key whose row is older than the truncate must be deleted in the output, by
its own key bytes, whichever partition it is in; a change or a chunk row older than the
truncate, read after it, must not bring a row back; and newer ones stay. Each test runs
with the fused paths and without.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import orjson
import pytest

from processor.events.chunk_tag import UNSIGNED, ChunkTag
from processor.events.visibility import PgSnapshot
from processor.reconcile import truncates
from processor.reconcile.batch import Batch, Reconciler
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.probe import TOPIC, probe_event
from tests.unit.test_batch import encode, event, make_reconciler
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import SchemaCache
from tidemark.core.topics import backfill_topic, output_topic

BACKFILL = backfill_topic("tidemark", TOPIC)
OUTPUT = output_topic("tidemark", TOPIC)
FORMATS = ["json-schemaless", "json", "avro"]


class Pipeline:
    """A reconciler over two partitions, committing each batch's state as the data plane
    does, and feeding each batch the messages of both topics it is given."""

    def __init__(self, fused: bool, page: int = truncates.WIPE_PAGE) -> None:
        config = Config(processor=ProcessorConfig(envelope="debezium-upsert", fused_paths=fused))
        self.registry = make_reconciler()[1]
        self.reconciler = self.instance(config)
        self.reconciler.wipe_page = page
        self.stores = {(TOPIC, p): MemoryPartitionStore() for p in (0, 1)}
        self.offsets: dict[tuple[str, int], int] = {}

    def instance(self, config: Config) -> Reconciler:
        """A reconciler of this pipeline (another instance, given the same partitions)."""
        return Reconciler(config, SchemaCache(self.registry), partition_count=lambda _t: 2)

    def outputs(self, batch: Batch) -> dict[bytes, list[Any]]:
        """Per output key, its events' ops and reasons (``None``: a tombstone), in order;
        an Avro key by its body (the output's schema id is not the input's)."""
        out: dict[bytes, list[Any]] = {}
        for topic, _p, key, value in batch.records:
            assert topic == OUTPUT and key is not None
            key = body(key)
            if value is None:
                out.setdefault(key, []).append(None)
                continue
            if value[:1] == b"\x00":
                schema_id = struct.unpack(">I", value[1:5])[0]
                schema = fastavro.parse_schema(json.loads(self.registry.schema(schema_id)), {})
                payload = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
            else:
                payload = orjson.loads(value)
                payload = payload.get("payload", payload)
            assert isinstance(payload, dict)
            if payload["op"] == "d":
                assert payload["before"]["id"] is not None and payload["after"] is None
            out.setdefault(key, []).append((payload["op"], payload["tidemark"]["reason"]))
        return out

    def run(self, messages: dict[tuple[str, int], list[tuple[Any, ...]]]) -> Batch:
        groups = {}
        for tp, pairs in messages.items():
            start = self.offsets.get(tp, 0)
            groups[tp] = [RawMessage(tp[0], tp[1], start + i, *m) for i, m in enumerate(pairs)]
        batch = self.reconciler.decide(groups, self.stores)
        for tp, state in batch.states.items():
            self.stores[tp].commit(state.updates, Checkpoint(batch.next_offsets.get(tp)))
        self.offsets.update(batch.next_offsets)
        return batch


def truncate_at(fmt: str, position: int) -> bytes:
    value = encode(
        fmt, 0, probe_event("t", None, f'["{position}","{position}"]', position, position)
    )[1]
    assert value is not None
    return value


def change(fmt: str, key: int, op: str, position: int) -> tuple[bytes, bytes | None]:
    return encode(fmt, key, event(key, op, None if op == "d" else f"v{position}", position))


def body(key: bytes | None) -> bytes:
    """An output key without its Avro header (its schema id is the output topic's)."""
    assert key is not None
    return key[5:] if key[:1] == b"\x00" else key


def key_of(fmt: str, key: int) -> bytes:
    """The bytes of ``key`` in ``fmt`` (an Avro key's body)."""
    return body(change(fmt, key, "c", 0)[0])


def chunk_row(fmt: str, key: int, number: int, seen: PgSnapshot) -> tuple[Any, ...]:
    payload = event(key, "r", f"chunk {number}", 0)
    payload["source"] = {**payload["source"], "snapshot": "incremental", "txId": None}
    key_bytes, value = encode(fmt, key, payload)
    return key_bytes, value, ChunkTag(number, seen, "load")


def markers(batch: Batch) -> dict[tuple[str, int], list[tuple[Any, ...]]]:
    """The batch's markers, as the next batch reads them from the backfill topic."""
    found: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    assert all(topic != BACKFILL for topic, *_ in batch.records)
    for sent in batch.markers.values():
        for topic, p, key, value in sent:
            found.setdefault((topic, p), []).append((key, value))
    return found


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_truncate_deletes_every_older_row_of_every_partition(fmt: str, fused: bool) -> None:
    pipeline = Pipeline(fused)
    p0, p1 = (TOPIC, 0), (TOPIC, 1)
    pipeline.run(
        {
            p0: [change(fmt, 1, "c", 101), change(fmt, 2, "c", 102)],
            p1: [change(fmt, 3, "c", 103), change(fmt, 4, "c", 104), change(fmt, 4, "d", 105)],
        }
    )
    truncate = truncate_at(fmt, 200)
    batch = pipeline.run({p0: [(None, truncate), change(fmt, 5, "c", 201)]})
    sent = markers(batch)
    assert sorted(sent) == [(BACKFILL, 0), (BACKFILL, 1)] and list(batch.markers) == [p0]
    assert all(value == truncate for [(_key, value)] in sent.values())
    assert list(pipeline.outputs(batch)) == [key_of(fmt, 5)]  # the truncate: no output yet
    assert batch.dead_letters == []

    batch = pipeline.run(sent)
    deleted = pipeline.outputs(batch)
    keys = {k: key_of(fmt, k) for k in range(1, 10)}
    # Keys 1-3 go, by their own key bytes, each a delete and a tombstone; key 4 was
    # deleted already and key 5 came after the truncate.
    assert deleted == {keys[k]: [("d", "truncate"), None] for k in (1, 2, 3)}
    for _topic, p, key, _value in batch.records:
        assert p == (0 if body(key) in (keys[1], keys[2]) else 1)
    assert not pipeline.reconciler.wipes_due(pipeline.stores, lambda _tp: False)

    # Partition 1 lagged: its changes older than the truncate come now, then newer ones.
    batch = pipeline.run(
        {
            p1: [
                change(fmt, 6, "c", 150),  # a key without state: below the floor
                change(fmt, 3, "u", 160),  # its tombstone is at the truncate
                change(fmt, 7, "c", 210),
                change(fmt, 3, "u", 211),
            ],
            p0: [change(fmt, 5, "u", 212)],
        }
    )
    assert pipeline.outputs(batch) == {
        keys[7]: [("c", "applied")],
        keys[3]: [("u", "applied")],
        keys[5]: [("u", "applied")],
    }
    # A repeat of the marker (a replay) deletes nothing again.
    again = {tp: [(key, value)] for tp, [(key, value)] in sent.items()}
    assert pipeline.outputs(pipeline.run(again)) == {}


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_chunk_rows_read_before_a_truncate_bring_no_row_back(fmt: str, fused: bool) -> None:
    pipeline = Pipeline(fused)
    p0, b0 = (TOPIC, 0), (BACKFILL, 0)
    pipeline.run({p0: [change(fmt, 1, "c", 101)]})
    before, after = PgSnapshot(150, 150), PgSnapshot(250, 250)  # txid 200: the truncate's
    pipeline.run({b0: [chunk_row(fmt, 2, 1, before)]})  # read, and applied, before it
    sent = markers(pipeline.run({p0: [(None, truncate_at(fmt, 200))]}))
    keys = {k: key_of(fmt, k) for k in range(1, 10)}
    assert pipeline.outputs(pipeline.run(sent)) == {
        keys[k]: [("d", "truncate"), None] for k in (1, 2)
    }
    batch = pipeline.run(
        {
            b0: [
                chunk_row(fmt, 3, 2, before),  # a key without state, read before: dropped
                chunk_row(fmt, 1, 2, before),  # its tombstone is newer: dropped
                chunk_row(fmt, 4, 3, after),
                chunk_row(fmt, 2, 3, after),
            ]
        }
    )
    assert pipeline.outputs(batch) == {keys[4]: [("r", "snapshot")], keys[2]: [("r", "snapshot")]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_large_table_is_wiped_a_page_per_batch(fmt: str) -> None:
    pipeline = Pipeline(fused=True, page=3)
    p0 = (TOPIC, 0)
    pipeline.run({p0: [change(fmt, k, "c", 100 + k) for k in range(10)]})
    sent = markers(pipeline.run({p0: [(None, truncate_at(fmt, 200))]}))
    deleted: list[bytes] = []
    batch = pipeline.run(sent)
    batches = 1
    while True:
        deleted += [k for k, v in pipeline.outputs(batch).items() if v == [("d", "truncate"), None]]
        if not pipeline.reconciler.wipes_due(pipeline.stores, lambda _tp: False):
            break
        # A new instance given the partition goes on from the state alone.
        pipeline.reconciler = pipeline.instance(pipeline.reconciler.config)
        pipeline.reconciler.wipe_page = 3
        assert pipeline.reconciler.wipes_due(pipeline.stores, lambda _tp: False)
        batch = pipeline.run({})
        batches += 1
    assert sorted(deleted) == sorted(key_of(fmt, k) for k in range(10))
    assert batches == 4


@pytest.mark.parametrize("envelope", ["debezium", "upsert"])
def test_a_truncate_the_envelope_cannot_apply_is_a_dead_letter_that_says_why(
    envelope: str,
) -> None:
    config = Config(processor=ProcessorConfig(envelope=envelope))
    reconciler = Reconciler(config, partition_count=lambda _topic: 2)
    tp = (TOPIC, 0)
    value = truncate_at("json-schemaless", 200)
    batch = reconciler.decide(
        {tp: [RawMessage(TOPIC, 0, 0, None, value)]}, {tp: MemoryPartitionStore()}
    )
    [letter] = batch.dead_letters
    assert letter.kind in ("truncate", "no-key") and batch.records == []
    if envelope == "debezium":
        assert "not applied under the debezium envelope" in letter.reason


def test_a_marker_that_is_not_a_truncate_is_a_dead_letter() -> None:
    pipeline = Pipeline(fused=True)
    forged = truncates.markers(BACKFILL, 1, (0, 7), change("json", 1, "d", 300)[1] or b"")
    batch = pipeline.run({(BACKFILL, 0): [(key, value) for _t, _p, key, value in forged]})
    [letter] = batch.dead_letters
    assert letter.kind == "truncate" and "not a truncate event" in letter.reason
    assert batch.records == [] and not pipeline.reconciler.wipes_due(
        pipeline.stores, lambda _tp: False
    )


def test_the_records_of_a_truncate_read_back_as_written() -> None:
    truncate = truncates.Truncate((10, 12), 4_000_000_000, 12)
    assert truncates.Floor.decode(truncates.Floor(truncate, True).encode()) == (truncate, True)
    wipe = truncates.Wipe(truncates.Truncate((1, 2), None, 2), b'{"op":"t"}', (3, 4), b"key")
    assert truncates.Wipe.decode(wipe.encode()) == wipe
    assert truncates.origin_of(truncates.markers("b", 1, (5, 6), b"")[0][2]) == (5, 6)
    assert truncates.origin_of(b"\x00tidemark:truncate:") is None


def test_a_truncate_floor_of_an_unknown_form_stops_its_partition() -> None:
    pipeline = Pipeline(fused=True)
    tp = (TOPIC, 0)
    pipeline.stores[tp].commit({truncates.FLOOR: b"\x07" + bytes(40)}, Checkpoint(0))
    batch = pipeline.run({tp: [change("json", 1, "c", 101)]})
    assert batch.rewinds == {tp: 0} and batch.records == []
    assert "format 07" in pipeline.reconciler.refused_partitions[tp]


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_unsigned_backfill_records_are_dead_letters_after_a_truncate_too(
    fmt: str, fused: bool
) -> None:
    """The data plane marks a backfill record without a valid MAC UNSIGNED. The fused path
    read its chunk's snapshot against the partition's truncate floor, and raised on it
    (review of the signed records): every replica given the partition stopped."""
    pipeline = Pipeline(fused)
    p0, b0 = (TOPIC, 0), (BACKFILL, 0)
    pipeline.run({p0: [change(fmt, 1, "c", 101)]})
    pipeline.run(markers(pipeline.run({p0: [(None, truncate_at(fmt, 200))]})))
    row = chunk_row(fmt, 2, 3, PgSnapshot(250, 250))
    forged_marker = truncates.markers(BACKFILL, 1, (0, 9), truncate_at(fmt, 300))[0]
    start = pipeline.offsets[b0]
    batch = pipeline.run(
        {b0: [(row[0], row[1], UNSIGNED), (forged_marker[2], forged_marker[3], UNSIGNED)]}
    )
    assert [letter.kind for letter in batch.dead_letters] == ["unsigned", "unsigned"]
    assert batch.records == [] and batch.markers == {}
    assert pipeline.offsets[b0] == start + 2  # both decided
