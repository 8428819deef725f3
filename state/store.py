"""The state interface the reconciliation rules and the data plane use.

A store holds the state of one input partition: a narrow byte-level mapping
(``None`` means absent) plus a :class:`Checkpoint`, the input offset the state
reflects and the position in the partition's changelog up to which it holds
every record. :meth:`PartitionStore.commit` applies a batch of updates and the
checkpoint atomically: after a crash the store holds either the whole batch or
none of it, so its checkpoint always matches its contents.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class StateError(Exception):
    """State could not be opened, read or written."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a store's contents come from (``None``: not known)."""

    #: The next input offset the state expects.
    input_offset: int | None = None
    #: The next changelog offset: every changelog record below it is in the store.
    changelog_offset: int | None = None


class PartitionStore(ABC):
    """Key/value state of one input topic-partition."""

    @abstractmethod
    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys``, in order; ``None`` where a key is absent."""

    @abstractmethod
    def keys(self, prefix: bytes) -> list[bytes]:
        """Every key that starts with ``prefix``."""

    @abstractmethod
    def commit(self, updates: Mapping[bytes, bytes | None], checkpoint: Checkpoint) -> None:
        """Apply ``updates`` (``None`` deletes) and record ``checkpoint``, atomically.

        A ``None`` field of ``checkpoint`` leaves the stored one unchanged.
        """

    @abstractmethod
    def checkpoint(self) -> Checkpoint:
        """The last committed checkpoint (fields ``None`` for a new store)."""

    @abstractmethod
    def wipe(self) -> None:
        """Delete every key and the checkpoint."""

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


def merge_checkpoint(old: Checkpoint, new: Checkpoint) -> Checkpoint:
    """``new`` with its unknown fields taken from ``old``."""
    return Checkpoint(
        old.input_offset if new.input_offset is None else new.input_offset,
        old.changelog_offset if new.changelog_offset is None else new.changelog_offset,
    )


class MemoryPartitionStore(PartitionStore):
    """A store in a dict: the contract of :class:`PartitionStore` without persistence."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._checkpoint = Checkpoint()

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self._data.get(k) for k in keys]

    def keys(self, prefix: bytes) -> list[bytes]:
        return sorted(k for k in self._data if k.startswith(prefix))

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


class BatchState:
    """One batch's view of a partition store: reads through a cache, writes buffered.

    This is the :class:`processor.envelopes.KeyState` the rules see. Nothing
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
