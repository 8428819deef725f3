"""Visibility of a transaction in a pg_snapshot, 32-bit ids extended by epoch (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import SnapshotFormatError
from processor.events.visibility import NEWER_OPEN_IDS, PgSnapshot

EPOCH = 1 << 32


@st.composite
def snapshots(draw: st.DrawFn) -> PgSnapshot:
    xmin = draw(st.integers(3, 2**40))
    xmax = xmin + draw(st.integers(0, 1000))
    xip = draw(st.frozensets(st.integers(xmin, max(xmin, xmax - 1)), max_size=5))
    return PgSnapshot(xmin, xmax, frozenset(x for x in xip if x < xmax))


def test_the_text_form_round_trips() -> None:
    snapshot = PgSnapshot.parse("795:799:795,797")
    assert snapshot == PgSnapshot(795, 799, frozenset({795, 797}))
    assert str(snapshot) == "795:799:795,797"
    assert PgSnapshot.parse("10:10:") == PgSnapshot(10, 10)


@pytest.mark.parametrize("text", ["", "1:2", "a:b:", "5:3:", "1:5:7", "1:5:0"])
def test_malformed_text_is_refused(text: str) -> None:
    with pytest.raises(SnapshotFormatError):
        PgSnapshot.parse(text)


def test_the_rule() -> None:
    snapshot = PgSnapshot.parse("795:799:795,797")
    assert snapshot.visible(794)  # below xmin: committed before
    assert not snapshot.visible(795)  # in progress
    assert snapshot.visible(796)
    assert not snapshot.visible(797)
    assert snapshot.visible(798)
    assert not snapshot.visible(799)  # at or past xmax: not yet
    assert not snapshot.visible(5000)


@given(snapshots(), st.integers(-(2**31) + 1, 2**31 - 1))
def test_a_32_bit_id_is_extended_into_the_snapshots_epoch(
    snapshot: PgSnapshot, distance: int
) -> None:
    xid = snapshot.xmax + distance
    if xid < 3:
        return
    assert snapshot.extend(xid % EPOCH) == xid
    expected = xid < snapshot.xmin or (xid < snapshot.xmax and xid not in snapshot.xip)
    assert snapshot.visible(xid % EPOCH) is expected


@given(snapshots())
def test_encoding_round_trips(snapshot: PgSnapshot) -> None:
    raw = b"pad" + snapshot.encode() + b"tail"
    decoded, end = PgSnapshot.decode(raw, 3)
    assert decoded == snapshot and raw[end:] == b"tail"


@st.composite
def positioned(draw: st.DrawFn) -> PgSnapshot:
    """A snapshot with the WAL insert positions read before and after it."""
    snapshot = draw(snapshots())
    before = draw(st.integers(0, 2**60))
    after = before + draw(st.integers(0, 10_000))
    return PgSnapshot(snapshot.xmin, snapshot.xmax, snapshot.xip, before, after)


def test_the_positions_ride_along_in_the_text_form() -> None:
    snapshot = PgSnapshot.parse("795:799:795,797@1000:1064")
    assert snapshot == PgSnapshot(795, 799, frozenset({795, 797}), 1000, 1064)
    assert str(snapshot) == "795:799:795,797@1000:1064"
    assert PgSnapshot.parse(str(snapshot)) == snapshot
    for text in ("1:2:@5", "1:2:@a:b", "1:2:@9:5", "1:2:@-1:5"):
        with pytest.raises(SnapshotFormatError):
            PgSnapshot.parse(text)


@given(positioned())
def test_a_positioned_encoding_round_trips(snapshot: PgSnapshot) -> None:
    raw = b"pad" + snapshot.encode() + b"tail"
    decoded, end = PgSnapshot.decode(raw, 3, positioned=True)
    assert decoded == snapshot and raw[end:] == b"tail"


@given(positioned(), st.integers(0, 2 * NEWER_OPEN_IDS), st.data())
def test_a_change_is_placed_exactly_whatever_its_distance_in_ids(
    taken: PgSnapshot, newer: int, data: st.DataObject
) -> None:
    """A change written before the snapshot (its id assigned before it, maybe 2^40 ids
    earlier, maybe one of the ``newer`` ids above ``xmax`` still open), while it was
    taken, or after it (maybe 2^40 ids later), with the 32-bit id Debezium reports:
    visible exactly when its 64-bit id is in the snapshot as PostgreSQL took it."""
    snapshot = taken.with_next_xid(taken.xmax + newer)
    if snapshot.before is None or snapshot.after is None:
        assert newer > NEWER_OPEN_IDS
        return
    if taken.xmax <= 3:
        return
    when = data.draw(st.sampled_from(["before", "while", "after"]))
    if when == "before":
        lsn = data.draw(st.integers(0, snapshot.before - 1)) if snapshot.before else None
        opened = sorted(taken.xip) + list(range(taken.xmax, taken.xmax + newer))
        open_ids = st.sampled_from(opened) if opened else st.nothing()
        xid = data.draw(st.integers(3, taken.xmax - 1) | open_ids)
    elif when == "after":
        lsn = data.draw(st.integers(snapshot.after, 2**62))
        open_ids = st.sampled_from(sorted(snapshot.xip)) if snapshot.xip else st.nothing()
        xid = data.draw(st.integers(snapshot.xmax, snapshot.xmax + 2**40) | open_ids)
    else:
        if snapshot.after == snapshot.before:
            return
        lsn = data.draw(st.integers(snapshot.before, snapshot.after - 1))
        xid = snapshot.xmax + data.draw(st.integers(-(2**31) + 1, 2**31 - 1))
        if xid < 3:
            return
    if lsn is None:
        return
    # An id of 2^32 or more before one still in progress reads as that one: left out.
    aliases = {x % EPOCH for x in snapshot.xip if x != xid}
    if when == "before" and xid % EPOCH in aliases:
        return
    expected = xid < taken.xmin or (xid < taken.xmax and xid not in taken.xip)
    assert snapshot.visible(xid % EPOCH, lsn) is expected


@given(
    snapshots(),
    st.integers(0, 2 * NEWER_OPEN_IDS),
    st.integers(-(2**31) + 1 + 2 * NEWER_OPEN_IDS, 2**31 - 1),
)
def test_the_next_id_changes_no_visibility(taken: PgSnapshot, newer: int, distance: int) -> None:
    """Raising ``xmax`` keeps every id's visibility. A 32-bit id is extended around
    ``xmax``, so the raise moves the window of ids it reads exactly by as many ids: one
    2^31 ids before the snapshot, less the raise, is ambiguous either way, and left out."""
    xid = taken.xmax + distance
    if xid < 3:
        return
    raised = taken.with_next_xid(taken.xmax + newer)
    assert raised.xmax == taken.xmax + (newer if newer <= NEWER_OPEN_IDS else 0)
    assert raised.visible(xid % EPOCH) is taken.visible(xid % EPOCH)


def test_an_open_transaction_newer_than_every_completed_one_is_not_in_the_snapshot() -> None:
    """PostgreSQL's ``xmax`` is the newest completed id plus one: transaction 749, open,
    with its change written before the snapshot, is in no ``xip`` of ``749:749:``. As read
    (taken in a backfill under load), the change was placed in the chunk, and the chunk's
    older row won over it."""
    taken = PgSnapshot(749, 749, frozenset(), before=26_715_224, after=26_715_224)
    assert taken.visible(749, 26_715_223)  # the snapshot alone misplaces it
    snapshot = taken.with_next_xid(750)
    assert snapshot == PgSnapshot(749, 750, frozenset({749}), 26_715_224, 26_715_224)
    assert not snapshot.visible(749, 26_715_223)
    assert snapshot.visible(748, 26_715_223)


def test_too_many_newer_open_ids_leave_the_positions_out() -> None:
    taken = PgSnapshot(100, 100, frozenset(), before=7_000, after=7_000)
    snapshot = taken.with_next_xid(100 + NEWER_OPEN_IDS + 1)
    assert snapshot == PgSnapshot(100, 100, frozenset())
    assert not snapshot.visible(150, 6_000)  # open: placed by its id alone, near xmax


def test_the_review_s_case_a_change_2_31_ids_after_a_backfill_is_not_in_it() -> None:
    """A snapshot at xid 5e9: a change 2^31 + 10 ids later is not in it (read without its
    position, its 32-bit id is taken for one 2^32 earlier); a change 2^31 + 10 ids older,
    in state when a second backfill reads the key, is in that backfill's snapshot."""
    xmax = 5_000_000_000
    snapshot = PgSnapshot(xmax, xmax, frozenset(), before=7_000, after=7_000)
    later = (xmax + 2**31 + 10) % EPOCH
    assert snapshot.visible(later)  # the extension alone: wrong
    assert not snapshot.visible(later, lsn=9_000)
    older = (xmax - 2**31 - 10) % EPOCH
    assert not snapshot.visible(older)  # the extension alone: wrong
    assert snapshot.visible(older, lsn=5_000)
