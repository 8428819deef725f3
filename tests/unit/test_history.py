"""The recent figures per topic: read from Prometheus metrics, kept for a window, as rates."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from processor.history import Figures, History, read_figures


def test_figures_are_summed_per_topic_from_the_metrics() -> None:
    registry = CollectorRegistry()
    lag = Gauge("lag", "", ["topic", "partition"], registry=registry)
    dead = Counter("dead", "", ["topic", "reason"], registry=registry)
    lag.labels("t", "0").set(5)
    lag.labels("t", "1").set(7)
    lag.labels("u", "0").set(1)
    dead.labels("t", "malformed").inc(2)
    dead.labels("t", "toast").inc(1)
    figures = read_figures({"lag": lag, "dead_letters": dead})
    assert figures == {"t": {"lag": 12.0, "dead_letters": 3.0}, "u": {"lag": 1.0}}


def test_counters_become_rates_between_samples_and_the_window_forgets() -> None:
    now = [1000.0]
    counts: Figures = {"t": {"in": 0.0, "lag": 0.0}}

    history = History(lambda: {t: dict(f) for t, f in counts.items()}, 20.0, 5.0, lambda: now[0])
    assert history.document()["samples"] == []
    history.sample()
    assert history.document()["samples"] == []  # the first sample only lends its counts
    for step in range(1, 8):
        now[0] += 5.0
        counts["t"]["in"] += 50.0 * step
        counts["t"]["lag"] = float(step)
        if step == 3:
            counts["u"] = {"out": 10.0}  # a topic that appears: counted from 0
        history.sample()
    samples = history.document()["samples"]
    assert len(samples) == 4  # 20 s at one per 5 s
    assert [s["at_ms"] for s in samples] == [1020_000, 1025_000, 1030_000, 1035_000]
    assert [s["topics"]["t"]["in_per_s"] for s in samples] == [40.0, 50.0, 60.0, 70.0]
    assert [s["topics"]["t"]["lag"] for s in samples] == [4.0, 5.0, 6.0, 7.0]
    assert samples[0]["topics"]["u"] == {"out_per_s": 0.0}


def test_a_counter_that_starts_again_never_reads_as_a_negative_rate() -> None:
    now = [0.0]
    value = [100.0]
    history = History(lambda: {"t": {"in": value[0]}}, 60.0, 5.0, lambda: now[0])
    history.sample()
    now[0], value[0] = 5.0, 3.0
    history.sample()
    assert history.document()["samples"][0]["topics"]["t"]["in_per_s"] == 0.0


def test_since_answers_only_the_samples_after_it() -> None:
    now = [1000.0]
    history = History(lambda: {"t": {"in": now[0]}}, 60.0, 5.0, lambda: now[0])
    for _ in range(5):
        history.sample()
        now[0] += 5.0
    every = history.document()["samples"]
    assert [s["at_ms"] for s in every] == [1005_000, 1010_000, 1015_000, 1020_000]
    assert history.document(since_ms=1010_000)["samples"] == every[2:]
    assert history.document(since_ms=1020_000)["samples"] == []
    assert history.document(since_ms=0)["samples"] == every
