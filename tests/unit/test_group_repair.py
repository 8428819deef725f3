"""RebalanceWatch: a rebalance stuck past its limit, from librdkafka's statistics."""

from __future__ import annotations

import json
import time

from tidemark.core.group_repair import RebalanceWatch


def stats(join_state: str) -> str:
    return json.dumps({"name": "c", "cgrp": {"state": "up", "join_state": join_state}})


def test_a_group_that_never_gets_steady_is_stuck_after_the_limit() -> None:
    watch = RebalanceWatch(0.05)
    watch.observe(stats("wait-sync"))
    assert not watch.stuck()
    time.sleep(0.06)
    watch.observe(stats("wait-join"))
    assert watch.stuck()
    watch.restart()
    assert not watch.stuck()


def test_steady_resets_the_clock_and_zero_turns_it_off() -> None:
    watch = RebalanceWatch(0.05)
    time.sleep(0.06)
    watch.observe(stats("steady"))  # a member without partitions is steady too
    assert not watch.stuck()
    off = RebalanceWatch(0)
    time.sleep(0.01)
    assert not off.stuck() and off.settings() == {}
    assert RebalanceWatch(60).settings()["statistics.interval.ms"] == 5000
