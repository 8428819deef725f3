"""The sink's gap detector (review A7): records of a reconciled topic gone before the
table read them. The embedded broker neither compacts nor deletes records, so these
cases are built here; ``tests/integration/test_sink.py`` runs a made-again topic and a
sink that lags past the retention."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spark_sink.gaps import FirstUnread, Partition, gap, needs_first_unread, unread_age_ms
from spark_sink.reader import plan

HOUR = 3_600_000
NOW = 1_000 * HOUR
DAY = 24 * HOUR


def part(committed: int | None, start: int = 0, end: int = 100, since: int | None = None):
    return Partition(0, committed, start, end, since)


def test_a_table_that_never_committed_reads_from_the_start_without_a_gap() -> None:
    p = part(None, start=40, since=None)
    assert gap("t", p, NOW, DAY) is None
    assert not needs_first_unread(p, NOW, DAY)
    assert plan("t", {}, {0: 100}, 1000, {0: 40})[0].start == 40


def test_a_topic_made_again_below_the_tables_offsets_cannot_be_rebuilt_from() -> None:
    found = gap("t", part(150, end=20, since=NOW), NOW, DAY)
    assert found is not None and not found.rebuildable
    assert "made again" in found.reason and "t[0]" in found.reason


def test_records_deleted_past_the_tables_offsets_cannot_be_rebuilt_from() -> None:
    found = gap("t", part(30, start=50, since=NOW), NOW, None)
    assert found is not None and not found.rebuildable
    assert "30 to 50" in found.reason


def test_unread_records_younger_than_the_retention_are_no_gap() -> None:
    p = part(50, since=NOW - DAY + 1)
    assert not needs_first_unread(p, NOW, DAY)
    assert gap("t", p, NOW, DAY) is None
    assert unread_age_ms(p, NOW) == DAY - 1


def test_a_caught_up_partition_has_no_gap_however_old_its_time() -> None:
    p = part(100, since=NOW - 30 * DAY)
    assert gap("t", p, NOW, DAY) is None and unread_age_ms(p, NOW) == 0


def test_an_old_time_is_checked_against_the_first_unread_record() -> None:
    """Idle for a month, then one change: the kept time is old, the record is not."""
    p = part(50, since=NOW - 30 * DAY)
    assert needs_first_unread(p, NOW, DAY)
    assert gap("t", p, NOW, DAY, FirstUnread(50, NOW - HOUR)) is None
    late = gap("t", p, NOW, DAY, FirstUnread(50, NOW - 2 * DAY))
    assert late is not None and late.rebuildable and "48.0 h" in late.reason


def test_a_first_unread_record_past_the_committed_offset_cannot_date_the_removed_ones() -> None:
    """Compaction removed the records at 50 to 59: a tombstone among them may be gone."""
    p = part(50, since=NOW - 2 * DAY)
    found = gap("t", p, NOW, DAY, FirstUnread(60, NOW - HOUR))
    assert found is not None and found.rebuildable


def test_an_unknown_time_and_no_record_read_is_a_gap() -> None:
    """A table committed by an earlier release, whose first unread record did not come."""
    found = gap("t", part(50, since=None), NOW, DAY)
    assert found is not None and "an unknown time" in found.reason


def test_a_topic_that_is_not_compacted_has_no_retention_gap() -> None:
    p = part(50, since=NOW - 30 * DAY)
    assert not needs_first_unread(p, NOW, None)
    assert gap("t", p, NOW, None) is None


@given(
    committed=st.integers(0, 200),
    start=st.integers(0, 100),
    end=st.integers(0, 200),
    age=st.integers(0, 3 * DAY),
    first_age=st.none() | st.integers(0, 3 * DAY),
    skipped=st.booleans(),
)
def test_no_gap_exactly_when_every_unread_record_is_dated_within_the_retention(
    committed: int, start: int, end: int, age: int, first_age: int | None, skipped: bool
) -> None:
    """The rule, said once more the plain way: offsets inside the topic, and the unread
    records (if any) dated, by the kept time or a first record at the offset itself,
    within the retention."""
    end = max(end, start)
    p = part(committed, start, end, NOW - age)
    first = None if first_age is None else FirstUnread(committed + skipped, NOW - first_age)
    found = gap("t", p, NOW, DAY, first if needs_first_unread(p, NOW, DAY) else None)
    inside = start <= committed <= end
    dated = (
        committed == end
        or age <= DAY
        or (first is not None and not skipped and first_age is not None and first_age <= DAY)
    )
    assert (found is None) == (inside and dated)
    if found is not None:
        assert found.rebuildable == inside
