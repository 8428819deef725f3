"""Interpreter settings for the processes that do per-event work (data plane, chunk reader)."""

from __future__ import annotations

import ctypes
import gc


def tune_garbage_collector() -> None:
    """Collect young objects once per batch or so, not hundreds of times.

    Every decoded event allocates a few dicts that live until its batch is
    committed, so CPython's default young-generation threshold (700) runs the
    cyclic collector constantly, over a heap that is mostly long-lived objects
    of the worker. Freezing what exists at start and raising the threshold cuts
    a large share of the processor's CPU per event (measured with ``bench/envelopes.py``).
    """
    gc.freeze()
    gc.set_threshold(100_000, 20, 100)


#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(trim_threshold: int = 256 << 20, mmap_threshold: int = 32 << 20) -> bool:
    """Keep memory the process frees for its next allocations instead of giving it back.

    A chunk reader encodes a chunk (tens of MB of short-lived bytes) and frees it, chunk
    after chunk. glibc gave the freed top of the heap back to the kernel each time and
    the next chunk faulted it in again: page faults and allocator work were a fifth of
    the reader's CPU (``perf`` on ``bench/backfill.py``). With these thresholds the heap
    stays as large as one chunk made it, which bounds it as before. ``False`` where the
    C library is not glibc: nothing is tuned.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold) and mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
    )
