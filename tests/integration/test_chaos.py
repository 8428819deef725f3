"""A short chaos run in CI: one fixed seed whose eight faults are one of every kind.

The long schedule (at least 200 faults over 1,000,000 changes) is ``make chaos``;
this one runs on the session's stack and Spark, and judges the same way.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from tests.chaos.run import KINDS, run_chaos, schedule
from tidemark.devstack.stack import DevStack

SEED, FAULTS = 417, 8


def test_a_short_fault_schedule_loses_nothing(stack: DevStack, spark: SparkSession) -> None:
    assert {fault.kind for fault in schedule(SEED, FAULTS)} == set(KINDS)
    result = run_chaos(
        stack, spark, SEED, changes=3_000, faults=FAULTS, keys=300, sink_kills=1, rate=150
    )
    summary = {k: v for k, v in result.items() if k != "examples"}
    assert result["changes_checked"] > 3_000, summary
    assert result["lost"] == result["stale"] == result["split_keys"] == 0, result["examples"]
    assert result["unplanned_restarts"] == 0, result["examples"]
    assert result["poison_records"] > 0 and result["poison_not_dead_lettered"] == 0, summary
    assert result["backfills"] == {"COMPLETED": 1}, summary
    assert result["iceberg_tables_equal"], summary
    assert sum(result["faults"].values()) == FAULTS + 1, summary  # and the sink's kill
