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


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a store's contents come from (``None``: not known)."""

    #: The next input offset the state expects.
    input_offset: int | None = None
    #: The next changelog offset: every changelog record below it is in the store.
    changelog_offset: int | None = None
    #: Which incarnation of its input and changelog topics the state comes from
    #: (:func:`topics_identity`): a topic deleted and made again under its name is another.
    topics: str | None = None
    #: The furthest input offset whose outputs are all in Kafka. Unlike
    #: :attr:`input_offset`, a commit never moves it back (:func:`furthest`): an offsets
    #: rewind that kept state reads again changes whose outputs are there already, in as
    #: many batches as it takes.
    flushed_offset: int | None = None

    @classmethod
    def after_batch(cls, next_offset: int | None, changelog_offset: int | None) -> Checkpoint:
        """What a batch's commit records: its outputs are in Kafka by then."""
        return cls(next_offset, changelog_offset, flushed_offset=next_offset)


class PartitionStore(ABC):
    """Key/value state of one input topic-partition."""

    @abstractmethod
    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys``, in order; ``None`` where a key is absent."""

    @abstractmethod
    def keys(
        self,
        prefix: bytes,
        *,
        after: bytes | None = None,
        before: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes]:
        """The keys that start with ``prefix``, in order: above ``after`` and below
        ``before`` when given, the first ``limit`` of them (a page: state may be far
        larger than memory, so a caller that reads it all reads it page by page)."""

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

    @abstractmethod
    def topics(self) -> set[str]:
        """The topics of which some partition has state here."""

    @abstractmethod
    def drop(self, topic: str) -> None:
        """Delete the state of every partition of ``topic`` (none of them open)."""


def merge_checkpoint(old: Checkpoint, new: Checkpoint) -> Checkpoint:
    """``new`` with its unknown fields taken from ``old``."""
    return Checkpoint(
        old.input_offset if new.input_offset is None else new.input_offset,
        old.changelog_offset if new.changelog_offset is None else new.changelog_offset,
        old.topics if new.topics is None else new.topics,
        furthest(old.flushed_offset, new.flushed_offset),
    )


def furthest(stored: int | None, committed: int | None) -> int | None:
    """The flushed offset a commit of ``committed`` leaves over ``stored``."""
    if stored is None or committed is None:
        return committed if stored is None else stored
    return max(stored, committed)


def topics_identity(input_id: str | None, changelog_id: str | None) -> str | None:
    """The identity of a partition's topics from their Kafka topic ids (``None``: either
    unknown)."""
    if not input_id or not changelog_id:
        return None
    return f"{input_id}/{changelog_id}"


def from_other_topics(checkpoint: Checkpoint, identity: str | None) -> bool:
    """Whether a store's state comes from other topics than those of ``identity``: topics
    of the same names deleted since (a table removed, then added again). Such state
    must not meet the new topics' records. State of an earlier version, which recorded
    no identity, is taken for the topics' own."""
    return checkpoint.topics is not None and identity is not None and checkpoint.topics != identity
