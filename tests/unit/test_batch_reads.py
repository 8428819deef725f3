"""Batch reads: what a batch that read chunk rows records, and how it reads it back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.events.visibility import Window
from processor.reconcile.batch_reads import READS_KEY, BatchReads
from tests.unit.test_window_buffer import TOPIC, Partition, change_message, chunk_message

SPANS = st.none() | st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)).map(
    lambda s: (min(s), max(s))
)


@given(SPANS, SPANS)
def test_reads_read_back_as_written(changes: object, backfill: object) -> None:
    reads = BatchReads(changes, backfill)  # type: ignore[arg-type]
    assert BatchReads.decode(reads.encode()) == reads


@given(st.binary(max_size=40) | st.sampled_from([b'{"changes":[2,1],"backfill":null}', b"[]"]))
def test_a_record_it_cannot_have_written_reads_as_none(stored: bytes) -> None:
    decoded = BatchReads.decode(stored)
    assert decoded is None or decoded.encode() == stored


def test_a_batch_records_its_reads_only_where_rows_met_changes_and_removes_them_last() -> None:
    part = Partition()
    part.batch(change_message(0, 1, 10, position=100), change_message(1, 2, 20, position=110))
    assert part.last.reads == {}  # changes alone decide the same however a replay splits them
    window = Window((120, 120), (150, 150), (4,))
    part.batch(change_message(2, 1, 11, 115), chunk_message(0, 3, 30, 7, window))
    assert part.last.reads == {(TOPIC, 0): BatchReads((2, 2), (0, 0))}
    assert list(part.last.states[(TOPIC, 0)].updates.items())[-1] == (READS_KEY, None)
    # The row waits for offset 4; the change that reaches it releases the row: that batch
    # read no backfill record, and its decisions still depend on where it stopped.
    part.batch(change_message(3, 1, 12, 160))
    assert part.last.reads == {(TOPIC, 0): BatchReads((3, 3), None)}
    assert part.emitted[-1] == (3, 30, "snapshot")
