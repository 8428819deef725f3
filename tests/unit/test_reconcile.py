"""The version rule and state entries as properties (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.reconcile import Action, Entry, decide

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
