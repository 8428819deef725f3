"""The data plane's batch limit: cut when a batch runs long, restored when it is quick."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.dataplane.batch_limit import MIN_RECORDS, next_batch_limit

pytestmark = pytest.mark.unit


def test_a_slow_batch_halves_the_limit_down_to_the_floor() -> None:
    assert next_batch_limit(5000, 3.0, 2.5, 5000) == 2500
    assert next_batch_limit(150, 9.0, 2.5, 5000) == MIN_RECORDS


def test_a_quick_batch_doubles_it_back_up_to_the_setting() -> None:
    assert next_batch_limit(1000, 0.1, 2.5, 5000) == 2000
    assert next_batch_limit(4000, 0.1, 2.5, 5000) == 5000
    assert next_batch_limit(1000, 1.0, 2.5, 5000) == 1000  # within budget: kept


@given(st.integers(1, 100_000), st.floats(0, 100), st.floats(0.1, 10), st.integers(1, 100_000))
def test_the_limit_stays_within_the_floor_and_the_setting(
    current: int, seconds: float, budget: float, ceiling: int
) -> None:
    limit = next_batch_limit(min(current, ceiling), seconds, budget, ceiling)
    assert min(MIN_RECORDS, ceiling) <= limit <= ceiling


def test_a_batch_whose_cost_grows_with_its_records_settles_within_budget() -> None:
    """A broker that takes 2 ms a record (a partition each): from 5,000 records (10 s, past
    the poll deadline) the limit comes down to batches within the 2.5 s budget."""
    limit = 5000
    for _ in range(10):
        limit = next_batch_limit(limit, limit * 0.002, 2.5, 5000)
    assert limit * 0.002 <= 2.5
