"""Instances' reports of themselves: what reads as one, who is alive, who holds what."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from processor.pipeline.instances import STALE_AFTER_S, alive, holders, report_of


def report(instance: str, at: int, *partitions: tuple[str, int]) -> dict[str, object]:
    return {
        "instance": instance,
        "reported_ms": at,
        "assigned_partitions": [{"topic": t, "partition": p} for t, p in partitions],
    }


def test_only_a_report_reads_as_one() -> None:
    good = report("a:1:x", 5, ("t", 0))
    assert report_of(orjson.dumps(good)) == good
    for raw in (
        None,
        b"",
        b"{oops",
        b"[]",
        b'{"instance": 1}',
        orjson.dumps({**good, "reported_ms": "5"}),
    ):
        assert report_of(raw) is None


@given(st.binary(max_size=200))
def test_any_bytes_read_as_a_report_or_nothing_never_an_error(raw: bytes) -> None:
    found = report_of(raw)
    assert found is None or isinstance(found["assigned_partitions"], list)


def test_an_instance_that_stopped_reporting_is_left_out() -> None:
    now = 1_000_000
    fresh, stale = (
        report("b", now - 1000, ("t", 1)),
        report("a", now - int(STALE_AFTER_S * 1000) - 1),
    )
    assert alive([stale, None, fresh], now) == [fresh]


def test_each_partition_is_shown_with_its_holder() -> None:
    reports = [report("b", 0, ("t", 1), ("u", 0)), report("a", 0, ("t", 0))]
    reports[0]["assigned_partitions"].append({"topic": "t"})  # type: ignore[attr-defined]
    assert holders(reports) == [
        {"topic": "t", "partition": 0, "instance": "a"},
        {"topic": "t", "partition": 1, "instance": "b"},
        {"topic": "u", "partition": 0, "instance": "b"},
    ]
