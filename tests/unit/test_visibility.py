"""Visibility of a transaction in a pg_snapshot, 32-bit ids extended by epoch (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import SnapshotFormatError
from processor.events.visibility import PgSnapshot

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
