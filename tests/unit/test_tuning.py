"""Interpreter and allocator settings of the per-event processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Run in a process of its own: what it frees, and what the allocator keeps, is its alone.
_FREE_A_CHUNK = """
import os, sys
from processor.tuning import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
statm, page = os.open("/proc/self/statm", os.O_RDONLY), os.sysconf("SC_PAGE_SIZE")
def rss():  # no allocation above the freed heap: a small read, from Python's own pools
    return int(os.pread(statm, 100, 0).split()[1]) * page
rows = [bytes(3000) for _ in range(20_000)]  # a chunk's events: 60 MB
held = rss()
del rows
print((held - rss()) >> 20)
"""


def _given_back_mb(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _FREE_A_CHUNK, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.allocator
def test_memory_a_chunk_freed_stays_with_the_process_for_the_next_chunk() -> None:
    assert _given_back_mb("default") >= 50  # glibc's own thresholds give it back
    assert _given_back_mb("keep") <= 5
