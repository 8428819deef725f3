"""Backfill topics: where an incremental snapshot's chunk rows travel to the data plane.

Chunk rows go to ``<pipeline>.backfill.<input topic>``, created with the input
topic's partition count. Each row is written to the partition Kafka's default
partitioner gives its key, so partition ``p`` of the backfill topic holds rows
of exactly the keys whose changes are in partition ``p`` of the input topic.
The data plane subscribes to both with the range assignor, which gives the
same partition of co-partitioned topics to the same instance, and decides a
backfill record against the state of the input partition it belongs to.

A record frames a few of a chunk's rows of one partition
(:mod:`processor.events.chunk_records`, whose ``tidemark.rows`` header counts them),
and carries the chunk's three headers: ``tidemark.chunk`` (the chunk's number, which
only grows across every snapshot of the pipeline), what the chunk saw
(:mod:`processor.events.visibility`): ``tidemark.snapshot``, the ``pg_snapshot`` it was
read in (read-only mode), or ``tidemark.window``, its signal-table window; and
``tidemark.request`` (the id of the signal that asked for the snapshot).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from processor.errors import SnapshotFormatError
from processor.events.visibility import PgSnapshot, Window

CHUNK_HEADER = "tidemark.chunk"
SNAPSHOT_HEADER = "tidemark.snapshot"
WINDOW_HEADER = "tidemark.window"
REQUEST_HEADER = "tidemark.request"


class Unsigned:
    """The chunk of a backfill record that is not signed with the pipeline's record key
    (:mod:`tidemark.core.record_auth`): it is a dead letter, never a row or a marker."""


#: The one :class:`Unsigned` (a message's ``chunk``).
UNSIGNED = Unsigned()


class ChunkTag(NamedTuple):
    """What a backfill record says about the chunk it belongs to."""

    number: int
    #: The snapshot the chunk was read in, or the window it was read inside.
    read_in: PgSnapshot | Window
    request: str

    def headers(self) -> list[tuple[str, str | bytes | None]]:
        """The record headers that carry this tag."""
        seen = SNAPSHOT_HEADER if isinstance(self.read_in, PgSnapshot) else WINDOW_HEADER
        return [
            (CHUNK_HEADER, str(self.number).encode()),
            (seen, str(self.read_in).encode()),
            (REQUEST_HEADER, self.request.encode()),
        ]


class ChunkTags:
    """Parses chunk tags from headers; a chunk's rows share one snapshot, parsed once,
    and their headers: a row with the previous row's headers has its tag."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, bytes], PgSnapshot | Window] = {}
        self._last: tuple[Any, ChunkTag | None] = (None, None)

    def parse(self, headers: Any) -> ChunkTag | None:
        """The tag in ``headers`` (a message's list of pairs); ``None`` if it lacks one."""
        last_headers, last_tag = self._last
        if headers == last_headers:
            return last_tag
        tag = self._parse(headers)
        self._last = (headers, tag)
        return tag

    def _parse(self, headers: Any) -> ChunkTag | None:
        number = text = kind = None
        request = b""
        for name, value in headers or ():
            if name == CHUNK_HEADER:
                number = value
            elif name == SNAPSHOT_HEADER or name == WINDOW_HEADER:
                kind, text = name, value
            elif name == REQUEST_HEADER:
                request = value
        if not isinstance(number, bytes) or not isinstance(text, bytes) or kind is None:
            return None
        try:
            read_in = self._seen.get((kind, text))
            if read_in is None:
                if len(self._seen) > 64:
                    self._seen.clear()
                parse = PgSnapshot.parse if kind == SNAPSHOT_HEADER else Window.parse
                read_in = self._seen[(kind, text)] = parse(text.decode())
            chunk = int(number)
            if not 0 <= chunk < 1 << 63:
                return None
            return ChunkTag(chunk, read_in, request.decode())
        except (SnapshotFormatError, UnicodeDecodeError, ValueError, AttributeError):
            return None
