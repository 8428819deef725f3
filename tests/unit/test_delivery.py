"""When a table read whole is completed: once the data plane has read its rows (issue
45, item 5). The coordinator used to complete it once Kafka had its rows, however long
they then waited, and whether or not they expired unread."""

from __future__ import annotations

from processor.snapshot.delivery import Delivery, delivery

STARTS = {"0": 10, "1": 4}
ENDS = {"0": 20, "1": 4}  # partition 1 got no row of the table


def test_a_table_is_delivered_once_the_data_plane_passed_its_last_rows() -> None:
    assert delivery(STARTS, ENDS, {0: 19, 1: None}, {0: 0, 1: 0}) == Delivery(False)
    assert delivery(STARTS, ENDS, {0: 20, 1: None}, {0: 0, 1: 0}) == Delivery(True)
    assert delivery(STARTS, ENDS, {0: 25, 1: 2}, {0: 0, 1: 0}) == Delivery(True)


def test_a_group_that_never_read_the_topic_has_not_passed_its_rows() -> None:
    assert delivery(None, ENDS, {0: None, 1: None}, {0: 0, 1: 0}) == Delivery(False)
    assert delivery(None, {"0": 0}, {0: None}, {0: 0}) == Delivery(True)


def test_rows_that_expired_before_the_data_plane_read_them_are_lost() -> None:
    found = delivery(STARTS, ENDS, {0: 12, 1: None}, {0: 15, 1: 0})
    assert not found.passed and found.lost is not None
    assert "offsets 12 to 14 of partition 0" in found.lost
    # Rows before the table's own expired: nothing of it is lost.
    assert delivery(STARTS, ENDS, {0: None, 1: None}, {0: 8, 1: 0}) == Delivery(False)
    # A group that never read the topic, whose first rows of the table expired.
    found = delivery(STARTS, ENDS, {0: None, 1: None}, {0: 11, 1: 0})
    assert found.lost is not None and "offsets 10 to 10" in found.lost
