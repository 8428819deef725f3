"""The read-only snapshot rules against a simulated PostgreSQL (hypothesis, model-based).

The model: concurrent transactions with row locks and 64-bit ids that cross a
32-bit epoch (Debezium reports the low 32 bits), a write-ahead log whose positions
version the changes as Debezium's ``source.sequence`` does (the last commit's LSN,
the change's LSN), a change log in commit order, and chunk reads at arbitrary moments,
each with the ``pg_snapshot`` PostgreSQL would give it and the WAL positions around it.
Between transactions, the database may run through 2^31 transaction ids or more (a
busy database over days): a 32-bit id is then ambiguous, and only positions place it.
Change events and chunk rows then arrive in any interleaving that keeps each stream's
own order, exactly what two Kafka topics allow. The ``debezium-upsert`` rules, and the
``upsert`` rules on flattened rows that carry their transaction id (in histories
without the long runs: such rows carry no position), must give, per key: the final row
of the database (I1), and emitted versions that never go back in commit order (I3,
which implies I2: no chunk row over a newer change).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from processor.events.change import Change
from processor.events.json_codec import JsonCodec
from processor.events.visibility import PgSnapshot
from processor.reconcile.envelopes import Step, debezium_upsert, upsert
from state.batch import BatchState
from state.memory import MemoryPartitionStore
from state.store import Checkpoint

ROWS = JsonCodec("debezium-upsert")
START_XID = (1 << 32) - 6  # the ids cross an epoch while the test runs


@dataclass(frozen=True)
class Arrival:
    """A change event or a chunk row as the processor receives it."""

    key: int
    value: int | None
    #: Position in commit order: (commit index, statement) for a change;
    #: (commits visible, a large number) for a chunk row.
    time: tuple[int, int]
    version: tuple[int, int] = (0, 0)
    txid: int | None = None
    chunk: int | None = None
    snapshot: PgSnapshot | None = None

    def change(self) -> Change:
        after = None if self.value is None else {"id": self.key, "v": self.value}
        op = "r" if self.chunk is not None else ("d" if after is None else "u")
        return Change(
            orjson.dumps({"id": self.key}),
            op,
            None,
            after,
            self.version,
            connector="postgresql",
            txid=self.txid,
            chunk=self.chunk,
            read_in=self.snapshot,
        )


@dataclass
class Database:
    """Committed rows, open transactions with their locks, the log, the chunk reads."""

    rows: dict[int, int] = field(default_factory=dict)
    next_xid: int = START_XID
    #: Each open transaction's writes: key, value and the write's WAL position.
    open: dict[int, list[tuple[int, int | None, int]]] = field(default_factory=dict)
    #: The next WAL position, and where the last commit record is.
    wal: int = 1000
    last_commit: int = 0
    locks: dict[int, int] = field(default_factory=dict)
    commits: int = 0
    log: list[Arrival] = field(default_factory=list)
    chunks: list[list[Arrival]] = field(default_factory=list)

    def begin(self) -> None:
        self.open[self.next_xid] = []
        self.next_xid += 1

    def write(self, xid: int, key: int, value: int | None) -> None:
        if self.locks.get(key, xid) != xid:
            return  # the row is locked by another transaction: this write waits; skip it
        self.locks[key] = xid
        self.open[xid].append((key, value, self.wal))
        self.wal += 1

    def commit(self, xid: int) -> None:
        self.commits += 1
        for statement, (key, value, lsn) in enumerate(self.open.pop(xid)):
            if value is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = value
            time, version = (self.commits, statement), (self.last_commit, lsn)
            self.log.append(Arrival(key, value, time, version, xid % (1 << 32)))
        self.last_commit, self.wal = self.wal, self.wal + 1
        self.locks = {k: x for k, x in self.locks.items() if x != xid}

    def run_through_ids(self, count: int) -> None:
        """Other transactions, ``count`` of them, with nothing open meanwhile (PostgreSQL
        keeps no transaction open across 2^31 others)."""
        assert not self.open
        self.next_xid += count

    def read_chunk(self, keys: range) -> None:
        xmin = min(self.open, default=self.next_xid)
        snapshot = PgSnapshot(xmin, self.next_xid, frozenset(self.open), self.wal, self.wal)
        number = len(self.chunks) + 1
        time = (self.commits, 1 << 30)
        self.chunks.append(
            [
                Arrival(k, self.rows[k], time, chunk=number, snapshot=snapshot)
                for k in keys
                if k in self.rows
            ]
        )


@st.composite
def histories(draw: st.DrawFn, long: bool = False) -> Database:
    """A history; ``long``: the database may run through 2^31 ids or more between two."""
    keys = draw(st.integers(1, 5))
    db = Database()
    steps = ["begin", "write", "write", "commit", "chunk"] + (["long"] if long else [])
    for _ in range(draw(st.integers(1, 60))):
        step = draw(st.sampled_from(steps))
        if step == "long":
            if not db.open:
                db.run_through_ids(draw(st.integers((1 << 31) - 8, 1 << 34)))
        elif step == "begin" or (step in ("write", "commit") and not db.open):
            db.begin()
        elif step == "write":
            xid = draw(st.sampled_from(sorted(db.open)))
            value = draw(st.one_of(st.none(), st.integers(0, 99)))
            db.write(xid, draw(st.integers(0, keys - 1)), value)
        elif step == "commit":
            db.commit(draw(st.sampled_from(sorted(db.open))))
        else:
            low = draw(st.integers(0, keys - 1))
            db.read_chunk(range(low, low + draw(st.integers(1, keys))))
    for xid in sorted(db.open):
        db.commit(xid)
    return db


@st.composite
def arrivals(draw: st.DrawFn, db: Database) -> list[Arrival]:
    """The log and the chunks merged in any order that keeps each stream's own order."""
    chunk_rows = [row for chunk in db.chunks for row in chunk]
    merged: list[Arrival] = []
    log, rows = list(db.log), chunk_rows
    while log or rows:
        take_log = bool(log) and (not rows or draw(st.booleans()))
        merged.append(log.pop(0) if take_log else rows.pop(0))
    return merged


def id_taken_again(stream: list[Arrival]) -> bool:
    """Whether a change, committed before a chunk's snapshot, arrives after the chunk's
    row while its 32-bit id is that of a transaction the snapshot saw in progress: the
    database ran through 2^32 ids between the two, and the id came round again. Neither
    the id nor the change's WAL position can tell these two transactions apart, and the
    rule takes the change for the one in progress (a documented limit: Guarantees,
    transaction-id wraparound)."""
    for i, row in enumerate(stream):
        snapshot = row.snapshot
        if snapshot is None:
            continue
        for change in stream[i + 1 :]:
            if change.txid is None or change.time[0] > row.time[0]:
                continue  # a row, or committed after the snapshot
            top = snapshot.xmax - 1
            if top - ((top - change.txid) & ((1 << 32) - 1)) in snapshot.xip:
                return True
    return False


@pytest.mark.parametrize("step", [debezium_upsert, upsert], ids=["debezium-upsert", "upsert"])
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_snapshot_rows_and_changes_converge_and_stay_monotone(
    step: Step, data: st.DataObject
) -> None:
    # The flattened rows of upsert carry no WAL position: they meet no long history.
    db = data.draw(histories(long=step is debezium_upsert))
    stream = data.draw(arrivals(db))
    assume(not id_taken_again(stream))
    store = MemoryPartitionStore()
    emitted: dict[int, list[Arrival]] = {}
    last: dict[int, object] = {}
    batch = data.draw(st.integers(1, 6))
    for start in range(0, len(stream), batch):
        state = BatchState(store)
        for arrival in stream[start : start + batch]:
            emit = step(arrival.change(), state, ROWS)
            if emit is not None:
                emitted.setdefault(arrival.key, []).append(arrival)
                last[arrival.key] = emit.after
        store.commit(state.updates, Checkpoint(start + batch))
    # I1: every key ends as the database has it.
    final = {k: v for k, v in last.items() if v is not None}
    assert final == {k: {"id": k, "v": v} for k, v in db.rows.items()}
    # I3: per key, what is emitted never goes back in commit order.
    for key, history in emitted.items():
        times = [a.time for a in history]
        assert times == sorted(times), (key, history)


def test_a_chunk_row_read_before_a_commit_never_overwrites_it() -> None:
    """The case DBLog exists for: the chunk is read, the row changes, the chunk arrives late."""
    db = Database()
    db.begin()
    db.write(START_XID, 1, 10)
    db.commit(START_XID)
    db.read_chunk(range(0, 3))  # sees 10
    db.begin()
    db.write(START_XID + 1, 1, 20)
    db.commit(START_XID + 1)
    state = BatchState(MemoryPartitionStore())
    outputs = []
    for arrival in [*db.log, *db.chunks[0]]:  # the chunk arrives after both changes
        emit = debezium_upsert(arrival.change(), state, ROWS)
        outputs.append(None if emit is None else emit.after)
    assert outputs == [{"id": 1, "v": 10}, {"id": 1, "v": 20}, None]


def test_a_change_after_the_xid_epoch_wraps_is_not_taken_for_an_old_one() -> None:
    """Debezium's 32-bit txId of 2 after the wrap is 2^32 + 2, newer than the chunk."""
    db = Database()
    db.begin()
    db.write(START_XID, 1, 10)
    db.commit(START_XID)
    db.read_chunk(range(0, 3))  # read before the wrap: xmax = 2^32 - 5
    for _ in range(8):  # transactions until the ids pass 2^32
        db.begin()
    late = max(db.open)
    assert late >= 1 << 32 and late % (1 << 32) < 10
    db.write(late, 1, 30)
    db.commit(late)
    state = BatchState(MemoryPartitionStore())
    outputs = []
    for arrival in [db.log[0], *db.chunks[0], db.log[-1]]:
        emit = debezium_upsert(arrival.change(), state, ROWS)
        outputs.append(None if emit is None else emit.after)
    assert outputs == [{"id": 1, "v": 10}, {"id": 1, "v": 10}, {"id": 1, "v": 30}]


def test_a_change_2_31_ids_after_a_chunk_is_applied_and_a_row_2_31_ids_later_too() -> None:
    """A backfilled key untouched while the database runs through 2^31 ids and more: its
    next change is newer than the chunk (the extension of its 32-bit id alone took it for
    one 2^32 older, visible in the chunk, and dropped it), and a second backfill's row
    is newer than that change (taken for one in the chunk's future, it was dropped)."""
    db = Database()
    db.begin()
    db.write(START_XID, 1, 10)
    db.commit(START_XID)
    db.read_chunk(range(0, 3))
    db.run_through_ids((1 << 31) + 10)
    db.begin()
    late = max(db.open)
    db.write(late, 1, 20)
    db.commit(late)
    db.run_through_ids((1 << 31) + 10)
    db.read_chunk(range(0, 3))
    db.begin()
    db.write(max(db.open), 1, 30)  # changed again, after the second chunk: it must win
    db.commit(max(db.open))
    state = BatchState(MemoryPartitionStore())
    outputs = []
    for arrival in [db.log[0], *db.chunks[0], db.log[1], *db.chunks[1], db.log[2]]:
        emit = debezium_upsert(arrival.change(), state, ROWS)
        outputs.append(None if emit is None else emit.after)
    assert outputs == [{"id": 1, "v": v} for v in (10, 10, 20, 20, 30)]
