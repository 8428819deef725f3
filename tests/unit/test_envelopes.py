"""The three envelopes' rules over a real batch state, with hypothesis-generated streams.

Streams are built the way Debezium produces them: changes in commit order
(increasing positions), snapshot groups whose rows share one position, and
connector restarts that send a contiguous range again. Batches are committed
to a memory store between steps, and a "crash" drops a batch's state updates
after its outputs were emitted, exactly the window the commit protocol leaves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import SourceRefusedError, UnfillableError
from processor.events.change import TOAST_PLACEHOLDER, Change, Snapshot
from processor.events.json_codec import JsonCodec
from processor.events.visibility import PgSnapshot
from processor.reconcile.envelopes import (
    ENTRY,
    HIGH_WATER,
    READ_AGAIN,
    SEEN_STALE,
    STEPS,
    Emit,
    debezium,
    debezium_upsert,
    prune_seen,
    upsert,
)
from processor.reconcile.versions import Entry
from state.batch import BatchState
from state.memory import MemoryPartitionStore
from state.rocksdb import RocksDBBackend
from state.store import Checkpoint
from tests.peak import peak_bytes

ROWS = JsonCodec("debezium-upsert")


@dataclass(frozen=True)
class Event:
    """One event of a generated stream."""

    key: int
    op: str
    value: int | None
    version: tuple[int, int]
    snapshot: Snapshot = Snapshot.NONE

    def change(self) -> Change:
        after = None if self.value is None else {"id": self.key, "v": self.value}
        before = {"id": self.key, "v": -1} if self.op in ("u", "d") else None
        return Change(
            orjson.dumps({"id": self.key}),
            self.op,
            before,
            after,
            self.version,
            self.snapshot,
            "postgresql",
        )


@st.composite
def debezium_streams(draw: st.DrawFn) -> list[Event]:
    """Changes in commit order: an initial snapshot, then changes and incremental chunks."""
    keys = draw(st.integers(1, 6))
    position = 100
    events = [
        Event(k, "r", draw(st.integers(0, 9)), (0, position), Snapshot.INITIAL) for k in range(keys)
    ]
    live = set(range(keys))
    for _ in range(draw(st.integers(0, 25))):
        position += draw(st.integers(1, 5))
        if draw(st.integers(0, 9)) == 0:  # an incremental chunk: rows of live keys at one position
            for k in sorted(live):
                events.append(
                    Event(
                        k, "r", draw(st.integers(0, 9)), (position, position), Snapshot.INCREMENTAL
                    )
                )
            continue
        key = draw(st.integers(0, keys + 2))
        if key in live and draw(st.booleans()):
            events.append(Event(key, "d", None, (position, position)))
            live.discard(key)
        else:
            events.append(
                Event(
                    key, "u" if key in live else "c", draw(st.integers(0, 9)), (position, position)
                )
            )
            live.add(key)
    return events


@st.composite
def with_restarts(draw: st.DrawFn, events: list[Event]) -> list[Event]:
    """``events`` as delivered: after a restart the connector sends a contiguous range again."""
    delivered = list(events)
    for _ in range(draw(st.integers(0, 3))):
        cut = draw(st.integers(0, len(delivered)))
        back = draw(st.integers(0, cut))
        delivered = delivered[:cut] + delivered[back:cut] + delivered[cut:]
    return delivered


def run(step, stream: list[Event], batch: int = 4, crash_after: set[int] | None = None):  # type: ignore[no-untyped-def]
    """Feed ``stream`` in batches; a crashed batch emits but loses its state and is replayed."""
    store = MemoryPartitionStore()
    emitted: list[tuple[Event, Emit]] = []
    index = 0
    batch_number = 0
    while index < len(stream):
        state = BatchState(store)
        chunk = stream[index : index + batch]
        for event in chunk:
            emit = step(event.change(), state, ROWS)
            if emit is not None:
                emitted.append((event, emit))
        prune_seen(state, 3)
        if crash_after and batch_number in crash_after:
            crash_after.discard(batch_number)  # outputs are out, state and offsets are not
        else:
            store.commit(state.updates, Checkpoint(index + len(chunk)))
            index += len(chunk)
        batch_number += 1
    return emitted, store


def final_rows(emitted: list[tuple[Event, Emit]]) -> dict[int, object]:
    rows: dict[int, object] = {}
    for event, emit in emitted:
        rows[event.key] = emit.after
    return {k: v for k, v in rows.items() if v is not None}


def truth(events: list[Event]) -> dict[int, object]:
    rows: dict[int, object] = {}
    for event in events:
        rows[event.key] = None if event.value is None else {"id": event.key, "v": event.value}
    return {k: v for k, v in rows.items() if v is not None}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_debezium_drops_exactly_the_replayed_events(data: st.DataObject) -> None:
    """Classic envelope: the output is the stream without its repeats, in order."""
    events = data.draw(debezium_streams())
    delivered = data.draw(with_restarts(events))
    emitted, _store = run(debezium, delivered, batch=data.draw(st.integers(1, 7)))
    assert [event for event, _ in emitted] == events


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_debezium_state_is_constant_outside_snapshots(data: st.DataObject) -> None:
    events = data.draw(debezium_streams())
    position = events[-1].version[0] + 1
    events.append(Event(0, "u", 1, (position, position)))
    _emitted, store = run(debezium, data.draw(with_restarts(events)))
    # Ended groups' keys go a page (3 keys) per batch, whatever their number.
    left = len(store.keys(b"")) - 1
    for _ in range(left // 3 + 1):
        state = BatchState(store)
        prune_seen(state, 3)
        assert len(state.updates) <= 4  # three keys and the flag
        store.commit(state.updates, Checkpoint(len(events)))
    assert store.keys(b"") == [HIGH_WATER]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_crash_between_flush_and_state_replays_without_loss(data: st.DataObject) -> None:
    """I5: outputs of a crashed batch are produced again; nothing is dropped."""
    events = data.draw(debezium_streams())
    crashes = set(data.draw(st.lists(st.integers(0, len(events)), max_size=3)))
    for step in (debezium, debezium_upsert):
        emitted, _ = run(step, events, batch=3, crash_after=set(crashes))
        assert final_rows(emitted) == truth(events)
        assert {e for e, _ in emitted} == set(events)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_debezium_upsert_converges_and_is_monotone(data: st.DataObject) -> None:
    """I1 and I3 under restarts; ``before`` is the state's previous row, not the input's."""
    events = data.draw(debezium_streams())
    delivered = data.draw(with_restarts(events))
    emitted, _ = run(debezium_upsert, delivered, batch=data.draw(st.integers(1, 7)))
    assert final_rows(emitted) == truth(events)
    last: dict[int, tuple[int, int]] = {}
    for event, _emit in emitted:
        assert event.version >= last.get(event.key, (-1, -1))
        last[event.key] = event.version


def test_debezium_upsert_retracts_from_state() -> None:
    emitted, _ = run(
        debezium_upsert,
        [Event(1, "c", 1, (1, 1)), Event(1, "u", 2, (2, 2)), Event(1, "d", None, (3, 3))],
    )
    befores = [e.before for _, e in emitted]
    assert befores[0] is None
    assert orjson.loads(befores[1]) == {"id": 1, "v": 1}  # not the input's {"v": -1}
    assert orjson.loads(befores[2]) == {"id": 1, "v": 2}
    assert [e.op for _, e in emitted] == ["c", "u", "d"]


def test_upsert_derives_op_from_state_and_null_deletes() -> None:
    stream = [Event(1, "u", 1, (0, 0)), Event(1, "u", 2, (0, 1)), Event(1, "d", None, (0, 2))]
    emitted, store = run(upsert, stream)
    assert [e.op for _, e in emitted] == ["c", "u", "d"]
    # a replay of offsets already applied: older dropped, equal re-emitted
    state = BatchState(store)
    assert upsert(stream[0].change(), state, ROWS) is None
    again = upsert(stream[2].change(), state, ROWS)
    assert again is not None and again.reason == "replayed"


def toast_change(op: str, before: dict[str, object] | None) -> Change:
    after = {"id": 1, "doc": TOAST_PLACEHOLDER, "n": 2}
    change = Change(b'{"id":1}', op, before, after, (5, 5), connector="postgresql", toast=True)
    return change


def test_toast_placeholder_is_filled_from_state() -> None:
    store = MemoryPartitionStore()
    state = BatchState(store)
    first = Change(b'{"id":1}', "c", None, {"id": 1, "doc": "long text", "n": 1}, (1, 1))
    debezium_upsert(first, state, ROWS)
    emit = debezium_upsert(toast_change("u", None), state, ROWS)
    assert emit is not None and emit.after == {"id": 1, "doc": "long text", "n": 2}
    assert b"__debezium" not in (emit.after_stored or b"")


def test_toast_placeholder_is_filled_from_a_full_before() -> None:
    state = BatchState(MemoryPartitionStore())
    emit = debezium(toast_change("u", {"id": 1, "doc": "from before", "n": 1}), state, ROWS)
    assert emit is not None and emit.after is not None and emit.after["doc"] == "from before"


def test_toast_placeholder_without_a_source_is_refused_not_written() -> None:
    """The classic envelope's only source is the input's ``before``."""
    change = toast_change("u", None)
    change.before = {"id": 1, "n": 1}  # a before without the TOASTed column
    with pytest.raises(UnfillableError, match="doc"):
        debezium(change, BatchState(MemoryPartitionStore()), ROWS)


def chunk_row(doc: str, n: int, chunk: int, snapshot: PgSnapshot) -> Change:
    row = {"id": 1, "doc": doc, "n": n}
    return Change(b'{"id":1}', "r", None, row, (0, 0), chunk=chunk, read_in=snapshot, txid=None)


def test_an_unfillable_change_leaves_its_key_pending_and_asks_for_its_row() -> None:
    """No state and no full ``before``: the change is kept as a pending entry (its version
    and txId, no row) and its row is asked for again; nothing is emitted for it."""
    state = BatchState(MemoryPartitionStore())
    change = toast_change("u", None)
    change.txid = 100
    emit = debezium_upsert(change, state, ROWS)
    assert emit is not None and emit.reason == READ_AGAIN and emit.after is None
    raw = state.get(ENTRY + b'{"id":1}')
    assert raw is not None
    assert Entry.decode(raw) == Entry((5, 5), None, 100, pending=True)
    # A replay of the same change asks again; a chunk row that did not see it also does.
    assert (again := debezium_upsert(change, state, ROWS)) and again.reason == READ_AGAIN
    older = chunk_row("old text", 1, 3, PgSnapshot(100, 100, frozenset()))
    dropped = debezium_upsert(older, state, ROWS)
    assert dropped is not None and dropped.reason == READ_AGAIN
    # The row read in a snapshot that sees the change is applied, and later changes fill
    # their placeholders from it.
    newer = chunk_row("long text", 2, 4, PgSnapshot(101, 101, frozenset()))
    applied = debezium_upsert(newer, state, ROWS)
    assert applied is not None and applied.reason == "snapshot"
    assert applied.after == {"id": 1, "doc": "long text", "n": 2}
    later = toast_change("u", None)
    later.version, later.txid = (6, 6), 102
    filled = debezium_upsert(later, state, ROWS)
    assert filled is not None and filled.reason == "applied"
    assert filled.after == {"id": 1, "doc": "long text", "n": 2}


def test_a_pending_key_takes_a_full_change_or_a_delete_as_any_key_does() -> None:
    state = BatchState(MemoryPartitionStore())
    debezium_upsert(toast_change("u", None), state, ROWS)
    full = Change(b'{"id":1}', "u", None, {"id": 1, "doc": "d", "n": 3}, (6, 6))
    emit = debezium_upsert(full, state, ROWS)
    assert emit is not None and emit.reason == "applied" and emit.before is None
    raw = state.get(ENTRY + b'{"id":1}')
    assert raw is not None and not Entry.decode(raw).pending
    # an older partial change (a replay) is dropped, not asked for
    assert debezium_upsert(toast_change("u", None), state, ROWS) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            Change(b"k", "u", None, {"id": 1}, (1, 1), connector="postgresql"),
            "REPLICA IDENTITY FULL",
        ),
        (Change(b"k", "d", None, None, (1, 1), connector="postgresql"), "without 'before'"),
        (Change(b"k", "c", None, {"id": 1}, (1, 1), connector="sqlserver"), "PostgreSQL or MySQL"),
    ],
)
def test_debezium_refuses_sources_that_break_its_constraints(change: Change, reason: str) -> None:
    with pytest.raises(SourceRefusedError, match=reason):
        debezium(change, BatchState(MemoryPartitionStore()), ROWS)


def test_every_envelope_has_a_step() -> None:
    from tidemark.core.config import ENVELOPE_NAMES

    assert set(STEPS) == set(ENVELOPE_NAMES)


def test_the_end_of_a_large_snapshot_group_keeps_memory_flat(tmp_path: Path) -> None:
    """The keys a snapshot group remembered go a page per batch once the position moves on:
    the peak does not grow with the group (Debezium's initial snapshot of a whole table)."""
    small, large = (seen_prune_peak(tmp_path / str(rows), rows) for rows in (20_000, 80_000))
    assert large < 1.5 * small, (small, large)


def seen_prune_peak(path: Path, rows: int) -> int:
    """Python's peak memory from the first change after a group of ``rows`` snapshot rows
    until the group's keys are gone."""
    store = RocksDBBackend(path).open("t", 0)
    offset = 0

    def batch(events: list[Event]) -> None:
        nonlocal offset
        state = BatchState(store)
        for event in events:
            debezium(event.change(), state, ROWS)
        prune_seen(state, 2_000)
        offset += len(events)
        store.commit(state.updates, Checkpoint(offset))

    for start in range(0, rows, 5_000):
        batch([Event(k, "r", 0, (0, 100), Snapshot.INITIAL) for k in range(start, start + 5_000)])

    def move_on() -> None:
        batch([Event(0, "u", 1, (200, 200))])
        while store.get(SEEN_STALE) is not None:
            batch([])
        assert store.keys(b"") == [HIGH_WATER]

    return peak_bytes(move_on)
