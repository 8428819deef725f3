"""A bounded cache of the values a process wrote last, in front of a partition store.

A change mostly touches a key that changed recently, and its rule reads the key's
stored value first. A RocksDB multi-get costs about a microsecond a key even when
the key sits in the memtable; a dict lookup costs a twentieth of that. Kafka
Streams puts a record cache in front of its stores for the same reason.

The cache is written through: :meth:`CachedStore.commit` writes the store first and
the cache only once that write succeeded, so the cache never holds a value the store
lacks. It holds values only, never "absent": most reads of a backfill are of keys the
store never held, and remembering those would crowd out the live ones. Reads do not
fill it: a rule that reads a key also writes it, and that write does.

Memory stays bounded with two dict operations a write and no per-entry bookkeeping:
writes go to a young generation; once it outgrows its share of the budget it becomes
the old one and the previous old one is dropped. A lookup tries the young one, then
the old one. Stores opened from one backend split one :class:`CacheBudget`.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence

from state.store import Checkpoint, PartitionStore

#: Bytes an entry costs beyond its key and value: two bytes objects' headers and the
#: dict's slot, rounded up.
ENTRY_OVERHEAD = 100


class CacheBudget:
    """Bytes of cache shared by the stores open at a time: each gets an equal share."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.open_stores = 0

    def generation_bytes(self) -> int:
        """What one store's young generation may hold: half its share."""
        return self.total_bytes // (2 * max(1, self.open_stores))


class CachedStore(PartitionStore):
    """``store`` with its most recently written values kept in memory."""

    def __init__(self, store: PartitionStore, budget: CacheBudget) -> None:
        self._store = store
        self._budget = budget
        budget.open_stores += 1
        self._young: dict[bytes, bytes] = {}
        self._old: dict[bytes, bytes] = {}
        self._young_bytes = 0

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        values: list[bytes | None] = list(map(self._young.get, keys))
        if None not in values:
            return values
        old = self._old
        misses = [i for i, value in enumerate(values) if value is None]
        if old:
            for i in misses:
                values[i] = old.get(keys[i])
            misses = [i for i in misses if values[i] is None]
        if misses:
            stored = self._store.get_many([keys[i] for i in misses])
            for i, value in zip(misses, stored, strict=True):
                values[i] = value
        return values

    def keys(
        self,
        prefix: bytes,
        *,
        after: bytes | None = None,
        before: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes]:
        return self._store.keys(prefix, after=after, before=before, limit=limit)

    def commit(self, updates: Mapping[bytes, bytes | None], checkpoint: Checkpoint) -> None:
        self._store.commit(updates, checkpoint)
        if not updates:
            return
        young = self._young
        if None in updates.values():
            old = self._old
            for key, value in updates.items():
                if value is None:
                    young.pop(key, None)
                    old.pop(key, None)
                else:
                    young[key] = value
                    self._young_bytes += len(value)
        else:
            # A value replaced in the young generation is counted again: the count errs
            # high, so the generation turns over early, never late.
            written = typing.cast(Mapping[bytes, bytes], updates)
            young.update(written)
            self._young_bytes += sum(map(len, written.values()))
        self._young_bytes += sum(map(len, updates)) + ENTRY_OVERHEAD * len(updates)
        if self._young_bytes > self._budget.generation_bytes():
            self._old, self._young, self._young_bytes = young, {}, 0

    def checkpoint(self) -> Checkpoint:
        return self._store.checkpoint()

    def wipe(self) -> None:
        self._forget()
        self._store.wipe()

    def close(self) -> None:
        self._forget()
        self._budget.open_stores -= 1
        self._store.close()

    def _forget(self) -> None:
        self._young, self._old, self._young_bytes = {}, {}, 0
