"""Where the sink reads a partition to: its last stable offset, unless the broker holds
that behind for good.

The sink reads ``read_committed``: up to a partition's last stable offset, the start
of its oldest open transaction. Kafka aborts a transaction its producer left open
after the producer's ``transaction.timeout.ms`` (60 s by default), so the stable
offset passes it within that time. The embedded broker never does: after a processor
died inside a transaction, the stable offset of every partition that transaction
wrote reads 0 until a producer with the same transactional id starts, which may be
never. The sink then read nothing of that partition and said nothing: a table stayed
behind its topic for good.

So a partition whose stable offset has not moved, and has stayed behind the
partition's high watermark, for ``sink.stuck_transaction_s`` is read to its high watermark
(on the embedded broker a ``read_committed`` reader is given every record anyway).
A busy partition's stable offset is behind at nearly every look, and moves: it is not
held.
"""

from __future__ import annotations

from typing import NamedTuple


class Behind(NamedTuple):
    """A partition's stable offset behind its high watermark: the offset, and since
    when (monotonic seconds) it has stayed there."""

    stable: int
    since: float


def read_ends(
    stable: dict[int, int],
    high: dict[int, int],
    behind: dict[int, Behind],
    now: float,
    stuck_after_s: float,
) -> tuple[dict[int, int], dict[int, Behind]]:
    """``(the end to read each partition to, the partitions behind now)`` from each
    partition's stable end, its high watermark and the partitions ``behind`` at the last
    look; a stable end still for ``stuck_after_s`` is passed."""
    ends: dict[int, int] = {}
    still: dict[int, Behind] = {}
    for partition, end in stable.items():
        top = high.get(partition, end)
        if top <= end:
            ends[partition] = end
            continue
        last = behind.get(partition)
        held = last if last is not None and last.stable == end else Behind(end, now)
        still[partition] = held
        ends[partition] = top if now - held.since >= stuck_after_s else end
    return ends, still
