"""Chunk sizes adapt to how long chunks take; an unreachable source is a retry, not a refusal.

The reads themselves: tests/integration/test_chunks.py.
"""

from __future__ import annotations

import pytest

from processor.errors import SourceUnavailableError
from processor.snapshot.chunk_reader import next_chunk_size
from processor.snapshot.postgres.reader import PostgresChunkReader
from tidemark.core.ports import free_port


def test_chunk_size_adapts_within_bounds() -> None:
    assert next_chunk_size(1024, 0.01, 1.0, 64, 8192) == 2048
    assert next_chunk_size(8192, 0.01, 1.0, 64, 8192) == 8192
    assert next_chunk_size(1024, 3.0, 1.0, 64, 8192) == 512
    assert next_chunk_size(64, 3.0, 1.0, 64, 8192) == 64
    assert next_chunk_size(1024, 1.0, 1.0, 64, 8192) == 1024


def test_a_source_that_cannot_be_reached_is_worth_retrying() -> None:
    """Not a refusal of the table: the coordinator retries :class:`SourceUnavailableError`."""
    with pytest.raises(SourceUnavailableError, match="cannot connect"):
        PostgresChunkReader({"host": "127.0.0.1", "port": free_port(), "connect_timeout": 2})
