"""Signal-table windows in the reconciler: rows wait in RocksDB-style state, then DDD-3's rule.

A model of DDD-3's watermark mode drives the real :class:`Reconciler`: single-row
transactions commit in order, a chunk is read between its window-open and
window-close rows (whose positions bound it), and the change topic and the
backfill topic are consumed in any interleaving and any batching, with the
state committed between batches (a crash-free run of the commit protocol).
The output must end equal to the source (I1) and never go back per key (I3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import patch

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.events.chunk_tag import ChunkTag
from processor.events.visibility import PgSnapshot, Window
from processor.reconcile import window_buffer
from processor.reconcile.batch import Batch, Reconciler
from processor.reconcile.envelopes import WINDOW_INDEXED
from state.memory import MemoryPartitionStore
from state.rocksdb import RocksDBBackend
from state.store import Checkpoint, PartitionStore
from tests.peak import peak_bytes
from tests.unit.probe import TOPIC, probe_event
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.messages import RawMessage
from tidemark.core.topics import backfill_topic

CONFIG = Config(processor=ProcessorConfig(pipeline="p"))
BACKFILL = backfill_topic("p", TOPIC)
OUT = "tidemark.reconciled.public.probe"


def row(key: int, value: int) -> dict[str, Any]:
    return {
        "id": key,
        "name": str(value),
        "amount": None,
        "at": None,
        "u": None,
        "j": None,
        "d": None,
    }


def change_message(offset: int, key: int, value: int | None, position: int) -> RawMessage:
    op = "u" if value is not None else "d"
    event = probe_event(
        op,
        row(key, value) if value is not None else None,
        f'["{position}","{position}"]',
        position,  # the transaction id grows with the position, as PostgreSQL's do
        position,
    )
    return RawMessage(TOPIC, 0, offset, orjson.dumps({"id": key}), orjson.dumps(event))


def chunk_message(offset: int, key: int, value: int, chunk: int, window: Window) -> RawMessage:
    event = probe_event("r", row(key, value))
    event["source"].update(snapshot="incremental", sequence=None, txId=None, lsn=None)
    tag = ChunkTag(chunk, window, "req")
    return RawMessage(BACKFILL, 0, offset, orjson.dumps({"id": key}), orjson.dumps(event), tag)


class Partition:
    """One input partition's store and what the reconciler emitted, batch after batch."""

    def __init__(self, store: PartitionStore | None = None) -> None:
        self.store = store or MemoryPartitionStore()
        self.reconciler = Reconciler(CONFIG)
        self.reached = 0
        self.emitted: list[tuple[int, int | None, str]] = []
        self.last = Batch()

    def batch(self, *messages: RawMessage) -> None:
        groups: dict[tuple[str, int], list[RawMessage]] = {}
        for msg in messages:
            groups.setdefault((msg.topic, msg.partition), []).append(msg)
            if msg.topic == TOPIC:
                self.reached = msg.offset + 1
        batch = self.last = self.reconciler.decide(
            groups, {(TOPIC, 0): self.store}, reached=lambda _tp: self.reached
        )
        for state in batch.states.values():
            self.store.commit(state.updates, Checkpoint(self.reached))
        for topic, _p, key, value in batch.records:
            assert topic == OUT
            if value is None:
                continue
            event = orjson.loads(value)
            after = event["after"]
            name = None if after is None else int(after["name"])
            self.emitted.append(
                (orjson.loads(key or b"{}")["id"], name, event["tidemark"]["reason"])
            )

    def restart(self) -> None:
        """A new process: the reconciler's memory is gone, the store is not."""
        self.reconciler = Reconciler(CONFIG)


def test_a_row_waits_until_its_partition_passes_the_window_and_a_change_inside_drops_it() -> None:
    part = Partition()
    part.batch(change_message(0, 1, 10, position=100), change_message(1, 2, 20, position=110))
    # Window (120, 150); the chunk read 1 -> 10, 2 -> 20, 3 -> 30 in between. Three changes
    # lie below the close: the partition passes the window at offset 3... of which the
    # data plane has read two.
    window = Window((120, 120), (150, 150), (3,))
    part.batch(
        chunk_message(0, 1, 10, 7, window),
        chunk_message(1, 2, 20, 7, window),
        chunk_message(2, 3, 30, 7, window),
    )
    assert part.emitted == [(1, 10, "applied"), (2, 20, "applied")]  # nothing decided yet
    assert part.reconciler.windows.count(TOPIC) == 3
    part.restart()  # the buffer is state: a new process finds it
    # Key 2 changes inside the window (position 130): its buffered row is dropped.
    part.batch(change_message(2, 2, 21, position=130))
    assert part.emitted[2:] == [(2, 21, "applied"), (1, 10, "snapshot"), (3, 30, "snapshot")]
    assert part.reconciler.windows.count(TOPIC) == 0
    assert part.store.keys(b"w") == []
    # A change after the window still wins over the row.
    part.batch(change_message(3, 3, 31, position=160))
    assert part.emitted[-1] == (3, 31, "applied")


def test_a_row_whose_partition_passed_the_window_is_decided_at_once() -> None:
    part = Partition()
    part.batch(change_message(0, 1, 10, position=100), change_message(1, 1, 11, position=130))
    window = Window((120, 120), (150, 150), (2,))
    part.batch(chunk_message(0, 1, 10, 3, window), chunk_message(1, 2, 5, 3, window))
    # Key 1 changed inside the window: dropped; key 2 never changed: emitted.
    assert part.emitted[2:] == [(2, 5, "snapshot")]
    assert part.reconciler.windows.count(TOPIC) == 0
    # A later change of key 2 wins; a replayed older change does not go back.
    part.batch(change_message(2, 2, 6, position=170))
    part.batch(change_message(0, 1, 10, position=100))
    assert part.emitted[3:] == [(2, 6, "applied")]


def test_a_later_chunk_replaces_an_earlier_buffered_row_of_the_same_key() -> None:
    part = Partition()
    first = Window((10, 10), (20, 20), (5,))
    second = Window((30, 30), (40, 40), (6,))
    part.batch(chunk_message(0, 1, 1, 1, first), chunk_message(1, 1, 2, 2, second))
    part.batch(chunk_message(0, 1, 1, 1, first))  # the earlier row replayed: no effect
    assert part.reconciler.windows.count(TOPIC) == 1
    part.batch(*(change_message(i, 9, i, position=50 + i) for i in range(6)))
    assert [e for e in part.emitted if e[0] == 1] == [(1, 2, "snapshot")]


def test_a_lagging_partition_releases_its_rows_a_page_per_batch() -> None:
    part = Partition()
    window = Window((10, 10), (20, 20), (1,))
    part.batch(*(chunk_message(i, i, i, 1, window) for i in range(5)))
    assert part.reconciler.windows.count(TOPIC) == 5
    with patch.object(window_buffer, "PAGE_ROWS", 2):
        part.batch(change_message(0, 9, 9, position=30))  # the partition passes the window
        assert part.reconciler.windows.count(TOPIC) == 3
        part.restart()  # the rest is found again
        part.batch()
        assert part.reconciler.windows.count(TOPIC) == 1
        part.batch()
    assert part.reconciler.windows.count(TOPIC) == 0
    assert sorted(e for e in part.emitted if e[0] != 9) == [(i, i, "snapshot") for i in range(5)]
    assert part.store.keys(b"w") == [] and part.store.keys(b"e") == []


def test_rows_buffered_without_due_entries_are_indexed_then_released() -> None:
    """State written by a version that kept no due entries: its rows are released too."""
    part = Partition()
    window = Window((10, 10), (20, 20), (1,))
    part.batch(*(chunk_message(i, i, i, 1, window) for i in range(5)))
    older = {key: None for key in part.store.keys(b"e")} | {WINDOW_INDEXED: None}
    part.store.commit(older, Checkpoint(0))
    part.restart()
    with patch.object(window_buffer, "PAGE_ROWS", 2):
        part.batch(change_message(0, 9, 9, position=30))
        part.batch(chunk_message(5, 7, 7, 1, Window((10, 10), (40, 40), (2,))))  # held meanwhile
        for _ in range(4):
            part.batch()
        assert part.reconciler.windows.count(TOPIC) == 1  # key 7 waits for offset 2
        part.batch(change_message(1, 9, 10, position=50))
    assert part.reconciler.windows.count(TOPIC) == 0
    assert sorted(e for e in part.emitted if e[0] != 9) == [
        (i, i, "snapshot") for i in (0, 1, 2, 3, 4, 7)
    ]
    assert part.store.get(WINDOW_INDEXED) == b""


def test_releasing_a_window_buffer_keeps_memory_flat(tmp_path: Path) -> None:
    """A page of rows at a time: the peak while releasing does not grow with the buffer."""
    small, large = (release_peak(tmp_path / str(rows), rows) for rows in (2_000, 8_000))
    assert large < 1.5 * small, (small, large)


def release_peak(path: Path, rows: int) -> int:
    """Python's peak memory while a new process releases ``rows`` buffered rows."""
    store = RocksDBBackend(path).open(TOPIC, 0)
    stores = {(TOPIC, 0): store}
    window = Window((10, 10), (20, 20), (1,))

    def run(reconciler: Reconciler, held: list[RawMessage], reached: int) -> int:
        batch = reconciler.decide({(BACKFILL, 0): held}, stores, reached=lambda _tp: reached)
        for state in batch.states.values():
            store.commit(state.updates, Checkpoint(reached))
        return len(batch.records)

    holding = Reconciler(CONFIG)
    for start in range(0, rows, 1_000):
        held = [chunk_message(i, i, i, 1, window) for i in range(start, start + 1_000)]
        assert run(holding, held, 0) == 0
    releasing = Reconciler(CONFIG)  # a new process: nothing of the buffer in memory

    def release_all() -> None:
        emitted = run(releasing, [], 1)
        while releasing.windows.count(TOPIC):
            emitted += run(releasing, [], 1)
        assert emitted == rows

    with patch.object(window_buffer, "PAGE_ROWS", 500):
        return peak_bytes(release_all)


def test_a_window_without_an_end_for_the_partition_is_a_dead_letter() -> None:
    reconciler = Reconciler(CONFIG)
    window = Window((1, 1), (2, 2), (4,))
    msg = chunk_message(0, 1, 1, 1, window)._replace(partition=1)
    batch = reconciler.decide({(BACKFILL, 1): [msg]}, {(TOPIC, 1): MemoryPartitionStore()})
    assert [e.kind for e in batch.dead_letters] == ["backfill-headers"]


# -- the model ---------------------------------------------------------------------------


@dataclass
class Source:
    """Committed rows, the change log (one partition), and the chunks with their windows.

    A transaction's id is its position. A commit can be *late*: in the log (below
    the next window's open row) but visible only after that window's chunk is read,
    as PostgreSQL makes a transaction visible a moment after its commit record.
    """

    rows: dict[int, int] = field(default_factory=dict)
    position: int = 0
    log: list[tuple[int, int | None, int]] = field(default_factory=list)
    chunks: list[list[tuple[int, int, int, Window]]] = field(default_factory=list)

    def commit(self, key: int, value: int | None) -> None:
        self.log_only(key, value)
        self.apply(key, value)

    def log_only(self, key: int, value: int | None) -> int:
        self.position += 10
        self.log.append((key, value, self.position))
        return self.position

    def apply(self, key: int, value: int | None) -> None:
        if value is None:
            self.rows.pop(key, None)
        else:
            self.rows[key] = value

    def watermark(self) -> int:
        self.position += 10  # the signal table's row: in the stream, not in this topic
        return self.position


@st.composite
def sources(draw: st.DrawFn) -> Source:
    """Writes, and chunks read inside windows with writes before and after the read; a
    window with a late commit carries the chunk's snapshot, in which it is in progress."""
    keys = draw(st.integers(1, 5))
    values = st.one_of(st.none(), st.integers(0, 99))
    source = Source()
    for _ in range(draw(st.integers(1, 12))):
        for _ in range(draw(st.integers(0, 4))):
            source.commit(draw(st.integers(0, keys - 1)), draw(values))
        if draw(st.booleans()):
            continue
        late: tuple[int, int | None, int] | None = None
        if draw(st.booleans()):
            key, value = draw(st.integers(0, keys - 1)), draw(values)
            late = (key, value, source.log_only(key, value))
        low = source.watermark()
        for _ in range(draw(st.integers(0, 3))):
            key = draw(st.integers(0, keys - 1))
            if late is None or key != late[0]:  # the late commit still holds the row's lock
                source.commit(key, draw(values))
        read = dict(source.rows)
        xmax = source.position + 1
        snapshot = None
        if late is not None:
            snapshot = PgSnapshot(late[2], xmax, frozenset({late[2]}))
            source.apply(late[0], late[1])
        elif draw(st.booleans()):
            snapshot = PgSnapshot(xmax, xmax)
        for _ in range(draw(st.integers(0, 3))):
            source.commit(draw(st.integers(0, keys - 1)), draw(values))
        high = source.watermark()
        window = Window((low, low), (high, high), (len(source.log),), snapshot)
        number = len(source.chunks) + 1
        source.chunks.append([(k, v, number, window) for k, v in sorted(read.items())])
    for _ in range(draw(st.integers(0, 3))):
        source.commit(draw(st.integers(0, keys - 1)), draw(values))
    return source


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_window_rows_and_changes_converge_and_stay_monotone(data: st.DataObject) -> None:
    source = data.draw(sources())
    changes = [change_message(i, k, v, p) for i, (k, v, p) in enumerate(source.log)]
    rows = [
        chunk_message(i, k, v, n, w)
        for i, (k, v, n, w) in enumerate(r for chunk in source.chunks for r in chunk)
    ]
    part = Partition()
    with patch.object(window_buffer, "PAGE_ROWS", 2):  # batches release a page of rows
        while changes or rows:
            take = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
            batch = changes[: take[0]] + rows[: take[1]]
            changes, rows = changes[take[0] :], rows[take[1] :]
            if data.draw(st.booleans()):
                part.restart()
            part.batch(*batch)
        for _ in range(len(source.chunks) * 5):
            part.batch()  # the pages left
    assert part.reconciler.windows.count(TOPIC) == 0
    last: dict[int, int | None] = {}
    for key, value, _reason in part.emitted:
        last[key] = value
    assert {k: v for k, v in last.items() if v is not None} == source.rows  # I1
    # I3: per key, emitted values follow the key's own history (a chunk row is one of them).
    history: dict[int, list[int | None]] = {}
    for key, value, _p in source.log:
        history.setdefault(key, [None]).append(value)
    for key in last:
        chain, at = history.get(key, [None]), 0
        for _k, value, _r in (e for e in part.emitted if e[0] == key):
            while at < len(chain) and chain[at] != value:
                at += 1
            assert at < len(chain), (key, part.emitted, source)
