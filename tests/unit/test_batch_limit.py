"""The data plane's batch limit: cut when a batch runs long, restored when it is quick."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.dataplane.batch_limit import (
    MIN_ROWS,
    Limit,
    after_assignment,
    next_batch_limit,
    next_limit,
    take_batch,
)
from processor.events.chunk_records import ROWS_PER_RECORD

pytestmark = pytest.mark.unit


def test_a_slow_batch_halves_the_limit_down_to_the_floor() -> None:
    assert next_batch_limit(5000, 3.0, 2.5, 5000) == 2500
    assert next_batch_limit(150, 9.0, 2.5, 5000) == MIN_ROWS


def test_a_quick_batch_doubles_it_back_up_to_the_setting() -> None:
    assert next_batch_limit(1000, 0.1, 2.5, 5000) == 2000
    assert next_batch_limit(4000, 0.1, 2.5, 5000) == 5000
    assert next_batch_limit(1000, 1.0, 2.5, 5000) == 1000  # within budget: kept


@given(st.integers(1, 100_000), st.floats(0, 100), st.floats(0.1, 10), st.integers(1, 100_000))
def test_the_limit_stays_within_the_floor_and_the_setting(
    current: int, seconds: float, budget: float, ceiling: int
) -> None:
    limit = next_batch_limit(min(current, ceiling), seconds, budget, ceiling)
    assert min(MIN_ROWS, ceiling) <= limit <= ceiling


def test_a_batch_whose_cost_grows_with_its_records_settles_within_budget() -> None:
    """A broker that takes 2 ms a record (a partition each): from 5,000 records (10 s, past
    the poll deadline) the limit comes down to batches within the 2.5 s budget."""
    limit = 5000
    for _ in range(10):
        limit = next_batch_limit(limit, limit * 0.002, 2.5, 5000)
    assert limit * 0.002 <= 2.5


def test_after_an_assignment_the_limit_starts_at_the_floor_and_climbs_back() -> None:
    """Measured at 500 tables: the first batch after an assignment took one record of
    each of 1,000 partitions, ran 11.4 s against a poll interval of 10 s, and the group
    took the partitions away again. A broker that takes 11 ms a partition: from the floor
    no batch takes more than twice the 2.5 s budget (the climb doubles only after a batch
    within it), half the poll interval, and a backlog on few partitions climbs back to the
    setting within a few batches."""
    limit = after_assignment(Limit(5000), 5000)
    assert limit.rows == MIN_ROWS
    backlog = 1000  # partitions with one record each
    while backlog:
        taken = min(limit.rows, backlog)
        seconds = taken * 0.011
        assert seconds <= 2 * 2.5
        backlog -= taken
        limit = next_limit(limit, seconds, 2.5, 5000)
    limit = after_assignment(limit, 5000)
    for _ in range(6):  # three partitions with a backlog: batches cost next to nothing
        limit = next_limit(limit, 0.01, 2.5, 5000)
    assert limit == Limit(5000)
    assert after_assignment(Limit(50), 50).rows == 50  # never above the setting


def test_the_climb_back_reaches_the_limit_before_the_assignment_on_a_slow_broker() -> None:
    """A limit of 800 rows whose batches take 2 s (within the 2.5 s budget, not a quarter
    of it) holds there. After an assignment it starts at the floor; under the halving and
    doubling rule alone it would stay at 100 rows (a batch of 100 taking 0.25 s or more is
    not quick), an eighth of what the broker carries."""
    cost = 2.0 / 800  # seconds a row
    limit = after_assignment(Limit(800), 5000)
    for _ in range(4):
        limit = next_limit(limit, limit.rows * cost + 0.3, 2.5, 5000)
    assert limit == Limit(800)  # climbed back, and the climb is over
    assert next_limit(limit, 800 * cost, 2.5, 5000) == Limit(800)  # the rule holds it
    # a batch past the budget during the climb halves the limit and ends the climb
    climbing = after_assignment(Limit(800), 5000)
    assert next_limit(climbing, 3.0, 2.5, 5000) == Limit(MIN_ROWS)
    # assignments one after another keep the limit to climb back to
    again = after_assignment(after_assignment(Limit(800), 5000), 5000)
    assert again == Limit(MIN_ROWS, 800)


class Queue:
    """A consumer's queue of records: ``consume(n, timeout)`` as confluent-kafka's, where
    a record is its topic and what comes back short means the wait ran out."""

    def __init__(self, topics: list[str], rebalance_at: int = 0) -> None:
        self.topics = topics
        self.calls = 0
        self.rebalance_at = rebalance_at  # the call that runs a rebalance callback
        self.rebalances = 0

    def consume(self, count: int, timeout: float) -> list[str]:
        assert count >= 1
        self.calls += 1
        if self.calls == self.rebalance_at:
            self.rebalances += 1
        taken, self.topics = self.topics[:count], self.topics[count:]
        return taken

    def take(self, rows: int) -> list[str]:
        return take_batch(self.consume, rows, 0.1, rows_in, lambda: self.rebalances)


def rows_in(topic: str) -> int:
    return ROWS_PER_RECORD if topic.startswith("tm.backfill") else 1


def test_a_batch_of_backfill_records_holds_the_rows_of_the_setting_not_its_records() -> None:
    """Framed records hold 16 rows each: 5,000 of them would be 80,000 rows in memory."""
    queue = Queue(["tm.backfill.t"] * 10_000)
    batch = queue.take(5000)
    assert 5000 <= sum(map(rows_in, batch)) < 5000 + ROWS_PER_RECORD
    assert len(batch) == 5000 // ROWS_PER_RECORD + 1


def test_a_batch_of_plain_records_is_as_large_as_before_in_few_calls() -> None:
    queue = Queue(["t"] * 10_000)
    assert len(queue.take(5000)) == 5000
    assert queue.calls <= 120  # a call costs under a microsecond
    assert len(Queue(["t"] * 200).take(40)) == 40  # a small limit is a whole batch too


def test_a_mixed_queue_keeps_its_order_and_the_bound() -> None:
    topics = [("tm.backfill.t" if i % 3 == 0 else "t") + f"#{i}" for i in range(9000)]
    queue = Queue(list(topics))
    batch = take_batch(queue.consume, 5000, 0.1, lambda t: rows_in(t.split("#")[0]), lambda: 0)
    assert batch == topics[: len(batch)]
    assert 5000 <= sum(rows_in(t.split("#")[0]) for t in batch) < 5000 + ROWS_PER_RECORD


def test_a_short_queue_ends_the_batch_at_what_it_had() -> None:
    assert len(Queue(["t"] * 7 + ["tm.backfill.t"] * 2).take(5000)) == 9
    assert Queue([]).take(5000) == []


def test_a_rebalance_inside_a_call_drops_what_the_calls_before_it_took() -> None:
    """A rebalance callback runs inside ``consume``: records taken by earlier calls may be
    of partitions revoked since, and every partition now starts at its committed offset,
    so the batch is the rebalancing call's records alone."""
    queue = Queue([f"t#{i}" for i in range(10_000)], rebalance_at=3)
    batch = queue.take(5000)
    assert queue.calls == 3
    first, second = 5000 // ROWS_PER_RECORD, (5000 - 5000 // ROWS_PER_RECORD) // ROWS_PER_RECORD
    assert batch == [f"t#{i}" for i in range(first + second, first + second + len(batch))]


@given(st.lists(st.sampled_from(["t", "tm.backfill.t"]), max_size=3000), st.integers(1, 6000))
def test_a_batch_never_holds_more_rows_than_its_limit_but_for_one_record(
    topics: list[str], limit: int
) -> None:
    batch = Queue(list(topics)).take(limit)
    assert batch == topics[: len(batch)]
    rows = sum(map(rows_in, batch))
    assert rows < limit + ROWS_PER_RECORD
    if len(batch) < len(topics):  # cut by the limit, not by the queue: full
        assert rows >= limit
