"""A removed table's series leave ``/metrics`` (:func:`processor.metrics.forget_topics`):
at 500 tables, series of tables that are gone would otherwise pile up until a restart."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.metrics import MetricWrapperBase

import processor.metrics as metrics
from processor.reconcile.batch import Reconciler
from tidemark.core.config import Config


def test_every_family_labelled_by_topic_is_forgotten_with_its_table() -> None:
    labelled = {
        m._name  # noqa: SLF001 - which families take a topic label
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase) and "topic" in m._labelnames  # noqa: SLF001
    }
    assert labelled == {m._name for m in metrics.BY_TOPIC}  # noqa: SLF001


def test_a_forgotten_topics_series_are_gone_and_the_others_stay() -> None:
    gone, kept = "rm.public.gone_t", "rm.public.kept_t"
    for topic in (gone, kept):
        metrics.EVENTS_IN.labels(topic).inc()
        metrics.DEAD_LETTERS.labels(topic, "decode").inc()
        metrics.CONSUMER_LAG.labels(topic, "0").set(3)
        metrics.CONSUMER_LAG.labels(topic, "1").set(4)
        metrics.WINDOW_BUFFERED_ROWS.labels(topic).set(0)
    metrics.forget_topics([gone, "rm.public.never_seen"])
    text = generate_latest(REGISTRY).decode()
    assert f'topic="{gone}"' not in text
    assert text.count(f'topic="{kept}"') >= 5
    metrics.forget_topics([kept])
    assert f'topic="{kept}"' not in generate_latest(REGISTRY).decode()


def test_a_removed_topic_is_no_longer_refused_so_a_table_made_again_starts_afresh() -> None:
    """The refusal goes with the series that say it: a table made again under the name
    of one whose topic was stopped must not stay stopped, its alert silent."""
    reconciler = Reconciler(Config())
    gone, kept = "rm.public.gone_t", "rm.public.kept_t"
    for topic in (gone, kept):
        reconciler.refuse_topic(topic, "broke its envelope")
        reconciler.refused_partitions[(topic, 1)] = "positions went back"
    reconciler.forget_topic(gone)
    assert not reconciler.stopped((gone, 0)) and not reconciler.stopped((gone, 1))
    assert reconciler.stopped((kept, 0)) and reconciler.stopped((kept, 1))
