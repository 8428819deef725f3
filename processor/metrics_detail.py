"""``/metrics`` at the detail an estate can afford (``processor.metrics_detail``).

The processor counts per input topic and per input partition, so an instance that holds
500 tables of three partitions serves thousands of series. The detail is chosen where
the metrics are served, not where they are counted: the code keeps one way to count,
and a coarser detail sums the series of the labels it leaves out:

- ``partition``: every series as counted;
- ``topic``: no ``partition`` label (a topic's lag is the sum of its partitions');
  the shipped alerts and dashboard aggregate by topic at most, so they work unchanged;
- ``pipeline``: no ``partition``, ``topic`` or ``table`` label either.

Both coarser details also leave out the ``_created`` series of counters and histograms
(when each series began): one more series per counted one, that a sum makes meaningless.

A sum is what a count or a lag means over many series. Others are not sums: a 0/1 flag
(a topic or a partition refused) is 1 if any of its series is, so alerts on ``== 1``
still fire; a snapshot's progress and time left become the least progress and the
longest time left.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from tidemark.core.config import MetricsDetail

DETAILS: tuple[MetricsDetail, ...] = typing.get_args(MetricsDetail)
#: The labels each detail leaves out.
DROPPED: dict[str, frozenset[str]] = {
    "partition": frozenset(),
    "topic": frozenset({"partition"}),
    "pipeline": frozenset({"partition", "topic", "table"}),
}
#: Samples whose series are not summed: the smallest (the least progress) or the largest
#: value (a flag set, the longest time left) stands for them.
SMALLEST = ("tidemark_snapshot_progress_ratio",)
LARGEST = (
    "tidemark_snapshot_remaining_seconds",
    "tidemark_source_refused",
    "tidemark_partition_refused",
)


class Coarser:
    """``registry``'s families with the labels ``dropped`` aggregated away."""

    def __init__(self, registry: Collector, dropped: frozenset[str]) -> None:
        self._registry = registry
        self._dropped = dropped

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            yield coarsen(family, self._dropped)


def coarsen(family: Metric, dropped: frozenset[str]) -> Metric:
    """``family`` with the labels ``dropped`` (none: ``family`` as it is) and the
    ``_created`` samples left out, and the samples they told apart aggregated (see the
    module's rules)."""
    if not dropped:
        return family
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in family.samples:
        if sample.name.endswith("_created"):
            continue
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in dropped))
        key = (sample.name, labels)
        found = values.get(key)
        if found is None:
            values[key] = sample.value
        elif sample.name in SMALLEST:
            values[key] = min(found, sample.value)
        elif sample.name in LARGEST:
            values[key] = max(found, sample.value)
        else:
            values[key] = found + sample.value
    out = Metric(family.name, family.documentation, family.type, family.unit)
    for (name, labels), value in values.items():
        out.add_sample(name, dict(labels), value)
    return out


def exposition(registry: CollectorRegistry, detail: MetricsDetail) -> bytes:
    """The text ``/metrics`` serves: ``registry``'s metrics at ``detail``."""
    dropped = DROPPED[detail]
    if not dropped:
        return generate_latest(registry)
    return generate_latest(Coarser(registry, dropped))
