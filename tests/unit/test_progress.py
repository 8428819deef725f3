"""The snapshot queue's rules (pure): signals, chunks, aborts, notifications, progress record."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from processor.snapshot.progress import (
    ABORTED,
    COMPLETED,
    DELIVERING,
    MAX_QUEUED_TABLES,
    PENDING,
    RECORD_LIMIT,
    RUNNING,
    SnapshotState,
    TableProgress,
    key_from_json,
    key_to_json,
)
from processor.snapshot.progress_record import decode
from processor.snapshot.signals import (
    MAX_FILTER_BYTES,
    MAX_KEYS,
    MAX_REQUEST_KEY_BYTES,
    MAX_TABLES,
    ExecuteSnapshot,
    PauseSnapshot,
    ResumeSnapshot,
    StopSnapshot,
)
from tidemark.cli.snapshot_status import render_status
from tidemark.core.config import MIN_RECORD_BYTES

#: A table read to its end: its rows delivering to the data plane, or delivered.
READ_WHOLE = (DELIVERING, COMPLETED)


def types(notes: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(n.type, n.request_id) for n in notes]


def test_tables_run_in_the_order_asked_and_each_request_completes_once() -> None:
    state = SnapshotState()
    assert types(state.apply(ExecuteSnapshot("r1", ("public.a", "public.b")), 1.0)) == [
        ("STARTED", "r1")
    ]
    state.apply(ExecuteSnapshot("r2", ("public.c",)), 2.0)
    first = state.current()
    assert first is not None and first.table == "public.a"
    state.begin(first, [10], 10, 3.0)
    notes = state.written(first, state.take(state.plan(first, [6])), 6, 0.1, 3.1)
    assert types(notes) == [("IN_PROGRESS", "r1")] and first.percent == 60.0
    notes = state.written(first, state.take(state.plan(first, [10])), 4, 0.1, 3.2)
    assert types(notes) == [("IN_PROGRESS", "r1"), ("TABLE_SCAN_COMPLETED", "r1")]
    second = state.current()
    assert second is not None and second.table == "public.b"
    notes = state.abort(second, "no primary key", 4.0)
    # public.a is read whole, but the data plane has not read its rows yet.
    assert types(notes) == [("ABORTED", "r1")]
    assert first.status == "delivering" and state.delivering_tables() == [first]
    third = state.current()
    assert third is not None and (third.table, third.request_id) == ("public.c", "r2")
    assert types(state.delivered(first, 5.0)) == [("COMPLETED", "r1")]
    assert first.status == "completed" and state.delivered(first, 6.0) == []


def test_every_request_reads_its_tables_even_if_another_queued_them() -> None:
    state = SnapshotState()
    state.apply(ExecuteSnapshot("r1", ("public.a",)), 1.0)
    state.apply(ExecuteSnapshot("r2", ("public.a",), {"public.a": "id > 5"}), 1.0)
    assert [(t.request_id, t.condition) for t in state.pending()] == [
        ("r1", None),
        ("r2", "id > 5"),
    ]


def test_keys_asked_for_join_a_queued_keys_request_of_their_table() -> None:
    """Rows asked for again (one signal per batch) do not fill the queue: they join a
    queued ``keys`` request of the same table while it has room, and survive the record."""
    state = SnapshotState()
    state.apply(ExecuteSnapshot("r1", ("public.a",)), 1.0)
    notes = state.apply(ExecuteSnapshot("k1", ("public.a",), keys=({"id": 1}, {"id": 2})), 1.0)
    assert types(notes) == [("STARTED", "k1")]
    assert state.apply(ExecuteSnapshot("k2", ("public.a",), keys=({"id": 2}, {"id": 3})), 2.0) == []
    state.apply(ExecuteSnapshot("k3", ("public.b",), keys=({"id": 1},)), 2.0)
    many = tuple({"id": i} for i in range(10, 10 + MAX_KEYS))
    state.apply(ExecuteSnapshot("k4", ("public.a",), keys=many), 3.0)
    restored = decode(state.to_json())
    assert [(t.request_id, len(t.keys or [])) for t in restored.pending()] == [
        ("r1", 0),
        ("k1", 3),
        ("k3", 1),
        ("k4", MAX_KEYS),
    ]
    assert restored.pending()[1].keys == [{"id": 1}, {"id": 2}, {"id": 3}]
    # once its read begins, a request takes no more keys
    keys = restored.pending()[1]
    restored.begin(keys, [3], 3, 4.0)
    restored.apply(ExecuteSnapshot("k5", ("public.a",), keys=({"id": 9},)), 5.0)
    assert restored.pending()[-1].request_id == "k5"
    # an operator's stop leaves the rows the data plane waits for to be read
    restored.apply(StopSnapshot("s1"), 6.0)
    assert [t.request_id for t in restored.pending()] == ["k1", "k3", "k4", "k5"]


def test_stop_aborts_the_named_tables_or_all_and_pause_resume_notify_once() -> None:
    state = SnapshotState()
    state.apply(ExecuteSnapshot("r1", ("public.a", "public.b")), 1.0)
    notes = state.apply(StopSnapshot("s1", ("public.b",)), 2.0)
    assert [(n.type, n.additional_data["aborted_request_id"]) for n in notes] == [("ABORTED", "r1")]
    assert [t.table for t in state.pending()] == ["public.a"]
    assert types(state.apply(PauseSnapshot("p"), 3.0)) == [("PAUSED", "p")]
    assert state.apply(PauseSnapshot("p2"), 3.0) == [] and state.paused
    assert types(state.apply(ResumeSnapshot("q"), 4.0)) == [("RESUMED", "q")]
    assert state.apply(StopSnapshot("s2"), 5.0)[0].type == "ABORTED"
    assert state.current() is None


def test_keys_survive_the_progress_record_as_query_parameters() -> None:
    key = (
        7,
        "x",
        b"\x00\xff",
        decimal.Decimal("1.50"),
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        uuid.UUID(int=1),
    )
    written = key_to_json(key)
    assert orjson.loads(orjson.dumps(written)) == written
    assert key_from_json(written) == (
        7,
        "x",
        "\\x00ff",
        "1.50",
        "2024-01-02 03:04:05+00:00",
        "00000000-0000-0000-0000-000000000001",
    )


def test_the_record_has_ddd4s_fields() -> None:
    state = SnapshotState()
    state.apply(ExecuteSnapshot("r1", ("public.a",), {"public.a": "x > 1"}, "code"), 1.0)
    entry = state.current()
    assert entry is not None
    state.begin(entry, [9], 9, 1.0)
    state.written(entry, state.take(state.plan(entry, [3])), 3, 0.1, 1.1)
    state.take(state.plan(entry, [6]))  # a part being read
    state.take(state.plan(entry, [9]))
    doc = orjson.loads(state.to_json())
    assert doc["incremental_snapshot_collections"] == [
        {
            "incremental_snapshot_collections_id": "public.a",
            "incremental_snapshot_collections_additional_condition": "x > 1",
            "incremental_snapshot_collection_surrogate_key": "code",
        }
    ]
    assert (doc["incremental_snapshot_primary_key"], doc["incremental_snapshot_maximum_key"]) == (
        [3],
        [9],
    )
    in_flight = [(r["after"], r["upto"], r["chunk"]) for r in doc["tables"][0]["ranges"]]
    assert in_flight == [([3], [6], 2), ([6], [9], 3)]
    restored = decode(state.to_json())
    assert restored == state
    assert restored.resumed().tables[0].ranges == []  # read again from [3] after a crash


TABLES = st.sampled_from(["public.a", "public.b", "public.c"])
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("execute"), st.lists(TABLES, min_size=1, max_size=3, unique=True)),
        st.tuples(st.just("stop"), st.lists(TABLES, max_size=2, unique=True)),
        st.tuples(st.just("pause"), st.none()),
        st.tuples(st.just("resume"), st.none()),
        st.tuples(st.just("chunk"), st.integers(0, 5)),
        st.tuples(st.just("abort"), st.none()),
        st.tuples(st.just("crash"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_queue_invariants_hold_for_any_sequence(operations: list) -> None:  # type: ignore[type-arg]
    """Chunk numbers only grow (also across a crash), a key range only moves forward, every
    request completes exactly once after all its tables finished, and the progress record
    read back is always the state."""
    state, used, completed, requests = SnapshotState(), [], [], 0
    last_keys: dict[tuple[str, str], int] = {}
    for kind, arg in operations:
        now = float(len(used) + requests)
        if kind == "execute":
            requests += 1
            notes = state.apply(ExecuteSnapshot(f"r{requests}", tuple(arg)), now)
        elif kind == "stop":
            notes = state.apply(StopSnapshot("s", tuple(arg)), now)
        elif kind == "pause":
            notes = state.apply(PauseSnapshot("p"), now)
        elif kind == "resume":
            notes = state.apply(ResumeSnapshot("q"), now)
        elif kind == "crash":
            state = decode(state.to_json()).resumed()
            notes = []
        else:
            entry = state.current()
            if entry is None:
                continue
            if kind == "abort":
                notes = state.abort(entry, "broken", now)
            else:
                if entry.status != RUNNING:
                    state.begin(entry, [100], 100, now)
                previous = last_keys.get((entry.table, entry.request_id), 0)
                key = min(100, previous + arg) if arg else 100
                last_keys[(entry.table, entry.request_id)] = key
                used.append(state.take(state.plan(entry, [key])))
                notes = state.written(entry, used[-1], arg, 0.01, now)
                assert entry.last_key == [key] and key >= previous
        completed += [n.request_id for n in notes if n.type == "COMPLETED"]
        assert decode(state.to_json()) == state
    assert used == sorted(set(used))
    assert len(completed) == len(set(completed))
    for request in {t.request_id for t in state.tables}:
        finished = all(
            t.status in (COMPLETED, ABORTED) for t in state.tables if t.request_id == request
        )
        assert finished == (request in completed), request
    for request in {t.request_id for t in state.tables if t.status in PENDING}:
        assert request not in completed


def test_progress_for_status() -> None:
    entry = TableProgress(
        "public.a", "r", status=RUNNING, rows=50, estimated_rows=200, busy_seconds=5
    )
    assert entry.percent == 25.0 and entry.seconds_left == 15.0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["plan", "finish", "fail", "crash"]), st.integers(0, 9))))
# every part planned, then written in order: the table is read whole
@example([("plan", 0), ("plan", 0), ("plan", 7)] + [("plan", 9)] * 3 + [("finish", 0)] * 6)
def test_parts_read_in_parallel_advance_the_key_only_over_contiguous_written_parts(
    operations: list[tuple[str, int]],
) -> None:
    """Parts finish in any order, fail and are taken again, or are lost in a crash: the
    primary key only moves forward, only over written parts with none missing below, rows
    count every key once, and the table is read whole (delivering its rows, or completed)
    exactly when the maximum key is reached."""
    state = SnapshotState()
    state.apply(ExecuteSnapshot("r", ("public.a",)), 1.0)
    entry = state.current()
    assert entry is not None
    state.begin(entry, [40], 40, 1.0)
    reading: list[int] = []
    for kind, arg in operations:
        if entry.status in READ_WHOLE:
            break
        before = entry.last_key[0] if entry.last_key else 0
        if kind == "plan":
            part = state.waiting(entry)
            if part is None and not entry.planned:
                start = entry.cursor[0] if entry.cursor else 0
                part = state.plan(entry, [min(40, start + arg + 1)])
            if part is not None:
                reading.append(state.take(part))
        elif kind in ("finish", "fail") and reading:
            chunk = reading.pop(arg % len(reading))
            if kind == "fail":
                state.failed(entry, chunk)
            else:
                part = next(r for r in entry.ranges if r.chunk == chunk)
                keys = part.upto[0] - (part.after[0] if part.after else 0)
                state.written(entry, chunk, keys, 0.1, 2.0)
        elif kind == "crash":
            state = decode(state.to_json()).resumed()
            entry, reading = state.tables[0], []
        after = entry.last_key[0] if entry.last_key else 0
        assert after >= before
        assert entry.rows == after  # one row per key, each counted once
        parts = entry.ranges
        assert all(a.upto == b.after for a, b in zip(parts, parts[1:], strict=False))
        assert not parts or parts[0].after == entry.last_key
        assert (entry.status in READ_WHOLE) == (after == 40)


def test_status_shows_the_parts_being_read() -> None:
    state = SnapshotState()
    state.apply(ExecuteSnapshot("r1", ("public.a",)), 1.0)
    entry = state.current()
    assert entry is not None
    state.begin(entry, [9], 9, 1.0)
    state.written(entry, state.take(state.plan(entry, [3])), 3, 0.1, 1.1)
    state.take(state.plan(entry, [6]))
    text = render_status(state)
    assert "3 rows, 1 chunks, last key [3]" in text and "reading [3]..[6] (chunk 2)" in text


def test_the_queue_is_bounded_and_its_record_stays_small() -> None:
    """Requests beyond the queue's bound are aborted whole; a full queue of the largest
    requests (filters of the longest kind on every table) still fits one Kafka record."""
    state = SnapshotState()
    longest = "x" * MAX_FILTER_BYTES
    for number in range(MAX_QUEUED_TABLES // MAX_TABLES):
        tables = tuple(f"public.t{number}_{i}" for i in range(MAX_TABLES))
        request = ExecuteSnapshot(f"r{number}", tables, dict.fromkeys(tables, longest))
        assert [n.type for n in state.apply(request, 1.0)] == ["STARTED"]
    assert len(state.pending()) == MAX_QUEUED_TABLES
    refused = state.apply(ExecuteSnapshot("one-more", ("public.extra",)), 2.0)
    assert [n.type for n in refused] == ["ABORTED"]
    assert "queue" in refused[0].additional_data["error"]
    assert len(state.pending()) == MAX_QUEUED_TABLES
    assert len(state.to_json()) < MIN_RECORD_BYTES * 3 // 4


def test_keys_requests_keep_the_progress_record_under_its_bound() -> None:
    """Review A2: every read-again request kept its keys (and, once read, their SQL) in the
    one progress record, so a few dozen of 1,000 keys outgrew a stock broker's 1 MiB and
    every leader failed to commit it in turn. The record now stays under its bound: a
    request that would pass it is refused (the data plane asks for its keys again later),
    and a finished request keeps no keys."""
    state = SnapshotState()
    long_key = "k" * (MAX_REQUEST_KEY_BYTES // MAX_KEYS - 20)  # requests of their most bytes
    accepted = refused = 0
    for number in range(40):
        keys = tuple({"id": f"{long_key}{number:04d}{i:04d}"} for i in range(MAX_KEYS))
        notes = state.apply(ExecuteSnapshot(f"k{number}", (f"public.t{number}",), keys=keys), 1.0)
        if [n.type for n in notes] == ["ABORTED"]:
            refused += 1
            assert "progress record" in notes[0].additional_data["error"]
        else:
            accepted += 1
        assert len(state.to_json()) <= RECORD_LIMIT
    assert accepted >= 4 and refused > 0
    assert RECORD_LIMIT + 1024 <= MIN_RECORD_BYTES  # any topic Tidemark makes takes it
    while (entry := state.current()) is not None:
        state.begin(entry, ["z"], MAX_KEYS, 2.0)
        entry.condition = "id IN (" + ",".join("'x'" for _ in range(MAX_KEYS)) + ")"
        state.scanned(entry, 3.0)
        assert entry.keys == [] and entry.condition is None
    assert len(state.to_json()) < 100_000
