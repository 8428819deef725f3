"""The control topic's records as every instance sees them."""

from __future__ import annotations

import orjson

from processor.pipeline.control_topic import LIFECYCLE, OFFSETS_WRITE, ControlView, Lifecycle


def test_lifecycle_is_the_last_record_and_running_without_one() -> None:
    view = ControlView()
    assert view.lifecycle is Lifecycle.RUNNING and view.offsets_write is None
    view.apply(LIFECYCLE, orjson.dumps({"state": "STOPPED", "by": "cli", "at_ms": 1}))
    assert view.lifecycle is Lifecycle.STOPPED
    view.apply(LIFECYCLE, orjson.dumps({"state": "PAUSED", "by": "api", "at_ms": 2}))
    assert view.lifecycle is Lifecycle.PAUSED
    view.apply(LIFECYCLE, None)  # a deleted record: running again
    assert view.lifecycle is Lifecycle.RUNNING


def test_an_offsets_write_is_pending_until_its_record_is_deleted() -> None:
    view = ControlView()
    plan = {"group": "g", "offsets": [["t", 0, 5]], "at_ms": 3}
    view.apply(OFFSETS_WRITE, orjson.dumps(plan))
    assert view.offsets_write == plan
    view.apply(None, b"ignored: no key")
    view.apply(OFFSETS_WRITE, None)
    assert view.offsets_write is None
