"""The run that holds a fused path to the general path, shared by the fast-path tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from processor.reconcile.batch import FUSED_WINDOW, Batch, Reconciler
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tidemark.core.messages import RawMessage


def decide_alike(
    data: st.DataObject,
    stream: list[RawMessage],
    reconcilers: tuple[Reconciler, Reconciler],
    seen: Callable[[Batch], Any],
) -> None:
    """Decide ``stream`` (one partition) in drawn batches, rewinds among them, with the fused
    paths (the first reconciler) and with the general path alone (the second, made with
    ``processor.fused_paths`` false), and assert that each batch is ``seen`` alike, refusals
    too. Each store commits what its reconciler
    decided, with a drawn checkpoint; a refused topic ends the run."""
    fast, general = reconcilers
    assert fast.fused and not general.fused
    tp = (stream[0].topic, stream[0].partition)
    fast_store, general_store = MemoryPartitionStore(), MemoryPartitionStore()
    start = 0
    while start < len(stream):
        size = data.draw(st.integers(1, 12))
        if data.draw(st.booleans()) and start:  # a rewind: replay some earlier offsets
            start = data.draw(st.integers(0, start - 1))
        groups = {tp: stream[start : start + size]}
        # The fused path's window after a message it declined, small ones among them.
        fast.fused_window = data.draw(st.sampled_from([1, 2, 3, FUSED_WINDOW]))
        decided = fast.decide(groups, {tp: fast_store})
        expected = general.decide(groups, {tp: general_store})
        assert seen(decided) == seen(expected)
        assert fast.refused == general.refused
        if fast.refused:
            break  # the topic stays stopped: nothing more to decide
        flushed = decided.next_offsets[tp] if data.draw(st.booleans()) else None
        fast_store.commit(decided.states[tp].updates, Checkpoint(flushed))
        general_store.commit(expected.states[tp].updates, Checkpoint(flushed))
        start += size
