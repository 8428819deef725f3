"""The state interface the reconciliation rules and the data plane use.

A store holds the state of one input partition: a narrow byte-level mapping
(``None`` means absent) plus the input offset that the state reflects. A
:meth:`PartitionStore.commit` applies a batch of updates and the new offset
atomically: after a crash the store holds either the whole batch or none of
it, so the offset it reports always matches its contents.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence


class StateError(Exception):
    """State could not be opened, read or written."""


class PartitionStore(ABC):
    """Key/value state of one input topic-partition."""

    @abstractmethod
    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys``, in order; ``None`` where a key is absent."""

    @abstractmethod
    def commit(self, updates: Mapping[bytes, bytes | None], offset: int) -> None:
        """Apply ``updates`` (``None`` deletes) and record ``offset``, atomically."""

    @abstractmethod
    def offset(self) -> int | None:
        """The next input offset the state expects (``None`` for a new store)."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; it keeps its contents."""

    def get(self, key: bytes) -> bytes | None:
        """Value of one key."""
        return self.get_many([key])[0]


class StateBackend(ABC):
    """Opens partition stores by a stable name (never derived from object identity)."""

    @abstractmethod
    def open(self, topic: str, partition: int) -> PartitionStore:
        """The store of ``topic``'s ``partition``, created when missing."""


class MemoryPartitionStore(PartitionStore):
    """A store in a dict: the contract of :class:`PartitionStore` without persistence."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._offset: int | None = None

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self._data.get(k) for k in keys]

    def commit(self, updates: Mapping[bytes, bytes | None], offset: int) -> None:
        for key, value in updates.items():
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
        self._offset = offset

    def offset(self) -> int | None:
        return self._offset

    def close(self) -> None:
        """Nothing to release."""


class MemoryBackend(StateBackend):
    """Stores that live as long as the backend object."""

    def __init__(self) -> None:
        self._stores: dict[tuple[str, int], MemoryPartitionStore] = {}

    def open(self, topic: str, partition: int) -> PartitionStore:
        return self._stores.setdefault((topic, partition), MemoryPartitionStore())
