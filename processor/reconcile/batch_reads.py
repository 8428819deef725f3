"""What a batch read of an input partition and of its backfill partition, kept until it is done.

A batch's decisions on a partition are a function of the state and of the
messages it read, and most batches read one topic: replayed after a crash, from
the same state, they decide the same, however Kafka splits the replay into
batches. A partition whose batch also read its backfill partition (chunk rows)
or released window-buffered rows is different: its decisions depend on how far
into each topic the batch read. A replay that read more changes before the rows
than the crashed batch did would emit, after rows already emitted, versions
older than them.

So such a batch records its reads before its first output (commit step 2, in
the partition's changelog, under :data:`READS_KEY`) and removes the record
with its state, last (step 3). A record found in a partition's state after a
restore names a batch whose outputs may be in Kafka and whose state is not:
the data plane reads exactly those offsets again as the partition's next batch
(:mod:`processor.dataplane.replay`), so it decides as the crashed batch did.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

#: The state key of a partition's pending batch reads (the reserved ``\\x00`` namespace).
READS_KEY = b"\x00tidemark:batch-reads"

#: The first and last offset a batch read of one partition.
Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class BatchReads:
    """The offsets one batch read of an input partition (``changes``) and of its backfill
    partition (``backfill``); ``None``: nothing of that one."""

    changes: Span | None
    backfill: Span | None

    def encode(self) -> bytes:
        return orjson.dumps({"changes": self.changes, "backfill": self.backfill})

    @staticmethod
    def decode(stored: bytes) -> BatchReads | None:
        """The reads :meth:`encode` wrote; ``None`` for a record it cannot have written."""
        try:
            fields = orjson.loads(stored)
            return BatchReads(_span(fields["changes"]), _span(fields["backfill"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


def _span(value: object) -> Span | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(value)
    first, last = value
    if type(first) is not int or type(last) is not int or not 0 <= first <= last:
        raise ValueError(value)
    return first, last
