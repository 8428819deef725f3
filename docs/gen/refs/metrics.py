"""``reference/metrics.md``: every Prometheus metric of the processor and the sink.

Read from the ``prometheus_client`` objects of ``processor/metrics.py`` and
``spark_sink/metrics.py`` themselves (their name, type, labels and help text), in
the order the modules define them.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.metrics import MetricWrapperBase

from refs.markdown import code, first_paragraph, need, page, table

SOURCES = {"processor": "processor/metrics.py", "sink": "spark_sink/metrics.py"}


@dataclass(frozen=True)
class Metric:
    """One exported metric."""

    component: str
    attribute: str  #: the module's name for it
    name: str  #: as exposed: a counter's ``_total`` included
    type: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()


def exposed_name(collector: MetricWrapperBase) -> str:
    """The name a scrape shows: ``prometheus_client`` keeps a counter's without ``_total``."""
    name: str = collector._name
    return name + "_total" if collector._type == "counter" else name


def collect(component: str, module: types.ModuleType) -> list[Metric]:
    """The metrics ``module`` defines, in its order; :class:`MissingDescriptionError` for
    one with no help text."""
    found = []
    for attribute, value in vars(module).items():
        if not isinstance(value, MetricWrapperBase):
            continue
        name = exposed_name(value)
        text = need(getattr(value, "_documentation", None), f"metric {name} ({component})")
        bounds = getattr(value, "_upper_bounds", ()) if value._type == "histogram" else ()
        found.append(
            Metric(
                component=component,
                attribute=f"{module.__name__}.{attribute}",
                name=name,
                type=str(value._type),
                labels=tuple(value._labelnames),
                help=text,
                buckets=tuple(b for b in bounds if not math.isinf(b)),
            )
        )
    return found


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _row(metric: Metric) -> tuple[str, str, str, str]:
    labels = [code(label) for label in metric.labels]
    text = metric.help.rstrip(".") + "."
    if metric.type == "histogram":
        labels.append(f"{code('le')} (of {code(metric.name + '_bucket')})")
        bounds = ", ".join(_number(b) for b in metric.buckets)
        text += f" Buckets (upper bounds): {bounds}, +Inf."
    return (code(metric.name), metric.type, ", ".join(labels) or "none", text)


def metrics_page(components: Sequence[tuple[str, types.ModuleType]]) -> str:
    """The page for ``components``: (component's name, its metrics module)."""
    sources = ", ".join(code(SOURCES.get(name, m.__name__)) for name, m in components)
    opening = (
        "Every Prometheus metric Tidemark exports, by the component that exports it, with "
        "its exposed name, type, labels and help text. This page is generated from the code: "
        f"the `prometheus_client` collectors of {sources} (see `docs/gen/refs/metrics.py`)."
    )
    notes = (
        "The name shown is the one a scrape shows: a counter's ends in `_total`, and "
        "`prometheus_client` also writes its `<name>_created` series (the name without "
        "`_total`). A histogram is the series `<name>_bucket` (label `le`, one per bucket), "
        "`<name>_count`, `<name>_sum` and `<name>_created`. A labelled metric has no series "
        "until its first label values are used."
    )
    blocks = [notes]
    for name, module in components:
        found = collect(name, module)
        where = first_paragraph(module.__doc__)
        blocks.append(
            "\n\n".join(
                [
                    f"## {name.capitalize()}",
                    f"{where} Defined in {code(SOURCES.get(name, module.__name__))}.",
                    table(["Metric", "Type", "Labels", "Description"], [_row(m) for m in found]),
                ]
            )
        )
    return page("Metrics", opening, *blocks)


def generate() -> str:
    """The page for the processor's and the sink's metrics."""
    import processor.metrics
    import spark_sink.metrics

    return metrics_page([("processor", processor.metrics), ("sink", spark_sink.metrics)])
