"""A chunk's rows framed into backfill records per partition, and read back as its rows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.events.chunk_records import (
    BYTES_PER_RECORD,
    ROWS_HEADER,
    ROWS_PER_RECORD,
    framed_rows,
    records,
    rows_header,
    rows_of,
)
from tidemark.core.frames import FRAMING, frame
from tidemark.core.messages import RawMessage

TAG = object()  # a chunk tag, passed through as it is

rows = st.lists(
    st.tuples(
        st.tuples(st.binary(min_size=1, max_size=20), st.binary(max_size=40)),
        st.integers(0, 3),
    ),
    max_size=60,
)


@given(rows)
def test_each_partitions_rows_come_back_in_their_order(drawn: list) -> None:
    chunk = [row for row, _ in drawn]
    partitions = [partition for _, partition in drawn]
    seen: dict[int, list[tuple[bytes, bytes]]] = {}
    for offset, (partition, count, value) in enumerate(records(chunk, partitions)):
        assert 1 <= count <= ROWS_PER_RECORD
        assert count == 1 or len(value) <= BYTES_PER_RECORD
        back = rows_of("t", partition, offset, value, TAG, framed_rows([rows_header(count)]) or b"")
        assert back is not None and len(back) == count
        assert all(m.partition == partition and m.offset == offset and m.chunk is TAG for m in back)
        seen.setdefault(partition, []).extend((m.key or b"", m.value or b"") for m in back)
    for partition in set(partitions):
        assert seen[partition] == [row for row, p in drawn if p == partition]


def test_a_large_row_goes_alone() -> None:
    big = (b"k", b"x" * BYTES_PER_RECORD)
    small = (b"s", b"y")
    framed = records([small, big, small, small], [0, 0, 0, 0])
    assert [count for _, count, _ in framed] == [1, 1, 2]


def test_a_record_without_the_header_is_one_row() -> None:
    assert framed_rows([("tidemark.chunk", b"1")]) is None
    assert framed_rows(None) is None
    assert framed_rows([(ROWS_HEADER, None)]) == b""


def test_a_record_that_is_not_its_count_of_frames_is_declined() -> None:
    value = frame([(b"k1", b"v1"), (b"k2", b"v2")], 0, 2)
    assert rows_of("t", 0, 5, value, TAG, b"2") == [
        RawMessage("t", 0, 5, b"k1", b"v1", TAG),
        RawMessage("t", 0, 5, b"k2", b"v2", TAG),
    ]
    for count in (b"1", b"3", b"", b"x", b"-2", b"\xb2", b"0" * 10):
        assert rows_of("t", 0, 5, value, TAG, count) is None
    assert rows_of("t", 0, 5, value[:-1], TAG, b"2") is None
    assert rows_of("t", 0, 5, None, TAG, b"2") is None
    assert rows_of("t", 0, 5, b"", TAG, b"0") is None
    assert len(value) == 2 * (FRAMING + 4)
