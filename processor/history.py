"""The last minutes of each topic's figures on this instance, for the console's charts.

Every :data:`INTERVAL_S` seconds a sample is taken from the process's own Prometheus
metrics (:mod:`processor.metrics`): per topic, the consumer lag summed over the
partitions this instance owns, and the counters of events in, events out and dead
letters. The last :data:`WINDOW_S` seconds of samples are kept (a fixed number:
memory does not grow with time), and rates are the counters' differences between
consecutive samples. Nothing is stored: a restarted processor starts a new history.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from processor import metrics

INTERVAL_S = 5.0
WINDOW_S = 900.0

#: A sample's figures: per topic, per figure.
Figures = dict[str, dict[str, float]]

#: The figures sampled, and the metric each is read from (a gauge summed over the
#: topic's partitions, or a counter summed over its other labels).
_SAMPLED: dict[str, MetricWrapperBase] = {
    "lag": metrics.CONSUMER_LAG,
    "in": metrics.EVENTS_IN,
    "out": metrics.EVENTS_OUT,
    "dead_letters": metrics.DEAD_LETTERS,
}
#: The figures that are counters: shown as rates per second.
_COUNTED = ("in", "out", "dead_letters")


def read_figures(sampled: dict[str, MetricWrapperBase] = _SAMPLED) -> Figures:
    """Each topic's figures now, from ``sampled``'s metrics."""
    figures: Figures = collections.defaultdict(dict)
    for figure, metric in sampled.items():
        for family in metric.collect():
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                topic = sample.labels.get("topic")
                if topic is not None:
                    held = figures[topic]
                    held[figure] = held.get(figure, 0.0) + sample.value
    return dict(figures)


class History:
    """The samples of the last ``window_s`` seconds, one every ``interval_s``."""

    def __init__(
        self,
        read: Callable[[], Figures] = read_figures,
        window_s: float = WINDOW_S,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval_s, self.window_s = interval_s, window_s
        self._read, self._clock = read, clock
        # one more than the window holds: the first sample's rates need the one before it
        self._samples: collections.deque[tuple[float, Figures]] = collections.deque(
            maxlen=int(window_s / interval_s) + 1
        )

    def sample(self) -> None:
        """Take one sample now."""
        self._samples.append((self._clock(), self._read()))

    def document(self, since_ms: int = 0) -> dict[str, Any]:
        """The samples taken after ``since_ms``, oldest first: per topic its lag and its
        counters' rates per second since the sample before (the oldest sample kept only
        lends its counts). A page that has the samples up to ``since_ms`` asks for the rest."""
        return {
            "interval_s": self.interval_s,
            "window_s": self.window_s,
            "samples": [
                {"at_ms": round(at * 1000), "topics": _rates(before, figures, at - then)}
                for (then, before), (at, figures) in _pairs(self._samples)
                if round(at * 1000) > since_ms
            ],
        }


def _pairs(
    samples: Iterable[tuple[float, Figures]],
) -> Iterable[tuple[tuple[float, Figures], tuple[float, Figures]]]:
    listed = list(samples)
    return zip(listed, listed[1:], strict=False)


def _rates(before: Figures, figures: Figures, seconds: float) -> dict[str, dict[str, float]]:
    shown: dict[str, dict[str, float]] = {}
    for topic, now in figures.items():
        then = before.get(topic, {})
        topic_shown = shown[topic] = {}
        if "lag" in now:
            topic_shown["lag"] = now["lag"]
        for figure in _COUNTED:
            if figure in now:
                # a counter starts at 0 when the process starts; it never goes down
                grown = max(0.0, now[figure] - then.get(figure, 0.0))
                topic_shown[f"{figure}_per_s"] = round(grown / seconds, 3) if seconds > 0 else 0.0
    return shown
