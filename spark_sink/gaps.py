"""Gaps a table cannot bridge: records of its topic gone before the sink read them.

Reconciled topics are compacted. Compaction keeps a key's newest record, and removes a
delete's tombstone ``delete.retention.ms`` after it cleaned it: a table that has not read
that far by then never sees the delete, and keeps the row. A topic deleted and made
again starts at offset 0 below the table's offsets, and retention or ``delete_records``
can move a topic's start past them. Merging on from there would look fine and be wrong,
so the sink does not merge on:

- records removed by compaction alone leave every key's newest record in the topic, so
  the table is rebuilt from the whole topic (``sink.rebuild_on_gap``) or stops;
- a topic made again, or whose start moved, has lost keys for good: the table stops
  with the reason (``docs: Sink, gaps``).

The sink keeps, per partition, a time before which no unread record was written: the
time it read the partition's end when it was caught up, or when a batch that reached
the end it read committed. Only when that time is older than the retention, or
unknown, does it look at the first unread record itself (:func:`gap` takes what it
found). A first unread record past the committed offset (a transaction's marker there,
or records compaction removed) leaves the time unknown; the sink then dates the unread
records by the record just before the committed offset, if it is still there
(``Sink._dated_by_last_read``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The broker's default ``delete.retention.ms``, for a topic whose settings do not say.
BROKER_DELETE_RETENTION_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class Partition:
    """What the sink knows of one partition of a table's topic."""

    partition: int
    #: The next offset the table reads; ``None`` before its first commit of this partition.
    committed: int | None
    #: The topic's first and next offsets.
    start: int
    end: int
    #: Every unread record was written after this time (ms); ``None``: not known.
    unread_since_ms: int | None


@dataclass(frozen=True)
class Gap:
    """Why a table cannot merge one of its partitions on."""

    reason: str
    #: Whether the topic still holds every key's newest record, so that the table can be
    #: made again from the whole topic.
    rebuildable: bool


@dataclass(frozen=True)
class FirstUnread:
    """The first record at or after a partition's committed offset."""

    offset: int
    timestamp_ms: int


def unread_age_ms(p: Partition, now_ms: int) -> int:
    """How long the partition's oldest unread record may have waited: 0 when none waits."""
    if p.committed is None or p.committed >= p.end or p.unread_since_ms is None:
        return 0
    return max(0, now_ms - p.unread_since_ms)


def needs_first_unread(p: Partition, now_ms: int, retention_ms: int | None) -> bool:
    """Whether :func:`gap` needs the first unread record: records wait, and the time the
    sink keeps cannot show they are younger than the retention."""
    if retention_ms is None or p.committed is None or not p.start <= p.committed < p.end:
        return False
    return p.unread_since_ms is None or now_ms - p.unread_since_ms > retention_ms


def gap(
    topic: str,
    p: Partition,
    now_ms: int,
    retention_ms: int | None,
    first: FirstUnread | None = None,
) -> Gap | None:
    """Why the table of ``topic`` cannot merge partition ``p`` on, or ``None``.

    ``retention_ms`` is the topic's ``delete.retention.ms`` (``None`` for a topic that is
    not compacted); ``first`` the first unread record where :func:`needs_first_unread`
    asked for it. A first unread record at the committed offset dates every unread
    record; one past it may follow records removed in between, and only the kept time
    (or the time of the record before the committed offset) can date those.
    """
    where = f"{topic}[{p.partition}]"
    if p.committed is None:
        return None
    if p.committed > p.end:
        return Gap(
            f"{where}: the table has read to offset {p.committed} but the topic ends at "
            f"{p.end}: the topic was deleted and made again (docs: Sink, gaps)",
            rebuildable=False,
        )
    if p.committed < p.start:
        return Gap(
            f"{where}: offsets {p.committed} to {p.start} were deleted before the table "
            "read them, by retention or delete_records (docs: Sink, gaps)",
            rebuildable=False,
        )
    if not needs_first_unread(p, now_ms, retention_ms):
        return None
    assert retention_ms is not None
    since = p.unread_since_ms
    if first is not None and first.offset == p.committed:
        since = first.timestamp_ms
    if since is not None and now_ms - since <= retention_ms:
        return None
    waited = "an unknown time" if since is None else f"{(now_ms - since) / 3_600_000:.1f} h"
    return Gap(
        f"{where}: records from offset {p.committed} waited {waited} unread, longer than "
        f"the topic's delete.retention.ms ({retention_ms / 3_600_000:.1f} h): compaction "
        "may have removed deletes the table never saw (docs: Sink, gaps)",
        rebuildable=True,
    )
