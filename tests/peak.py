"""Peak Python memory of a piece of work (tracemalloc), for tests that show it stays flat."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable


def peak_bytes(work: Callable[[], object]) -> int:
    """The most memory Python held, above what it held before, while ``work`` ran."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
