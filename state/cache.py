"""A bounded cache of a partition store's values of keys in use, in front of the store.

A change mostly touches a key that changed recently, and its rule reads the key's
stored value first. A RocksDB multi-get costs about a microsecond a key even when
the key sits in the memtable; a dict lookup costs a twentieth of that. Kafka
Streams puts a record cache in front of its stores for the same reason.

What it admits: a value read from the store, and from then on every value written to
that key. A key written but never read as present (a backfill's rows, an insert, a
window buffer's rows) stays out until it is read, so a backfill of a large table
does not push the live keys out. It holds values only, never "absent".

The cache is written through: :meth:`CachedStore.commit` writes the store first and
the cache only once that write succeeded, so the cache never holds a value the store
lacks.

Memory stays bounded with no per-entry bookkeeping: admitted values go to a young
generation; once it outgrows its share of the budget it becomes the old one and the
previous old one is dropped. A lookup tries the young one, then the old one. Stores
opened from one backend split one :class:`CacheBudget`.
"""

from __future__ import annotations

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
    """``store`` with the values of its keys in use kept in memory."""

    def __init__(self, store: PartitionStore, budget: CacheBudget) -> None:
        self._store = store
        self._budget = budget
        budget.open_stores += 1
        self._young: dict[bytes, bytes] = {}
        self._old: dict[bytes, bytes] = {}
        self._young_bytes = 0

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        # Whole-list passes, not a loop over indexes: most reads of a backfill miss.
        values: list[bytes | None] = list(map(self._young.get, keys))
        if None not in values:
            return values
        old = self._old
        if old:
            values = [old.get(k) if v is None else v for k, v in zip(keys, values, strict=True)]
            if None not in values:
                return values
        missing = [k for k, v in zip(keys, values, strict=True) if v is None]
        stored = self._store.get_many(missing)
        found = {k: v for k, v in zip(missing, stored, strict=True) if v is not None}
        if found:
            self._admit(found)
        values_read = iter(stored)
        return [next(values_read) if v is None else v for v in values]

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
        young, old = self._young, self._old
        cached = [k for k in updates if k in young or k in old]
        if not cached:
            return
        written = {k: v for k in cached if (v := updates[k]) is not None}
        if len(written) < len(cached):
            for key in cached:
                if key not in written:
                    young.pop(key, None)
                    old.pop(key, None)
        if written:
            self._admit(written)

    def checkpoint(self) -> Checkpoint:
        return self._store.checkpoint()

    def wipe(self) -> None:
        self._forget()
        self._store.wipe()

    def close(self) -> None:
        self._forget()
        self._budget.open_stores -= 1
        self._store.close()

    def _admit(self, values: Mapping[bytes, bytes]) -> None:
        """Put ``values`` in the young generation, which turns old once past its share.
        A value replaced there is counted again: the count errs high, so the generation
        turns over early, never late."""
        self._young.update(values)
        self._young_bytes += (
            sum(map(len, values)) + sum(map(len, values.values())) + ENTRY_OVERHEAD * len(values)
        )
        if self._young_bytes > self._budget.generation_bytes():
            self._old, self._young, self._young_bytes = self._young, {}, 0

    def _forget(self) -> None:
        self._young, self._old, self._young_bytes = {}, {}, 0
