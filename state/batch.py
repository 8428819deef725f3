"""One batch's view of a partition store: what the reconciliation rules read and write."""

from __future__ import annotations

from collections.abc import Sequence

from state.store import PartitionStore


class BatchState:
    """One batch's view of a partition store: reads through a cache, writes buffered.

    This is the :class:`processor.reconcile.envelopes.KeyState` the rules see. Nothing
    reaches the store until the commit protocol passes :attr:`updates` to
    :meth:`PartitionStore.commit`.
    """

    __slots__ = ("_store", "_cache", "updates")

    def __init__(self, store: PartitionStore) -> None:
        self._store = store
        self._cache: dict[bytes, bytes | None] = {}
        self.updates: dict[bytes, bytes | None] = {}

    def flushed_offset(self) -> int:
        """The input offset the store's checkpoint has reached (-1: none)."""
        offset = self._store.checkpoint().input_offset
        return -1 if offset is None else offset

    def prefetch(self, keys: Sequence[bytes]) -> None:
        """Read ``keys`` in one call (a RocksDB multi-get) before the rules need them."""
        missing = [k for k in keys if k not in self._cache]
        if missing:
            self._cache.update(zip(missing, self._store.get_many(missing), strict=True))

    def get(self, key: bytes) -> bytes | None:
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = self._store.get(key)
            return value

    def put(self, key: bytes, value: bytes | None) -> None:
        self._cache[key] = value
        self.updates[key] = value

    def keys(self, prefix: bytes) -> list[bytes]:
        """Every key that starts with ``prefix`` and is present, as this batch sees them."""
        found = set(self._store.keys(prefix))
        for key, value in self._cache.items():
            if key.startswith(prefix):
                if value is None:
                    found.discard(key)
                else:
                    found.add(key)
        return sorted(found)

    def clear(self, prefix: bytes) -> None:
        for key in self.keys(prefix):
            self.put(key, None)
