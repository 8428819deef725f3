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
        """The furthest input offset whose outputs are in Kafka, as the store's checkpoint
        says (-1: none; a store of an earlier release has only its input offset)."""
        checkpoint = self._store.checkpoint()
        offset = checkpoint.flushed_offset
        if offset is None:
            offset = checkpoint.input_offset
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

    def maps(self) -> tuple[dict[bytes, bytes | None], dict[bytes, bytes | None]]:
        """The values read and the values written, for a compiled loop that does what
        :meth:`get` (of a key prefetched) and :meth:`put` do: it reads the first, and
        writes both."""
        return self._cache, self.updates

    def keys(
        self,
        prefix: bytes,
        *,
        after: bytes | None = None,
        before: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes]:
        """The keys that start with ``prefix`` and are present, as this batch sees them, in
        order, as :meth:`PartitionStore.keys` gives them: fewer than ``limit`` means no more.
        """

        def inside(key: bytes) -> bool:
            return (
                key.startswith(prefix)
                and (after is None or key > after)
                and (before is None or key < before)
            )

        written = [(k, v) for k, v in self.updates.items() if inside(k)]
        deleted = sum(v is None for _k, v in written)
        # Enough stored keys that, less this batch's deletes, ``limit`` remain if any do.
        page = self._store.keys(
            prefix, after=after, before=before, limit=None if limit is None else limit + deleted
        )
        full = limit is not None and len(page) == limit + deleted
        present = set(page)
        for key, value in written:
            if value is None:
                present.discard(key)
            elif not full or key < page[-1]:
                present.add(key)
        found = sorted(present)
        return found if limit is None else found[:limit]
