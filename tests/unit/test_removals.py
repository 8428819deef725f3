"""When a data plane has let go of a table being removed: its report tells
``tidemark tables remove`` that the table's topics can be deleted under no consumer; and
when a backfill of the table keeps the command from starting."""

from __future__ import annotations

from processor.dataplane.removals import Removals
from processor.pipeline.table_removal import backfill_reason
from processor.snapshot.progress import (
    ABORTED,
    COMPLETED,
    DELIVERING,
    QUEUED,
    RUNNING,
    SnapshotState,
    TableProgress,
)

X, Y = "p.public.x", "p.public.y"


def test_let_go_once_an_assignment_answers_a_subscription_without_the_topic() -> None:
    removals = Removals()
    removals.subscribed([X, Y], changed=True)
    removals.assigned()
    assert removals.read({X})
    assert not removals.read({X})  # the same marks
    removals.update(member=True, held={X, Y})
    assert removals.released == frozenset()  # still subscribed, still held
    removals.subscribed([Y], changed=True)
    removals.update(member=True, held={Y})
    # revoked, but no assignment answered the new subscription yet: one from a join
    # that still carried X could come
    assert removals.released == frozenset()
    removals.assigned()
    removals.update(member=True, held={X, Y})  # the assignment still holds X
    assert removals.released == frozenset()
    removals.update(member=True, held={Y})
    assert removals.released == {X}
    removals.subscribed([Y], changed=False)  # later discoveries change nothing
    removals.update(member=True, held={Y})
    assert removals.released == {X}


def test_a_topic_never_subscribed_is_let_go_at_the_next_assignment_or_at_once() -> None:
    removals = Removals()
    removals.subscribed([Y], changed=True)
    removals.read({X})
    removals.subscribed([Y], changed=False)
    removals.update(member=True, held={Y})
    assert removals.released == frozenset()  # the assignment to [Y] has not come yet
    removals.assigned()
    removals.update(member=True, held={Y})
    assert removals.released == {X}

    alone = Removals()
    alone.read({X})
    alone.subscribed([], changed=False)  # every input being removed: no subscription
    alone.update(member=True, held=set())
    assert alone.released == {X}


def test_outside_the_group_everything_is_let_go_and_a_mark_taken_back_is_forgotten() -> None:
    removals = Removals()
    removals.read({X, Y})
    removals.update(member=False, held=set())
    assert removals.released == {X, Y}
    removals.read({Y})
    removals.update(member=False, held=set())
    assert removals.released == {Y}


def test_a_table_is_not_removed_while_a_backfill_of_it_is_unfinished() -> None:
    """Its backfill topic is deleted with it: a backfill still reading, or whose rows the
    data plane has not passed yet, would never finish. Its other tables' do not count."""
    state = SnapshotState(
        tables=[
            TableProgress("public.x", "r-1", status=COMPLETED),
            TableProgress("public.y", "r-2", status=RUNNING),
            TableProgress("public.x", "r-3", status=ABORTED),
        ]
    )
    assert backfill_reason(None, "public.x") is None
    assert backfill_reason(state, "public.x") is None
    for status in (QUEUED, RUNNING, DELIVERING):
        state.tables.append(TableProgress("public.x", "r-4", status=status))
        reason = backfill_reason(state, "public.x")
        assert reason is not None and f"is {status} (request r-4)" in reason
        # the advice to stop it only where a stop signal stops it
        assert ("tidemark snapshot stop public.x" in reason) == (status != DELIVERING)
        state.tables.pop()
    state.tables.append(TableProgress("public.x", "again-1", keys=[{"id": 1}], status=RUNNING))
    reason = backfill_reason(state, "public.x")
    assert reason is not None and "read of keys again" in reason and "stop" not in reason
