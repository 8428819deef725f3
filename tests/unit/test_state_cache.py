"""The cache of recently written values answers as its store does, and stays bounded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state.cache import ENTRY_OVERHEAD, CacheBudget, CachedStore
from state.memory import MemoryPartitionStore
from state.store import Checkpoint


class CountingStore(MemoryPartitionStore):
    """A memory store that records the keys read from it and can fail its next commit."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[bytes] = []
        self.fail_next_commit = False

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self.read += keys
        return super().get_many(keys)

    def commit(self, updates: Mapping[bytes, bytes | None], checkpoint: Checkpoint) -> None:
        if self.fail_next_commit:
            self.fail_next_commit = False
            raise OSError("disk full")
        super().commit(updates, checkpoint)


KEYS = st.sampled_from([b"k%d" % i for i in range(12)])
VALUES = st.none() | st.binary(min_size=1, max_size=40)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.dictionaries(KEYS, VALUES, max_size=6)),
        st.tuples(st.just("read"), st.lists(KEYS, max_size=8)),
        st.tuples(st.just("fail"), st.dictionaries(KEYS, VALUES, min_size=1, max_size=3)),
        st.tuples(st.just("wipe"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, budget=st.integers(0, 4000))
def test_the_cached_store_reads_as_its_store_does(
    ops: list[tuple[str, object]], budget: int
) -> None:
    """Whatever the budget (down to none) and whatever fails, every read is the store's."""
    inner = CountingStore()
    cached = CachedStore(inner, CacheBudget(budget))
    every = [b"k%d" % i for i in range(12)]
    for offset, (op, arg) in enumerate(ops):
        if op == "commit":
            cached.commit(arg, Checkpoint(offset))  # type: ignore[arg-type]
        elif op == "fail":
            inner.fail_next_commit = True
            with pytest.raises(OSError):
                cached.commit(arg, Checkpoint(offset))  # type: ignore[arg-type]
        elif op == "wipe":
            cached.wipe()
        else:
            keys: list[bytes] = arg  # type: ignore[assignment]
            assert cached.get_many(keys) == inner.get_many(keys)
        assert cached.get_many(every) == inner.get_many(every)
        assert cached.checkpoint() == inner.checkpoint()


def test_a_key_read_as_present_is_cached_with_its_writes_and_a_key_only_written_is_not() -> None:
    """As a backfill writes rows never read, they stay out, and the live keys stay in."""
    inner = CountingStore()
    cached = CachedStore(inner, CacheBudget(1 << 20))
    cached.commit({b"live": b"1", b"row": b"r"}, Checkpoint(1))
    assert cached.get_many([b"live"]) == [b"1"] and inner.read == [b"live"]  # admitted
    cached.commit({b"live": b"2", b"other": b"o"}, Checkpoint(2))
    inner.read.clear()
    assert cached.get_many([b"live", b"row", b"other"]) == [b"2", b"r", b"o"]
    assert inner.read == [b"row", b"other"]  # written, never read: not cached until now
    inner.read.clear()
    assert cached.get_many([b"row", b"other", b"absent"]) == [b"r", b"o", None]
    assert inner.read == [b"absent"]  # "absent" is never cached


def test_older_values_are_dropped_a_generation_at_a_time() -> None:
    value = b"v" * 100
    entry = 2 + len(value) + ENTRY_OVERHEAD  # a key of two bytes
    inner = CountingStore()
    cached = CachedStore(inner, CacheBudget(2 * 10 * entry))  # generations of 10 entries
    for key in range(30):
        cached.commit({b"%02d" % key: value}, Checkpoint(key))
        assert cached.get_many([b"%02d" % key]) == [value]  # admitted, one at a time
    cached.commit({b"15": None, b"25": None}, Checkpoint(30))  # one old, one young
    inner.read.clear()
    expected = [None if key in (15, 25) else value for key in range(30)]
    assert cached.get_many([b"%02d" % key for key in range(30)]) == expected
    # Reads 21 to 29 fill the young generation, 11 to 20 the old one; the rest was dropped.
    # The deleted keys left the cache with their delete.
    assert inner.read == [b"%02d" % key for key in [*range(11), 15, 25]]


def test_deletes_wipes_and_closes_forget_values_and_stores_share_the_budget() -> None:
    budget = CacheBudget(1 << 20)
    first, second = CountingStore(), CountingStore()
    cached = CachedStore(first, budget)
    other = CachedStore(second, budget)
    assert budget.open_stores == 2 and budget.generation_bytes() == (1 << 20) // 4
    cached.commit({b"a": b"1", b"b": b"2"}, Checkpoint(1))
    assert cached.get_many([b"a", b"b"]) == [b"1", b"2"]  # both admitted
    cached.commit({b"a": None}, Checkpoint(2))
    first.read.clear()
    assert cached.get_many([b"a", b"b"]) == [None, b"2"]
    assert first.read == [b"a"]  # the deleted key is asked of the store, the other is not
    cached.wipe()
    assert cached.get_many([b"b"]) == [None] and first.read[-1] == b"b"
    other.close()
    assert budget.open_stores == 1 and budget.generation_bytes() == (1 << 20) // 2
