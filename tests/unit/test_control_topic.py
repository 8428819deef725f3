"""The control topic's records as every instance sees them, and the records it refuses.

Anyone who can write to the control topic could otherwise stop every replica for good
(a record its reader cannot read, read again at every start) or have every data plane
carry out a forged offsets write against any topic or consumer group (review A3).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from processor import metrics
from processor.pipeline import offsets_lease
from processor.pipeline.control_records import REMOVING_PREFIX
from processor.pipeline.control_topic import LIFECYCLE, OFFSETS_WRITE, ControlView, Lifecycle
from processor.pipeline.offsets_lease import Lease, abandoned, renew_every_s
from processor.pipeline.table_removal import released
from tidemark.core.config import Config
from tidemark.core.topics import backfill_topic, changelog_topic, dataplane_group

CONFIG = Config()
PIPELINE = CONFIG.processor.pipeline
INPUT = f"{CONFIG.source.topic_prefix}.public.items"


def plan(**changes: Any) -> dict[str, Any]:
    """An offsets write as :class:`processor.pipeline.offsets.Offsets` plans one."""
    return {
        "group": dataplane_group(PIPELINE),
        "delete_group": False,
        "offsets": [[INPUT, 0, 5], [backfill_topic(PIPELINE, INPUT), 0, 0]],
        "positions": [[INPUT, 0, None]],
        "reset_state": [[changelog_topic(PIPELINE, INPUT), 0]],
        "at_ms": 3,
        **changes,
    }


def refused(key: bytes) -> float:
    return metrics.CONTROL_REFUSED.labels(key.decode())._value.get()


def test_lifecycle_is_the_last_record_and_running_without_one() -> None:
    view = ControlView(CONFIG)
    assert view.lifecycle is Lifecycle.RUNNING and view.offsets_write is None
    view.apply(LIFECYCLE, orjson.dumps({"state": "STOPPED", "by": "cli", "at_ms": 1}))
    assert view.lifecycle is Lifecycle.STOPPED
    view.apply(LIFECYCLE, orjson.dumps({"state": "PAUSED", "by": "api", "at_ms": 2}))
    assert view.lifecycle is Lifecycle.PAUSED
    view.apply(LIFECYCLE, None)  # a deleted record: running again
    assert view.lifecycle is Lifecycle.RUNNING
    view.apply(LIFECYCLE, orjson.dumps({"state": "STOPPED"}))  # no time: still obeyed
    assert view.lifecycle is Lifecycle.STOPPED


def test_an_offsets_write_is_pending_until_its_record_is_deleted() -> None:
    view = ControlView(CONFIG)
    view.apply(OFFSETS_WRITE, orjson.dumps(plan()))
    assert view.offsets_write == plan()
    view.apply(None, b"ignored: no key")
    view.apply(OFFSETS_WRITE, None)
    assert view.offsets_write is None


@pytest.mark.parametrize(
    "value",
    [
        b"nope",
        b"[]",
        orjson.dumps({"state": "X", "at_ms": 1}),
        orjson.dumps({"state": None, "at_ms": 1}),
        orjson.dumps({"state": "RUNNING", "at_ms": "soon"}),
        b'{"state":"RUNNING","at_ms":1' + b" " * (9 << 20) + b"}",
    ],
)
def test_a_lifecycle_record_tidemark_does_not_write_is_refused_and_changes_nothing(
    value: bytes,
) -> None:
    view = ControlView(CONFIG)
    view.apply(LIFECYCLE, orjson.dumps({"state": "PAUSED", "by": "api", "at_ms": 2}))
    before = refused(LIFECYCLE)
    view.apply(LIFECYCLE, value)
    assert view.lifecycle is Lifecycle.PAUSED
    assert refused(LIFECYCLE) == before + 1


@pytest.mark.parametrize(
    "changes",
    [
        {"group": "victim"},
        {"reset_state": [["some.compacted", 0]]},
        {"reset_state": [[changelog_topic("other", INPUT), 0]]},
        {"reset_state": [[changelog_topic(PIPELINE, "unrelated"), 0]]},
        {"offsets": [["victim.topic", 0, 0]]},
        {"offsets": [[INPUT, -1, 0]]},
        {"offsets": [[INPUT, 0, -2]]},
        {"offsets": [[INPUT, 0, True]]},
        {"offsets": [[INPUT, 0]]},
        {"offsets": "all"},
        {"positions": [[backfill_topic(PIPELINE, INPUT), 0, None]]},
        {"positions": [[INPUT, 0, "lsn"]]},
        {"delete_group": "yes"},
        {"at_ms": None},
        {"writer": 7},
        {"writer": "w" * 101},
    ],
)
def test_a_plan_beyond_the_pipelines_own_group_and_topics_is_refused(
    changes: dict[str, Any],
) -> None:
    view = ControlView(CONFIG)
    before = refused(OFFSETS_WRITE)
    view.apply(OFFSETS_WRITE, orjson.dumps(plan(**changes)))
    assert view.offsets_write is None
    assert refused(OFFSETS_WRITE) == before + 1


def test_keys_tidemark_does_not_read_are_ignored() -> None:
    view = ControlView(CONFIG)
    view.apply(b"other", b"not even JSON")
    assert view.records == {}


def test_a_plan_is_abandoned_only_once_its_writer_stopped_renewing_it() -> None:
    """Review A11: the time counts from the plan's last renewal, not its first write."""
    config = dataclasses.replace(
        CONFIG, processor=dataclasses.replace(CONFIG.processor, offsets_write_abandoned_s=60.0)
    )
    renewed = plan(at_ms=1_000_000, writer="offsets-1")
    assert not abandoned(config, renewed, 1_000_000 + 60_000)
    assert abandoned(config, renewed, 1_000_000 + 60_001)
    assert renew_every_s(config) == 10.0
    view = ControlView(config)
    view.apply(OFFSETS_WRITE, orjson.dumps(renewed))
    assert view.offsets_write == renewed


class _ControlTopic:
    """The control topic's offsets plan, in memory, with a clock that moves by hand."""

    def __init__(self, found: dict[str, Any]) -> None:
        self.plan: dict[str, Any] | None = found
        self.now_ms = found["at_ms"]

    def read(self, _config: Config) -> ControlView:
        view = ControlView(CONFIG)
        view.records = {} if self.plan is None else {OFFSETS_WRITE: self.plan}
        return view

    def write(self, _config: Config, _key: bytes, value: dict[str, Any] | None) -> None:
        self.plan = None if value is None else {**value, "at_ms": self.now_ms}

    def sleep(self, seconds: float) -> None:
        self.now_ms += int(seconds * 1000)


def test_a_claimed_plan_is_renewed_as_soon_as_the_claim_settles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim waits SETTLE_S for other claims; the plan must not then look abandoned to
    them for the time it waited (under load the wait and reads outlast a short
    abandonment time, and the two instances took the plan from each other in turn)."""
    topic = _ControlTopic(plan(at_ms=1_000_000, writer="offsets-gone"))
    monkeypatch.setattr(offsets_lease, "read_control", topic.read)
    monkeypatch.setattr(offsets_lease, "write_control", topic.write)
    monkeypatch.setattr(offsets_lease.time, "sleep", topic.sleep)
    topic.now_ms += 61_000
    found = topic.plan
    assert found is not None
    lease = Lease(CONFIG, found, "offsets-new")
    assert lease.claim()
    assert topic.plan is not None and topic.plan["writer"] == "offsets-new"
    assert topic.plan["at_ms"] == topic.now_ms  # renewed after the wait, not before it


def removal(topic: str = INPUT, **changes: Any) -> bytes:
    return orjson.dumps({"topic": topic, "by": "cli", "at_ms": 4, **changes})


def test_a_tables_removal_is_marked_until_its_record_is_deleted() -> None:
    view = ControlView(CONFIG)
    other = f"{CONFIG.source.topic_prefix}.public.orders"
    view.apply(REMOVING_PREFIX + INPUT.encode(), removal())
    view.apply(REMOVING_PREFIX + other.encode(), removal(other))
    assert view.removing == {INPUT, other}
    view.apply(REMOVING_PREFIX + INPUT.encode(), None)
    assert view.removing == {other}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (REMOVING_PREFIX + b"tidemark.public.items", removal("tidemark.reconciled.public.items")),
        (REMOVING_PREFIX + b"tidemark.public.orders", removal()),  # the key names another
        (REMOVING_PREFIX + INPUT.encode(), removal(at_ms="soon")),
        (REMOVING_PREFIX + INPUT.encode(), b"[1]"),
    ],
)
def test_a_removal_of_anything_but_an_input_topic_is_refused(key: bytes, value: bytes) -> None:
    view = ControlView(CONFIG)
    before = refused(key)
    view.apply(key, value)
    assert view.removing == set()
    assert refused(key) == before + 1


def test_the_removal_waits_for_every_instance_to_read_its_mark_and_let_go() -> None:
    topics = {INPUT, backfill_topic(PIPELINE, INPUT)}
    holding = {"topic": INPUT, "partition": 0}
    other = {"topic": "tidemark.public.orders", "partition": 0}

    def report(removing: Any, *held: dict[str, Any]) -> dict[str, Any]:
        return {"released_for_removal": removing, "assigned_partitions": list(held)}

    assert released(report([INPUT], other), INPUT, topics)
    assert released(report([INPUT]), INPUT, topics)
    assert not released(report([INPUT], other, holding), INPUT, topics)  # not yet revoked
    assert not released(report([], other), INPUT, topics)  # the mark not read yet
    assert not released(report(None, other), INPUT, topics)  # a version that cannot read it
    backfill = {"topic": backfill_topic(PIPELINE, INPUT), "partition": 0}
    assert not released(report([INPUT], backfill), INPUT, topics)
