"""A short chaos run in CI: one fixed seed whose ten faults are one of every kind of the
lifetime schedule (the chaos run's kinds, records forged in the control and a backfill
topic, an instance stopped right after a commit), with the record key set. Debezium
restarted without its offsets is left to the long run: it would snapshot the tables of
the other tests that share the session's stack.

The long schedules (at least 200 faults over 1,000,000 changes) are ``make chaos`` and
``make lifetime``; this one runs on the session's stack and Spark, and judges the same
way.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from tests.chaos.run import KINDS, LIFETIME_KINDS, run_chaos, schedule
from tidemark.devstack.stack import DevStack

SEED, FAULTS = 255303, 10


def test_a_short_fault_schedule_loses_nothing(stack: DevStack, spark: SparkSession) -> None:
    kinds = [fault.kind for fault in schedule(SEED, FAULTS, lifetime=True)]
    assert set(kinds) == set(KINDS) | set(LIFETIME_KINDS)
    assert kinds.index("backfill") < kinds.index("backfill-forged")  # its topic exists
    result = run_chaos(
        stack,
        spark,
        SEED,
        changes=3_000,
        faults=FAULTS,
        keys=300,
        sink_kills=1,
        rate=150,
        lifetime=True,
    )
    summary = {k: v for k, v in result.items() if k != "examples"}
    assert result["changes_checked"] > 3_000, summary
    assert result["lost"] == result["stale"] == result["split_keys"] == 0, result["examples"]
    assert result["unplanned_restarts"] == 0, result["examples"]
    assert result["poison_records"] > 0 and result["poison_not_dead_lettered"] == 0, summary
    assert result["control_records_forged"] == 3, summary
    assert result["control_forged_not_refused"] == 0, summary
    assert result["chunk_rows_forged"] == 1, summary
    assert result["forged_rows_not_dead_lettered"] == 0, summary
    assert result["stopped_after_commit"] == 1, summary
    assert result["backfills"] == {"COMPLETED": 1}, summary
    assert result["iceberg_tables_equal"], summary
    assert sum(result["faults"].values()) == FAULTS + 1, summary  # and the sink's kill
