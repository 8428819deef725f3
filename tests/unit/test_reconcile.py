"""The reconciliation rules as properties (hypothesis), without Kafka."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.reconcile import Action, Entry, decide, reconcile

versions = st.tuples(st.integers(0, 2**40), st.integers(0, 2**40))
values = st.one_of(st.none(), st.binary(max_size=64))


@given(versions, versions)
def test_decision_follows_version_order(incoming: tuple[int, int], stored: tuple[int, int]) -> None:
    action = decide(incoming, stored)
    if incoming > stored:
        assert action is Action.APPLY
    elif incoming == stored:
        assert action is Action.REEMIT
    else:
        assert action is Action.DROP


@given(versions)
def test_a_key_without_state_applies(version: tuple[int, int]) -> None:
    assert decide(version, None) is Action.APPLY


@given(versions, values)
def test_entry_round_trips(version: tuple[int, int], value: bytes | None) -> None:
    assert Entry.decode(Entry(version, value).encode()) == Entry(version, value)


@given(st.lists(st.tuples(versions, values), min_size=1, max_size=30), st.data())
def test_replays_converge_to_the_newest_change(
    changes: list[tuple[tuple[int, int], bytes | None]], data: st.DataObject
) -> None:
    """Any replay of a contiguous range, any number of times, converges (I1) and never
    loses the output of the newest change (I5)."""
    changes = sorted(dict(changes).items())  # one change per version, in commit order
    start = data.draw(st.integers(0, len(changes) - 1))
    end = data.draw(st.integers(start, len(changes)))
    stream = changes + changes[start:end]  # a connector restart replays a range
    state: Entry | None = None
    emitted: list[bytes | None] = []
    for version, value in stream:
        outcome = reconcile(version, value, state)
        if outcome.action is not Action.DROP:
            emitted.append(value)
        if outcome.entry is not None:
            state = outcome.entry
    newest_version, newest_value = changes[-1]
    assert state == Entry(newest_version, newest_value)
    assert emitted[-1] == newest_value  # replays of older versions were dropped


@given(st.lists(st.tuples(versions, values), min_size=2, max_size=30))
def test_output_is_monotone(changes: list[tuple[tuple[int, int], bytes | None]]) -> None:
    """Whatever the arrival order, every emitted change is newer than or equal to the last
    one emitted (I3)."""
    state: Entry | None = None
    last: tuple[int, int] | None = None
    for version, value in changes:
        outcome = reconcile(version, value, state)
        if outcome.action is not Action.DROP:
            assert last is None or version >= last
            last = version
        if outcome.entry is not None:
            state = outcome.entry


def test_outcome_carries_the_previous_value_as_before() -> None:
    first = reconcile((1, 1), b"a", None)
    second = reconcile((2, 2), b"b", first.entry)
    assert second.previous == b"a"
    delete = reconcile((3, 3), None, second.entry)
    assert delete.previous == b"b"
    assert delete.entry == Entry((3, 3), None)
    # a replayed older insert of the deleted key does not resurrect it
    assert reconcile((2, 2), b"b", delete.entry).action is Action.DROP
