"""The version rule and state entries as properties (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.events.visibility import PgSnapshot, Window
from processor.reconcile.versions import Action, Entry, decide, decide_row

versions = st.tuples(st.integers(0, 2**40), st.integers(0, 2**40))
values = st.one_of(st.none(), st.binary(max_size=64))


@given(versions, versions)
def test_decision_follows_version_order(incoming: tuple[int, int], stored: tuple[int, int]) -> None:
    action = decide(incoming, stored)
    if incoming > stored:
        assert action is Action.APPLY
    elif incoming == stored:
        assert action is Action.REEMIT
    else:
        assert action is Action.DROP


@given(versions)
def test_a_key_without_state_applies(version: tuple[int, int]) -> None:
    assert decide(version, None) is Action.APPLY


snapshots = st.one_of(
    st.none(),
    st.builds(
        lambda xmin, span, xip, positions: PgSnapshot(
            xmin, xmin + span, frozenset(xmin + x for x in xip if x < span), *positions
        ),
        st.integers(1, 2**40),
        st.integers(0, 50),
        st.frozensets(st.integers(0, 49), max_size=5),
        # with the WAL positions around it, or without (entries written before them)
        st.one_of(
            st.just((None, None)),
            st.integers(0, 2**60).flatmap(lambda b: st.tuples(st.just(b), st.integers(b, 2**61))),
        ),
    ),
)


@given(
    versions,
    values,
    st.one_of(st.none(), st.integers(0, 2**31)),
    st.one_of(st.none(), st.integers(1, 2**40)),
    snapshots,
    st.booleans(),
)
def test_entry_round_trips(
    version: tuple[int, int],
    value: bytes | None,
    txid: int | None,
    chunk: int | None,
    snapshot: PgSnapshot | None,
    pending: bool,
) -> None:
    """Every kind of entry: a change (with or without ``txId``), a chunk row read in a
    snapshot, a chunk row read inside a window (a chunk without a snapshot), a change
    whose row is pending (no value)."""
    if snapshot is not None and chunk is None:
        chunk = 1
    if pending:
        value, chunk, snapshot = None, None, None
    entry = Entry(version, value, txid, chunk, snapshot, pending)
    assert Entry.decode(entry.encode()) == entry


@given(versions, versions, versions)
def test_a_window_row_loses_to_any_change_from_its_window_open_on(
    low: tuple[int, int], stored: tuple[int, int], high: tuple[int, int]
) -> None:
    window = Window(low, max(high, (low[0], low[1] + 1)), (0,))
    action = decide_row(7, window, Entry(stored, b"x"))
    assert action is (Action.APPLY if stored < low else Action.DROP)
    assert decide_row(7, window, Entry(stored, b"x", chunk=7)) is Action.REEMIT
    assert decide_row(7, window, Entry(stored, b"x", chunk=8)) is Action.DROP


def test_below_its_window_a_row_loses_to_a_change_its_snapshot_did_not_see() -> None:
    """A transaction past its commit record but not yet visible when the window opened."""
    window = Window((100, 100), (200, 200), (0,), PgSnapshot(90, 150, frozenset({90})))
    assert decide_row(7, window, Entry((95, 95), b"x", txid=90)) is Action.DROP
    assert decide_row(7, window, Entry((95, 95), b"x", txid=91)) is Action.APPLY
    assert decide_row(7, window, Entry((95, 95), b"x")) is Action.APPLY  # no txId: positions
    assert decide_row(7, window, Entry((120, 120), b"x", txid=91)) is Action.DROP


@given(versions, values, st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)))
def test_a_hot_paths_encodings_are_the_entrys(
    version: tuple[int, int], value: bytes | None, txid: int | None
) -> None:
    """:meth:`Entry.encode_row` and :meth:`Entry.encode_change`, what the fused paths
    write, are the entry's own encoding."""
    if txid is None:
        assert Entry.encode_row(version, value) == Entry(version, value).encode()
    else:
        assert Entry.encode_change(version, value, txid) == Entry(version, value, txid).encode()


def test_an_entry_written_before_the_positions_reads_as_before() -> None:
    """The layout of a chunk row's entry without positions (flag 32 unset), as earlier
    versions wrote it, still reads: its snapshot has no positions."""
    old = Entry((0, 7), b"{}", 99, 7, PgSnapshot(100, 105, frozenset({101}))).encode()
    assert old[17] & 32 == 0
    entry = Entry.decode(old)
    assert entry.snapshot == PgSnapshot(100, 105, frozenset({101}))
    assert entry.snapshot.before is None and entry.value == b"{}"
    new = Entry((0, 7), b"{}", 99, 7, PgSnapshot(100, 105, frozenset({101}), 5, 9)).encode()
    assert new[17] & 32 and len(new) == len(old) + 16
