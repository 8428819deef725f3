"""Metrics at a coarser detail: per-partition or per-table series summed at ``/metrics``."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from processor.metrics_detail import DETAILS, exposition

pytestmark = pytest.mark.unit


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    lag = Gauge("tm_lag", "lag", ["topic", "partition"], registry=reg)
    lag.labels("a", "0").set(5)
    lag.labels("a", "1").set(7)
    lag.labels("b", "0").set(1)
    dead = Counter("tm_dead", "dead letters", ["topic", "reason"], registry=reg)
    dead.labels("a", "decode").inc(2)
    dead.labels("b", "decode").inc(3)
    dead.labels("b", "format").inc()
    progress = Gauge("tidemark_snapshot_progress_ratio", "progress", ["table"], registry=reg)
    progress.labels("public.a").set(0.25)
    progress.labels("public.b").set(1.0)
    left = Gauge("tidemark_snapshot_remaining_seconds", "left", ["table"], registry=reg)
    left.labels("public.a").set(30)
    left.labels("public.b").set(4)
    refused = Gauge("tidemark_partition_refused", "refused", ["topic", "partition"], registry=reg)
    refused.labels("a", "0").set(1)
    refused.labels("a", "1").set(1)
    refused.labels("b", "0").set(0)
    Histogram("tm_batch_seconds", "batches", registry=reg).observe(0.2)
    Gauge("tm_assigned", "assigned", registry=reg).set(3)
    return reg


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_partition_detail_is_every_series_as_registered() -> None:
    reg = registry()
    got = samples(exposition(reg, "partition"))
    assert got[("tm_lag", (("partition", "1"), ("topic", "a")))] == 7
    assert len([k for k in got if k[0] == "tm_lag"]) == 3


def test_topic_detail_sums_a_topics_partitions() -> None:
    got = samples(exposition(registry(), "topic"))
    assert {k: v for k, v in got.items() if k[0] == "tm_lag"} == {
        ("tm_lag", (("topic", "a"),)): 12,
        ("tm_lag", (("topic", "b"),)): 1,
    }
    assert got[("tm_dead_total", (("reason", "decode"), ("topic", "b")))] == 3
    assert got[("tidemark_snapshot_progress_ratio", (("table", "public.a"),))] == 0.25
    # a flag stays a flag: the shipped alerts fire on "== 1"
    assert got[("tidemark_partition_refused", (("topic", "a"),))] == 1
    assert got[("tidemark_partition_refused", (("topic", "b"),))] == 0


def test_pipeline_detail_keeps_no_topic_or_table_and_aggregates_each_as_it_means() -> None:
    got = samples(exposition(registry(), "pipeline"))
    assert got[("tm_lag", ())] == 13
    assert got[("tm_dead_total", (("reason", "decode"),))] == 5
    assert got[("tm_dead_total", (("reason", "format"),))] == 1
    # the least progress and the longest wait, not sums that mean nothing
    assert got[("tidemark_snapshot_progress_ratio", ())] == 0.25
    assert got[("tidemark_snapshot_remaining_seconds", ())] == 30
    assert got[("tm_batch_seconds_count", ())] == 1
    assert got[("tidemark_partition_refused", ())] == 1
    assert got[("tm_assigned", ())] == 3
    assert not any(
        name in dict(labels) for _, labels in got for name in ("topic", "table", "partition")
    )


def test_coarser_details_serve_no_created_series() -> None:
    reg = registry()
    assert b"tm_dead_created" in exposition(reg, "partition")
    for detail in ("topic", "pipeline"):
        text = exposition(reg, detail)  # type: ignore[arg-type]
        assert b"_created" not in text, detail


def test_every_detail_keeps_every_family_and_its_type() -> None:
    reg = registry()

    def types(detail: str) -> dict[str, str]:
        text = exposition(reg, detail).decode()  # type: ignore[arg-type]
        families = text_string_to_metric_families(text)
        return {f.name: f.type for f in families if not f.name.endswith("_created")}

    assert all(types(detail) == types("partition") for detail in DETAILS)
