"""Interpreter settings for the processes that do per-event work (data plane, chunk reader)."""

from __future__ import annotations

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
