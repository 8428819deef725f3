"""Whether a change topic's events sit where ``source.partitioner`` puts their keys.

Backfilled rows are produced with ``source.partitioner``. If the change topic was
written with another (librdkafka's CRC32 default, a custom partitioner, Debezium's
``PartitionRouting``, a copy with another partition count), a row would be decided
against another partition's state and land beside its key's real history. The
data plane checks the first change of each partition in each batch: a handful of
hashes per batch, never one per event. A contradiction is counted in
``tidemark_partitioner_mismatches_total`` and logged once per topic with the
partitioners that fit what was seen. The snapshot coordinator refuses backfills
of such a topic by its own check (:mod:`processor.snapshot.tables`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping

from processor import metrics
from tidemark.core.messages import RawMessage
from tidemark.core.partitioners import Partitioner, fitting, partition_of

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]


class PartitionerWatch:
    """Samples change events against the configured partitioner."""

    #: Samples kept per topic, to name the partitioner that fits.
    SAMPLES = 64

    def __init__(
        self, partitioner: Partitioner, partition_count: Callable[[str], int], skip_prefix: str
    ) -> None:
        """``partition_count``: a topic's partitions (0 while unknown)."""
        self._partitioner = partitioner
        self._partition_count = partition_count
        self._skip = skip_prefix  # backfill topics: the backfill's own producer wrote them
        self._samples: dict[str, deque[tuple[bytes, int]]] = {}
        #: Topics whose events contradict the partitioner, with the partitioners that fit.
        self.contradicted: dict[str, list[Partitioner]] = {}

    def observe(self, groups: Mapping[TopicPartitionKey, list[RawMessage]]) -> None:
        """Check the first keyed message of each partition's run."""
        for (topic, partition), group in groups.items():
            if topic.startswith(self._skip):
                continue
            key = next((m.key for m in group if m.key is not None), None)
            if key is None:
                continue
            count = self._partition_count(topic)
            if count <= partition:  # not listed yet
                continue
            samples = self._samples.setdefault(topic, deque(maxlen=self.SAMPLES))
            samples.append((key, partition))
            if partition_of(self._partitioner, key, count) == partition:
                continue
            metrics.PARTITIONER_MISMATCHES.labels(topic).inc()
            first = topic not in self.contradicted
            fits = self.contradicted[topic] = fitting(samples, count)  # narrowed as samples come
            if first:
                log.warning(
                    "%s: a key in partition %d is not where %s (source.partitioner) puts it; "
                    "a backfill of it checks again and is refused unless these are strays. "
                    "Partitioners that fit its events: %s",
                    topic,
                    partition,
                    self._partitioner,
                    ", ".join(fits) or "none known",
                )
