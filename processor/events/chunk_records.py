"""A backfill topic's records: a chunk's rows, a few to a record, framed per partition.

A chunk row is the Debezium event of its key (the key and value bytes
:class:`~processor.snapshot.chunk_events.TableShape` makes), but rows do not travel one
to a Kafka record. The rows of a chunk that go to one partition (the partition the
change topic's partitioner gives their keys) are framed (:mod:`tidemark.core.frames`) up to
:data:`ROWS_PER_RECORD` to a record, in key order, with the chunk's tag
(:mod:`processor.events.chunk_tag`) and a ``tidemark.rows`` header that counts them. The
producer's and the consumer's calls, librdkafka's bookkeeping of each message and the
tag's headers are then paid per record, not per row.

The data plane reads a framed record back as its rows (:func:`rows_of`), each a message
of its own at the record's offset. A record is consumed, decided and committed whole,
in one batch, so its offset is committed only once all of its rows are decided.
(Where the input topic is refused at a row inside a record, the topic resumes at the
record's offset: the rows before that one are emitted again, as a chunk read twice
is.) A record without the header is one row, as chunk readers wrote them before
framing.
"""

from __future__ import annotations

from typing import Any

from tidemark.core.frames import FRAMING, frame, unframe_messages
from tidemark.core.messages import RawMessage

ROWS_HEADER = "tidemark.rows"
#: At most this many rows to a record. 16 rather than 4: fewer records cut the reader's,
#: the broker's and the data plane's CPU per row (``bench/backfill.py``). A data plane
#: batch counts a backfill record as this many rows
#: (:func:`processor.dataplane.batch_limit.take_batch`), so its memory does not grow
#: with it.
ROWS_PER_RECORD = 16
#: A record's frames stop at this many bytes; a row this large or larger goes alone.
BYTES_PER_RECORD = 64 << 10

Row = tuple[bytes, bytes]


def records(rows: list[Row], partitions: list[int]) -> list[tuple[int, int, bytes]]:
    """``rows`` (key and value bytes) framed into records, ``(partition, rows, value)``:
    each partition's rows in the order of ``rows``, ``partitions`` being theirs."""
    by_partition: dict[int, list[Row]] = {}
    for row, partition in zip(rows, partitions, strict=True):
        found = by_partition.get(partition)
        if found is None:
            found = by_partition[partition] = []
        found.append(row)
    out = []
    for partition, group in by_partition.items():
        start, end = 0, len(group)
        while start < end:
            stop = start + 1
            size = len(group[start][0]) + len(group[start][1]) + FRAMING
            while stop < end and stop - start < ROWS_PER_RECORD:
                size += len(group[stop][0]) + len(group[stop][1]) + FRAMING
                if size > BYTES_PER_RECORD:
                    break
                stop += 1
            out.append((partition, stop - start, frame(group, start, stop)))
            start = stop
    return out


def rows_header(count: int) -> tuple[str, bytes]:
    """The header that says a record frames ``count`` rows."""
    return ROWS_HEADER, str(count).encode()


def framed_rows(headers: Any) -> bytes | None:
    """The ``tidemark.rows`` header's value in a message's ``headers`` (its list of pairs;
    ``None``: the record is one row, unframed)."""
    for name, value in headers or ():
        if name == ROWS_HEADER:
            return value if isinstance(value, bytes) else b""
    return None


def rows_of(
    topic: str, partition: int, offset: int, value: bytes | None, chunk: Any, count: bytes
) -> list[RawMessage] | None:
    """The rows a framed record holds, each a message at the record's ``offset`` with its
    ``chunk`` tag; ``None`` if its value is not ``count`` whole frames (the record is then
    decided as it is, and dead-lettered whole)."""
    if value is None or not count.isdigit() or len(count) > 9:
        return None
    return unframe_messages(RawMessage, topic, partition, offset, chunk, value, int(count))
