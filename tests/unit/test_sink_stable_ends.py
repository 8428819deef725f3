"""The sink reads to the last stable offset, unless the broker keeps it behind for good."""

from __future__ import annotations

from spark_sink.stable_ends import Behind, read_ends

STUCK_AFTER_S = 120.0


def test_a_partition_without_open_transactions_is_read_to_its_stable_end() -> None:
    ends, behind = read_ends({0: 100, 1: 50}, {0: 100, 1: 40}, {}, 10.0, STUCK_AFTER_S)
    assert ends == {0: 100, 1: 50}
    assert behind == {}


def test_an_open_transaction_holds_the_end_back_while_it_may_still_close() -> None:
    ends, behind = read_ends({0: 0}, {0: 900}, {}, 10.0, STUCK_AFTER_S)
    assert ends == {0: 0}
    assert behind == {0: Behind(0, 10.0)}
    ends, behind = read_ends({0: 0}, {0: 950}, behind, 10.0 + STUCK_AFTER_S - 1, STUCK_AFTER_S)
    assert ends == {0: 0}
    assert behind == {0: Behind(0, 10.0)}


def test_a_stable_end_that_stays_behind_past_the_bound_is_passed() -> None:
    """The embedded broker never closes a transaction whose writer died: its last
    stable offset reads 0 until a producer of the same id starts, maybe never."""
    behind = {0: Behind(0, 10.0)}
    ends, behind = read_ends(
        {0: 0, 1: 70}, {0: 950, 1: 70}, behind, 10.0 + STUCK_AFTER_S, STUCK_AFTER_S
    )
    assert ends == {0: 950, 1: 70}
    assert behind == {0: Behind(0, 10.0)}


def test_a_stable_end_that_moves_is_not_stuck() -> None:
    """On Kafka, a busy partition's stable end is behind at every look, and moves."""
    behind = {0: Behind(500, 10.0)}
    ends, behind = read_ends({0: 600}, {0: 700}, behind, 10.0 + STUCK_AFTER_S * 2, STUCK_AFTER_S)
    assert ends == {0: 600}
    assert behind == {0: Behind(600, 10.0 + STUCK_AFTER_S * 2)}


def test_a_stable_end_that_caught_up_forgets_it_was_behind() -> None:
    ends, behind = read_ends({0: 700}, {0: 700}, {0: Behind(0, 10.0)}, 500.0, STUCK_AFTER_S)
    assert ends == {0: 700}
    assert behind == {}
