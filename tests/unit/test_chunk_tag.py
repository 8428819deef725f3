"""Backfill records in the reconciler: decided against the state of their input partition."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.events.chunk_tag import ChunkTag, ChunkTags
from processor.events.visibility import PgSnapshot, Window
from processor.reconcile.batch import Reconciler
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.probe import TOPIC, probe_event
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.messages import RawMessage
from tidemark.core.topics import backfill_topic, backfilled_topic

CONFIG = Config(processor=ProcessorConfig(pipeline="p"))
BACKFILL = backfill_topic("p", TOPIC)
KEY = orjson.dumps({"id": 1})


def row(name: str) -> dict[str, Any]:
    return {"id": 1, "name": name, "amount": None, "at": None, "u": None, "j": None, "d": None}


def change(name: str, txid: int, position: int) -> bytes:
    return orjson.dumps(probe_event("u", row(name), f'["{position}","{position}"]', txid, position))


def chunk_row(name: str) -> bytes:
    event = probe_event("r", row(name))
    event["source"].update(snapshot="incremental", sequence=None, txId=None, lsn=None)
    return orjson.dumps(event)


def outputs(
    reconciler: Reconciler, store: MemoryPartitionStore, *messages: RawMessage
) -> list[Any]:
    groups: dict[tuple[str, int], list[RawMessage]] = {}
    for msg in messages:
        groups.setdefault((msg.topic, msg.partition), []).append(msg)
    batch = reconciler.decide(groups, {(TOPIC, 0): store})
    for tp, state in batch.states.items():
        assert tp == (TOPIC, 0)  # backfill records change the input partition's state
        store.commit(state.updates, store.checkpoint())
    return [
        (topic, orjson.loads(value)["after"]["name"], orjson.loads(value)["tidemark"]["reason"])
        for topic, _p, _k, value in batch.records
        if value is not None
    ] + [("dead", e.kind) for e in batch.dead_letters]


def test_topic_names() -> None:
    assert BACKFILL == "p.backfill.tidemark.public.probe"
    assert backfilled_topic("p", BACKFILL) == TOPIC
    assert backfilled_topic("p", TOPIC) is None
    assert backfilled_topic("q", BACKFILL) is None


def test_tags_round_trip_through_headers_and_refuse_broken_ones() -> None:
    tag = ChunkTag(12, PgSnapshot(100, 105, frozenset({101, 103})), "req-1")
    tags = ChunkTags()
    assert tags.parse(tag.headers()) == tag
    assert tags.parse(None) is None
    assert tags.parse([("tidemark.chunk", b"12")]) is None
    assert tags.parse([("tidemark.chunk", b"x"), ("tidemark.snapshot", b"1:2:")]) is None
    assert tags.parse([("tidemark.chunk", b"1"), ("tidemark.snapshot", b"5:2:")]) is None
    window = ChunkTag(13, Window((5, 7), (9, 2), (40, 0, 12)), "req-2")
    assert tags.parse(window.headers()) == window
    seen = ChunkTag(14, Window((5, 7), (9, 2), (40,), PgSnapshot(8, 12, frozenset({9}))), "r")
    assert tags.parse(seen.headers()) == seen
    assert tags.parse([("tidemark.chunk", b"1"), ("tidemark.window", b"5,7,9,2;4;8:7:")]) is None
    assert tags.parse([("tidemark.chunk", b"1"), ("tidemark.window", b"5,7,9,2;4;1:2:;")]) is None
    assert tags.parse([("tidemark.chunk", b"1"), ("tidemark.window", b"9,2,5,7;1")]) is None
    assert tags.parse([("tidemark.chunk", b"1"), ("tidemark.window", b"5,7,9,2;")]) is None


def test_a_chunk_row_wins_over_a_change_it_contains_and_loses_to_a_newer_one() -> None:
    reconciler, store = Reconciler(CONFIG), MemoryPartitionStore()
    read_in = PgSnapshot(500, 502, frozenset({500}))  # 499 committed before; 500 and 502 not
    tag = ChunkTag(1, read_in, "r")
    assert outputs(reconciler, store, RawMessage(TOPIC, 0, 0, KEY, change("old", 499, 10))) == [
        ("tidemark.reconciled.public.probe", "old", "applied")
    ]
    # The chunk row was read after 499 committed: it is as new or newer; emitted.
    assert outputs(reconciler, store, RawMessage(BACKFILL, 0, 0, KEY, chunk_row("read"), tag)) == [
        ("tidemark.reconciled.public.probe", "read", "snapshot")
    ]
    # A change the chunk already contains (a late arrival from the change topic): dropped.
    assert outputs(reconciler, store, RawMessage(TOPIC, 0, 1, KEY, change("old", 499, 10))) == []
    # A change the snapshot did not see: applied.
    assert outputs(reconciler, store, RawMessage(TOPIC, 0, 2, KEY, change("new", 500, 20))) == [
        ("tidemark.reconciled.public.probe", "new", "applied")
    ]
    # The same chunk row replayed now: state holds a change it did not see; dropped (I2).
    assert outputs(reconciler, store, RawMessage(BACKFILL, 0, 0, KEY, chunk_row("read"), tag)) == []


def test_a_backfill_record_without_its_headers_is_a_dead_letter() -> None:
    reconciler, store = Reconciler(CONFIG), MemoryPartitionStore()
    assert outputs(reconciler, store, RawMessage(BACKFILL, 0, 0, KEY, chunk_row("x"))) == [
        ("dead", "backfill-headers")
    ]


def test_a_backfill_partition_without_its_input_partition_waits() -> None:
    reconciler = Reconciler(CONFIG)
    tag = ChunkTag(1, PgSnapshot(5, 5), "r")
    groups = {(BACKFILL, 1): [RawMessage(BACKFILL, 1, 7, KEY, chunk_row("x"), tag)]}
    batch = reconciler.decide(groups, {(TOPIC, 0): MemoryPartitionStore()})
    assert batch.rewinds == {(BACKFILL, 1): 7} and not batch.records


NUMBERS = st.integers(-(2**70), 2**70).map(str) | st.text(max_size=8)


@st.composite
def hostile_headers(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    """Chunk headers anyone could write to a backfill topic: numbers of any size, junk text."""
    number = draw(NUMBERS)
    if draw(st.booleans()):
        ids = draw(st.lists(NUMBERS, max_size=3))
        seen = ("tidemark.snapshot", f"{draw(NUMBERS)}:{draw(NUMBERS)}:{','.join(ids)}")
    else:
        bounds = ",".join(draw(NUMBERS) for _ in range(4))
        ends = ",".join(draw(st.lists(NUMBERS, min_size=1, max_size=3)))
        seen = ("tidemark.window", f"{bounds};{ends}")
    return [("tidemark.chunk", number.encode()), (seen[0], seen[1].encode())]


@settings(max_examples=300, deadline=None)
@given(headers=hostile_headers(), name=st.text(max_size=4))
def test_hostile_chunk_headers_are_dead_letters_or_rows_never_a_crash(
    headers: list[tuple[str, bytes]], name: str
) -> None:
    """A backfill record whose headers hold numbers beyond 64 bits or junk is a dead letter
    (or, when they parse, a row decided like any other); deciding it never raises."""
    tag = ChunkTags().parse(headers)
    message = RawMessage(BACKFILL, 0, 0, KEY, chunk_row(name or "x"), tag)
    store = MemoryPartitionStore()
    store.commit({}, Checkpoint(0))
    found = outputs(Reconciler(CONFIG), store, message)
    assert len(found) <= 1
