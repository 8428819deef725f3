"""Chunk sizes adapt to how long chunks take (the reads themselves: tests/integration)."""

from __future__ import annotations

from processor.chunks import next_chunk_size


def test_chunk_size_adapts_within_bounds() -> None:
    assert next_chunk_size(1024, 0.01, 1.0, 64, 8192) == 2048
    assert next_chunk_size(8192, 0.01, 1.0, 64, 8192) == 8192
    assert next_chunk_size(1024, 3.0, 1.0, 64, 8192) == 512
    assert next_chunk_size(64, 3.0, 1.0, 64, 8192) == 64
    assert next_chunk_size(1024, 1.0, 1.0, 64, 8192) == 1024
