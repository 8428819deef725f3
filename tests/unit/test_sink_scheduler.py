"""The sink's scheduler: which table goes next, when it is due, and a few at once."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_sink.scheduler import Outcome, Schedule, TablePool, stalest_first

pytestmark = pytest.mark.unit


def test_the_stalest_table_goes_first_and_one_never_read_before_all() -> None:
    fresh = {"a": 5_000, "b": 1_000, "c": None}
    assert stalest_first(["a", "b", "c", "d"], fresh) == ["c", "d", "b", "a"]


@given(st.dictionaries(st.text(min_size=1, max_size=3), st.none() | st.integers(0, 10**13)))
def test_the_order_is_by_freshness_then_name(fresh: dict[str, int | None]) -> None:
    ordered = stalest_first(fresh, fresh)
    keys = [(fresh[t] or 0, t) for t in ordered]
    assert keys == sorted(keys)
    assert sorted(ordered) == sorted(fresh)


def test_a_table_that_read_all_it_found_waits_the_interval_one_with_more_goes_at_once() -> None:
    schedule = Schedule(10.0)
    assert schedule.due(["a", "b"], 0.0) == ["a", "b"]  # never run
    schedule.done("a", Outcome(read=3, more=False), 100.0)
    schedule.done("b", Outcome(read=3, more=True), 100.0)
    assert schedule.due(["a", "b"], 100.0) == ["b"]
    assert schedule.due(["a", "b"], 109.9) == ["b"]
    assert schedule.due(["a", "b"], 110.0) == ["a", "b"]
    assert schedule.wait_s(["a"], 104.0) == pytest.approx(6.0)
    assert schedule.wait_s(["a", "b"], 104.0) == 0.0
    assert schedule.wait_s([], 104.0) == 10.0


def test_a_table_whose_topic_went_is_forgotten() -> None:
    schedule = Schedule(10.0)
    schedule.done("a", Outcome(1, False), 100.0)
    schedule.forget(["b"])
    assert schedule.due(["a"], 100.0) == ["a"]  # made again: a table never run


class Rounds:
    """Rounds that take ``seconds`` each and note how many ran at once."""

    def __init__(self, seconds: float = 0.05, fail: str = "", fail_at_once: bool = False) -> None:
        self.seconds, self.fail, self.fail_at_once = seconds, fail, fail_at_once
        self.now = self.most = 0
        self.ended: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, topic: str) -> Outcome:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        if not (self.fail_at_once and topic == self.fail):
            time.sleep(self.seconds)
        with self._lock:
            self.now -= 1
            self.ended.append(topic)
        if topic == self.fail:
            raise RuntimeError(f"{topic}: Spark went away")
        return Outcome(read=2, more=False)


def test_the_pool_runs_every_table_once_never_more_than_its_places_at_once() -> None:
    rounds = Rounds()
    topics = [f"t{i}" for i in range(9)]
    with TablePool(3) as pool:
        assert pool.run_all(topics, rounds) == 18
    assert sorted(rounds.ended) == topics
    assert rounds.most == 3


def test_one_place_runs_the_tables_one_after_another_in_their_order() -> None:
    rounds = Rounds(seconds=0.0)
    with TablePool(1) as pool:
        pool.run_all(["c", "a", "b"], rounds)
    assert rounds.ended == ["c", "a", "b"]
    assert rounds.most == 1


def test_a_round_that_fails_is_raised_after_the_others_in_flight_finish() -> None:
    """A fatal error (Spark or the catalog) ends the sink, but no other table is left in
    the middle of its commit."""
    rounds = Rounds(seconds=0.3, fail="t0", fail_at_once=True)
    with TablePool(3) as pool:
        with pytest.raises(RuntimeError, match="t0: Spark went away"):
            pool.run_all(["t0", "t1", "t2", "t3"], rounds)
        assert rounds.now == 0  # raised only once t1 and t2 had finished
        assert {"t1", "t2"} <= set(rounds.ended)
        assert "t3" not in rounds.ended  # none started after the error


def test_a_round_that_fails_while_the_pool_closes_is_raised_not_lost() -> None:
    rounds = Rounds(seconds=0.2, fail="t0")
    with pytest.raises(RuntimeError, match="t0: Spark went away"), TablePool(2) as pool:
        pool.start("t0", rounds)  # the sink stops before it looks at the round's end


def test_no_round_starts_once_stopped() -> None:
    rounds = Rounds(seconds=0.1)
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    with TablePool(1) as pool:
        pool.run_all(["a", "b", "c"], rounds, stop)
    assert rounds.ended == ["a"]


def test_a_table_due_longer_goes_before_a_staler_one_due_since_just_now() -> None:
    """A table with a long backlog is due again at once after each round, and its oldest
    unread record is the oldest of all: first by staleness alone, it would take every
    place for as long as its backlog lasts."""
    schedule = Schedule(10.0)
    schedule.done("backlog", Outcome(3, more=True), 105.0)
    schedule.done("live", Outcome(3, more=False), 90.0)  # due at 100
    fresh = {"backlog": 1_000, "live": 900_000}
    assert schedule.order(["backlog", "live"], fresh) == ["live", "backlog"]
    assert schedule.order(["a", "b", "c"], {"b": 5, "c": None}) == ["a", "c", "b"]  # alike


def test_finished_waits_for_a_round_or_the_time() -> None:
    rounds = Rounds(seconds=0.2)
    with TablePool(2) as pool:
        assert pool.finished(0.01) == []  # none runs
        pool.start("a", rounds)
        assert pool.running == {"a"} and pool.free == 1
        assert pool.finished(0.01) == []
        assert pool.finished(5.0) == [("a", Outcome(2, False))]
        assert pool.free == 2
