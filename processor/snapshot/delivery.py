"""Whether the data plane has read a backfilled table's rows: the rule that completes it.

A table's chunk rows are in Kafka once the coordinator has read it whole, but they are
only in the reconciled topic once the data plane has read them, and a backfill topic
keeps rows for ``kafka.queue_retention_ms``: a pipeline paused or stopped for longer
loses them unread. So a table read whole is ``delivering`` until the data plane's
committed offsets pass where its backfill topic ended after its last row, and is
aborted, with the reason, if rows of it expired before the data plane read them.
"""

from __future__ import annotations

from typing import NamedTuple


class Delivery(NamedTuple):
    """What the data plane's offsets say of a table's rows."""

    passed: bool
    #: Why some of the rows can never be read (``None``: none lost).
    lost: str | None = None


def delivery(
    starts: dict[str, int] | None,
    ends: dict[str, int],
    committed: dict[int, int | None],
    lows: dict[int, int],
) -> Delivery:
    """The rows between ``starts`` and ``ends`` (offsets by partition number as text; no
    ``starts``: from each partition's first offset), against the data plane group's
    ``committed`` offsets (the next it reads; ``None``: never committed) and the
    partitions' first kept offsets, ``lows``."""
    passed = True
    for text, end in ends.items():
        partition = int(text)
        start = (starts or {}).get(text, 0)
        read = committed.get(partition)
        next_read = start if read is None else max(read, start)
        if next_read >= end:
            continue
        passed = False
        low = lows.get(partition, 0)
        if low > next_read:
            return Delivery(
                False,
                f"rows at offsets {next_read} to {min(low, end) - 1} of partition {partition} "
                "of its backfill topic expired before the data plane read them "
                "(kafka.queue_retention_ms): backfill the table again",
            )
    return Delivery(passed)
