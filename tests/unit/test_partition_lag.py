"""The exported lag of an owned partition, read or not read yet."""

from __future__ import annotations

import pytest

from processor.dataplane.partitions import lag_of

pytestmark = pytest.mark.unit


def test_a_partition_read_lags_from_its_position() -> None:
    assert lag_of(7, 3, 0, 10) == 3


def test_a_partition_not_read_since_assigned_lags_from_its_committed_offset() -> None:
    """It was exported as 0 (caught up) while it was not read at all."""
    assert lag_of(-1001, 4, 0, 10) == 6
    assert lag_of(-1001, -1001, 2, 10) == 8
    assert lag_of(-1001, -1001, 0, 0) == 0
