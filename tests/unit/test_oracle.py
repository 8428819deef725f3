"""The crash tests' oracle: what at least once allows passes, anything else is counted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.oracle import check_topic, digest, positions, strip_resent, with_truncates


@st.composite
def at_least_once(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Positions of a key's history as emitted in order, with re-sent runs after crashes;
    and the positions emitted without them."""
    size = draw(st.integers(1, 30))
    forward = sorted(draw(st.sets(st.integers(0, size), min_size=1)))
    sent: list[int] = []
    for at, position in enumerate(forward):
        sent.append(position)
        if draw(st.integers(0, 4)) == 0:  # a crash: a run already emitted goes again
            start = draw(st.integers(0, at))
            sent += forward[start : draw(st.integers(start, at)) + 1]
    return sent, forward


@given(at_least_once())
def test_re_sent_runs_are_not_stale(case: tuple[list[int], list[int]]) -> None:
    sent, forward = case
    assert strip_resent(sent) == (forward, 0)


@given(at_least_once(), st.data())
def test_a_row_older_than_any_emitted_is_stale(
    case: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    sent, forward = case
    older = [p for p in range(forward[-1]) if p not in forward]
    if not older:
        return
    cut = data.draw(st.integers(sent.index(forward[-1]) + 1, len(sent)))
    assert strip_resent([*sent[:cut], data.draw(st.sampled_from(older))])[1] == 1


def test_a_topic_is_checked_against_its_source() -> None:
    rows = [{"id": 1, "v": v} for v in range(4)]
    history = {(1,): [None, *map(digest, rows)], (2,): [None, digest({"id": 2, "v": 0}), None]}
    emitted = [((1,), 0, digest(r)) for r in (rows[0], rows[2], rows[1], rows[2], rows[3])]
    emitted += [((2,), 0, digest({"id": 2, "v": 0})), ((2,), 1, None)]
    verdict = check_topic(history, emitted, {(1,): digest(rows[3])}, "t")
    assert (verdict.changes_checked, verdict.lost, verdict.split_keys) == (7, 0, 1)
    assert verdict.stale == 1  # v=1 after v=2 was never emitted before: it went back
    verdict = check_topic(history, emitted[:2], {(1,): digest(rows[3])}, "t")
    assert (verdict.lost, verdict.stale) == (1, 0)  # the output stopped at v=2


def test_a_re_sent_row_equal_to_a_later_version_is_not_stale() -> None:
    """The CI case: a key set back to an earlier value (versions 1 and 4 equal), and a
    crash re-sending versions 1 and 2. Read as version 4, the re-sent row made 2 stale."""
    x, y, z, w = (digest({"id": 1, "v": v}) for v in "xyzw")
    history = [None, x, y, z, x, w]
    emitted = [x, y, x, y, z, x, w]  # 1, 2, (1, 2 re-sent), 3, 4, 5
    read = positions(history, emitted)
    assert [history[i] for i in read] == emitted
    assert strip_resent(read)[1] == 0  # the first reading was [1, 2, 4, 2, 3, 4, 5]: stale
    assert strip_resent(positions(history, [x, z, y]))[1] == 1  # stale in every reading


def test_a_truncate_is_a_delete_in_the_history_of_every_key_it_passed() -> None:
    """A truncate has no key: each key's history gets ``None`` where its events cross the
    truncate's position, and after its last event when the truncate came later."""
    a, b, c = digest({"v": 1}), digest({"v": 2}), digest({"v": 3})
    events = {(1,): [(10, a), (30, b)], (2,): [(12, c)], (3,): [(40, a)]}
    assert with_truncates(events, [20]) == {
        (1,): [None, a, None, b],
        (2,): [None, c, None],
        (3,): [None, a],  # written after the truncate only
    }


def test_a_truncate_adds_no_delete_where_the_key_was_already_gone() -> None:
    a = digest({"v": 1})
    events = {(1,): [(10, a), (15, None), (30, a)]}
    assert with_truncates(events, [20, 25]) == {(1,): [None, a, None, a]}


def test_events_that_go_back_in_position_cross_no_truncate() -> None:
    """A connector's snapshot again (op ``r``) comes after later changes with an older
    position: it crosses nothing."""
    a, b = digest({"v": 1}), digest({"v": 2})
    events = {(1,): [(10, a), (50, b), (45, b)]}
    assert with_truncates(events, [20]) == {(1,): [None, a, None, b, b]}
