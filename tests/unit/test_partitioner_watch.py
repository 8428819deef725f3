"""The data plane's sampling of change events against ``source.partitioner``."""

from __future__ import annotations

from processor.dataplane.partitioner_watch import PartitionerWatch
from tidemark.core.messages import RawMessage
from tidemark.core.partitioners import partition_of

KEYS = [f'{{"id":{i}}}'.encode() for i in range(40)]


def batch(partitioner: str, topic: str = "t") -> dict[tuple[str, int], list[RawMessage]]:
    groups: dict[tuple[str, int], list[RawMessage]] = {}
    for offset, key in enumerate(KEYS):
        partition = partition_of(partitioner, key, 6)  # type: ignore[arg-type]
        groups.setdefault((topic, partition), []).append(
            RawMessage(topic, partition, offset, key, b"{}")
        )
    return groups


def test_events_of_another_partitioner_are_named_with_the_one_that_fits() -> None:
    watch = PartitionerWatch("murmur2", lambda _topic: 6, "p.backfill.")
    watch.observe(batch("murmur2"))
    assert watch.contradicted == {}
    for _ in range(3):
        watch.observe(batch("crc32", "u"))
    assert watch.contradicted == {"u": ["crc32"]}


def test_backfill_topics_and_unlisted_topics_are_not_checked() -> None:
    watch = PartitionerWatch("murmur2", lambda topic: 0 if topic == "new" else 6, "p.backfill.")
    watch.observe(batch("fnv1a", "p.backfill.t"))
    watch.observe(batch("fnv1a", "new"))
    assert watch.contradicted == {}
