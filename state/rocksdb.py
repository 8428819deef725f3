"""RocksDB state (rocksdict), one database per input topic-partition.

One database per partition keeps a partition's state movable as a unit: when a
partition is revoked its database is closed, when it is assigned it is opened
again (and brought up to date from its changelog). The checkpoint lives in the
same database under reserved keys, and every :meth:`commit` is one RocksDB
write batch, so state and checkpoint are atomic together.

Commits skip RocksDB's write-ahead log: the changelog topic is the store's log.
A crash loses the batches still in the memtable, all together, and the
database reopens at an earlier commit with that commit's checkpoint; the
:class:`~state.changelog.Restorer` then replays the changelog from there, as for
a store that was stale because its partition lived elsewhere. A clean close
flushes the memtable. Kafka Streams runs its RocksDB stores the same way; it
takes more than half the CPU out of a commit.

Tables and memtables carry whole-key bloom filters (10 bits a key): most reads of a
backfill are of keys the store has never held, and a filter answers those without
searching every file.
"""

from __future__ import annotations

import re
import shutil
import struct
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

from rocksdict import BlockBasedOptions, Options, Rdict, WriteBatch, WriteOptions

from state.cache import CacheBudget, CachedStore
from state.errors import StateError
from state.store import Checkpoint, PartitionStore, StateBackend

# Reserved keys. The envelopes prefix every user key with a letter (b"k", b"s"),
# so keys that start with a NUL byte belong to the store and the rules' metadata.
_RESERVED = b"\x00\x00checkpoint:"
_INPUT_KEY = _RESERVED + b"input"
_CHANGELOG_KEY = _RESERVED + b"changelog"
_OFFSET = struct.Struct(">q")
#: The processor's default (``processor.state_cache_mb``).
DEFAULT_CACHE_BYTES = 64 << 20


def _upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key with ``prefix`` (``None``: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class RocksDBPartitionStore(PartitionStore):
    """A partition's state in its own RocksDB database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = self._open()
        self._write = WriteOptions()
        # A property at run time; rocksdict's stub calls it a method.
        self._write.disable_wal = True  # type: ignore[method-assign,assignment]

    def _open(self) -> Rdict:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        tables = BlockBasedOptions()
        tables.set_bloom_filter(10, False)
        options.set_block_based_table_factory(tables)
        options.set_memtable_prefix_bloom_ratio(0.02)  # with no prefix extractor: whole keys
        options.set_memtable_whole_key_filtering(True)
        try:
            return Rdict(str(self.path), options)
        except Exception as exc:  # rocksdict raises plain Exception
            raise StateError(f"cannot open RocksDB state at {self.path}: {exc}") from exc

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        return typing.cast(list[bytes | None], self._db.get(list(keys)))

    def keys(
        self,
        prefix: bytes,
        *,
        after: bytes | None = None,
        before: bytes | None = None,
        limit: int | None = None,
    ) -> list[bytes]:
        found: list[bytes] = []
        bound = _upper_bound(prefix)
        if before is not None and (bound is None or before < bound):
            bound = before
        start = prefix if after is None or after < prefix else after + b"\x00"
        for key in self._db.keys(from_key=start):
            assert isinstance(key, bytes)  # raw mode
            if bound is not None and key >= bound:
                break
            if not key.startswith(_RESERVED):
                found.append(key)
                if limit is not None and len(found) >= limit:
                    break
        return found

    def commit(self, updates: Mapping[bytes, bytes | None], checkpoint: Checkpoint) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in updates.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if checkpoint.input_offset is not None:
            batch.put(_INPUT_KEY, _OFFSET.pack(checkpoint.input_offset))
        if checkpoint.changelog_offset is not None:
            batch.put(_CHANGELOG_KEY, _OFFSET.pack(checkpoint.changelog_offset))
        self._db.write(batch, self._write)

    def checkpoint(self) -> Checkpoint:
        raw_input, raw_changelog = typing.cast(
            list[bytes | None], self._db.get([_INPUT_KEY, _CHANGELOG_KEY])
        )
        return Checkpoint(
            None if raw_input is None else int(_OFFSET.unpack(raw_input)[0]),
            None if raw_changelog is None else int(_OFFSET.unpack(raw_changelog)[0]),
        )

    def wipe(self) -> None:
        self._db.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self._db = self._open()

    def close(self) -> None:
        self._db.close()


class RocksDBBackend(StateBackend):
    """Partition stores under ``<root>/<topic>/<partition>``, each behind a cache of the
    values of its keys in use (:mod:`state.cache`); they share ``cache_bytes`` (0: no
    cache)."""

    def __init__(self, root: str | Path, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.root = Path(root)
        self._budget = CacheBudget(cache_bytes) if cache_bytes > 0 else None

    def open(self, topic: str, partition: int) -> PartitionStore:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", topic):
            raise StateError(f"topic name {topic!r} cannot name a state folder")
        path = self.root / topic / str(partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        store = RocksDBPartitionStore(path)
        return store if self._budget is None else CachedStore(store, self._budget)
