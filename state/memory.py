"""State in dicts: the contract of :class:`~state.store.PartitionStore` without persistence.

The property tests run the rules over it, and the contract suite holds it to
the same behaviour as RocksDB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from state.store import Checkpoint, PartitionStore, StateBackend, merge_checkpoint


class MemoryPartitionStore(PartitionStore):
    """A store in a dict: the contract of :class:`PartitionStore` without persistence."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._checkpoint = Checkpoint()

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self._data.get(k) for k in keys]

    def keys(
        self,
        prefix: bytes,
        *,
        after: bytes | None = None,
        before: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes]:
        found = sorted(
            k
            for k in self._data
            if k.startswith(prefix)
            and (after is None or k > after)
            and (before is None or k < before)
        )
        return found if limit is None else found[:limit]

    def commit(self, updates: Mapping[bytes, bytes | None], checkpoint: Checkpoint) -> None:
        for key, value in updates.items():
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
        self._checkpoint = merge_checkpoint(self._checkpoint, checkpoint)

    def checkpoint(self) -> Checkpoint:
        return self._checkpoint

    def wipe(self) -> None:
        self._data.clear()
        self._checkpoint = Checkpoint()

    def close(self) -> None:
        """Nothing to release."""


class MemoryBackend(StateBackend):
    """Stores that live as long as the backend object."""

    def __init__(self) -> None:
        self._stores: dict[tuple[str, int], MemoryPartitionStore] = {}

    def open(self, topic: str, partition: int) -> PartitionStore:
        return self._stores.setdefault((topic, partition), MemoryPartitionStore())

    def topics(self) -> set[str]:
        return {topic for topic, _ in self._stores}

    def drop(self, topic: str) -> None:
        for key in [k for k in self._stores if k[0] == topic]:
            del self._stores[key]
