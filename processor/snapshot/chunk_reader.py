"""Chunk reads of an incremental snapshot: keyset pages of a table, each with what it saw.

:class:`ChunkReader` is what the snapshot engine needs from a source database
(one implementation per database, behind its connector): the table's catalog
entry, its largest key and size, the end of the next part, and the part's
rows together with the snapshot they were read in.

Pages are ordered by the primary key (or a unique surrogate key) and bounded
above by the largest key found when the table's snapshot started, so a table
is read once from its first key to that one, whatever is written meanwhile.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from processor.events.visibility import PgSnapshot

Key = tuple[Any, ...]


@dataclass(frozen=True)
class TableInfo:
    """What a chunk reader needs of a table."""

    schema: str
    table: str
    #: The columns that order and page the table (primary key or surrogate key).
    key: tuple[str, ...]
    columns: tuple[str, ...]
    #: Per column: ``(type name, type modifier, type category, array element type name)``.
    types: tuple[tuple[str, int, str, str | None], ...] = ()
    #: Per column: the type's OID.
    oids: tuple[int, ...] = ()
    #: The primary key's columns (Debezium's key), whatever pages the table.
    primary: tuple[str, ...] = ()
    #: Per column: ``NOT NULL``; its ``DEFAULT`` expression; an enum type's labels.
    not_null: tuple[bool, ...] = ()
    defaults: tuple[str | None, ...] = ()
    labels: tuple[tuple[str, ...] | None, ...] = ()
    #: Whether the source's change capture can stream the table (PostgreSQL: a
    #: publication holds it), so that Debezium may have a topic for it still to come.
    captured: bool = False

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass(frozen=True)
class Chunk:
    """One part: its rows (values in the order of ``TableInfo.columns``) and the snapshot
    they were read in."""

    rows: list[tuple[Any, ...]]
    snapshot: PgSnapshot
    seconds: float


class ChunkReader(ABC):
    """Reads a table in keyset pages for an incremental snapshot (one per database kind)."""

    @abstractmethod
    def table_info(self, table: str, surrogate_key: str | None = None) -> TableInfo:
        """The key and columns of ``schema.table``; :class:`ChunkError` if it has no usable key."""

    @abstractmethod
    def key_condition(self, info: TableInfo, keys: list[dict[str, Any]]) -> str:
        """A filter that selects the rows of ``keys`` (primary-key column to value, as
        Debezium's key carries them), its values quoted; :class:`ChunkError` for keys it
        cannot place (other columns, or a type whose key values it does not read)."""

    @abstractmethod
    def check_filter(self, table: str, condition: str) -> None:
        """:class:`~processor.errors.FilterError` unless ``condition`` is one expression
        (:func:`processor.snapshot.filters.check_filter`) that the database can plan over
        ``table`` (``schema.table``), checked without running it."""

    @abstractmethod
    def max_key(self, info: TableInfo, condition: str | None = None) -> Key | None:
        """The largest key now (``None``: the table, or its filtered part, is empty)."""

    @abstractmethod
    def estimate_rows(self, info: TableInfo, condition: str | None = None) -> int:
        """About how many rows the table (or its filtered part) holds, for progress."""

    @abstractmethod
    def boundary(
        self, info: TableInfo, after: Key | None, upto: Key, rows: int, condition: str | None = None
    ) -> Key | None:
        """The key of the ``rows``-th row after ``after`` (at most ``upto``); ``None`` when
        fewer rows are left: the end of the next part of a table to read."""

    @abstractmethod
    def read_chunk(
        self,
        info: TableInfo,
        after: Key | None,
        upto: Key,
        condition: str | None = None,
        casts: Mapping[str, str] | None = None,
    ) -> Chunk:
        """Every row with ``after < key <= upto``, in key order (a part that
        :meth:`boundary` sized).

        ``casts`` names columns to read as ``text`` (the type's own output, as the
        replication stream carries it) or as ``numeric``.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""


def next_chunk_size(current: int, seconds: float, target: float, low: int, high: int) -> int:
    """Grow a chunk that was read well within ``target`` seconds, shrink a slow one."""
    if seconds < target / 2:
        current *= 2
    elif seconds > target * 2:
        current //= 2
    return max(low, min(high, current))
