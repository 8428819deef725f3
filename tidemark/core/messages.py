"""A message as read from Kafka: where it came from and its bytes."""

from __future__ import annotations

from typing import Any, NamedTuple


class RawMessage(NamedTuple):
    """Where a message came from and its bytes (a tuple: cheap to make, one per message)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: For a record of a backfill topic: its chunk, read from the headers
    #: (:class:`processor.events.chunk_tag.ChunkTag`; ``None`` if unreadable).
    chunk: Any = None
