"""RocksDB state (rocksdict): one database per process, a key range per input partition.

Every partition store of a process lives in one database, each under a prefix
that names its topic and partition. One database keeps the process's files,
memtables, caches and background threads the same whether it holds 3 partitions
or 1,500 (a database per partition cost each its own), within one memory budget
(``processor.state_memory_mb``: write buffers and a block cache). A partition's
state stays movable as a unit: its keys are one range, wiped by one range
deletion, and its checkpoint lives in the range under reserved keys; every
:meth:`commit` is one RocksDB write batch, so state and checkpoint are atomic
together.

Commits skip RocksDB's write-ahead log: the changelog topics are the stores' log.
A crash loses the writes still in the memtable, all together: the database
reopens at an earlier point of its one sequence of writes, and each partition
with the checkpoint of its last commit before that point; the
:class:`~state.changelog.Restorer` then replays its changelog from there, as for
a store that was stale because its partition lived elsewhere. The database is
open while a partition store is; the last store's close flushes the memtable and
closes it. Kafka Streams runs its RocksDB stores the same way; it takes more
than half the CPU out of a commit.

Tables and memtables carry whole-key bloom filters (10 bits a key): most reads of a
backfill are of keys the store has never held, and a filter answers those without
searching every file.

State written by earlier versions, a database per partition under
``<root>/<topic>/<partition>``, is moved into the shared database the first time
its partition is opened.
"""

from __future__ import annotations

import re
import shutil
import struct
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch, WriteOptions

from state.cache import CacheBudget, CachedStore
from state.errors import StateError
from state.store import Checkpoint, PartitionStore, StateBackend, furthest

# Reserved keys. The envelopes prefix every user key with a letter (b"k", b"s"),
# so keys that start with a NUL byte belong to the store and the rules' metadata.
_RESERVED = b"\x00\x00checkpoint:"
_INPUT_KEY = _RESERVED + b"input"
_CHANGELOG_KEY = _RESERVED + b"changelog"
_TOPICS_KEY = _RESERVED + b"topics"
_FLUSHED_KEY = _RESERVED + b"flushed"
_OFFSET = struct.Struct(">q")
#: The processor's defaults (``processor.state_cache_mb``, ``processor.state_memory_mb``).
DEFAULT_CACHE_BYTES = 64 << 20
DEFAULT_MEMORY_BYTES = 128 << 20
#: The shared database's folder under the state root: ``@`` is in no Kafka topic name,
#: so it never meets a legacy ``<root>/<topic>`` folder.
DATABASE = "@rocksdb"
#: Where a legacy database goes before it is deleted (``@``: no topic's folder).
MOVED = "@moved"
#: Keys copied from a legacy database per write batch.
_MOVE_BATCH = 10_000


def _offset(raw: bytes | None) -> int | None:
    return None if raw is None else int(_OFFSET.unpack(raw)[0])


def _upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key with ``prefix`` (``None``: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def topic_prefix(topic: str) -> bytes:
    """The key prefix of every partition of ``topic``: the name's length first, so no
    topic's prefix starts another's."""
    name = topic.encode()
    return struct.pack(">H", len(name)) + name


def partition_prefix(topic: str, partition: int) -> bytes:
    """The key prefix of ``topic``'s ``partition``."""
    return topic_prefix(topic) + struct.pack(">I", partition)


class SharedDatabase:
    """The process's one RocksDB database, open while any partition store is."""

    def __init__(self, path: Path, memory_bytes: int) -> None:
        self.path = path
        self._memory_bytes = memory_bytes
        self._db: Rdict | None = None
        self._users = 0
        self.write_options = WriteOptions()
        # A property at run time; rocksdict's stub calls it a method.
        self.write_options.disable_wal = True  # type: ignore[method-assign,assignment]

    def acquire(self) -> Rdict:
        if self._db is None:
            self._db = self._open()
        self._users += 1
        return self._db

    def release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._db is not None:
            self._db.close()  # flushes the memtable
            self._db = None

    def _open(self) -> Rdict:
        # Half the budget for the block cache (data, index and filter blocks), half for
        # two write buffers.
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        tables = BlockBasedOptions()
        tables.set_bloom_filter(10, False)
        tables.set_block_cache(Cache(max(8 << 20, self._memory_bytes // 2)))
        tables.set_cache_index_and_filter_blocks(True)
        tables.set_pin_l0_filter_and_index_blocks_in_cache(True)
        options.set_block_based_table_factory(tables)
        options.set_write_buffer_size(max(4 << 20, self._memory_bytes // 4))
        options.set_max_write_buffer_number(2)
        options.set_memtable_prefix_bloom_ratio(0.02)  # with no prefix extractor: whole keys
        options.set_memtable_whole_key_filtering(True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return Rdict(str(self.path), options)
        except Exception as exc:  # rocksdict raises plain Exception
            raise StateError(f"cannot open RocksDB state at {self.path}: {exc}") from exc


class RocksDBPartitionStore(PartitionStore):
    """A partition's state: its key range of the shared database."""

    def __init__(self, database: SharedDatabase, prefix: bytes) -> None:
        self._database = database
        self._prefix = prefix
        self._db: Rdict | None = database.acquire()
        self._input_key = prefix + _INPUT_KEY
        self._changelog_key = prefix + _CHANGELOG_KEY
        self._topics_key = prefix + _TOPICS_KEY
        self._flushed_key = prefix + _FLUSHED_KEY

    def _open_db(self) -> Rdict:
        if self._db is None:
            raise StateError("the partition store is closed")
        return self._db

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        prefix = self._prefix
        return typing.cast(list[bytes | None], self._open_db().get([prefix + k for k in keys]))

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
        mine = self._prefix
        start = mine + (prefix if after is None or after < prefix else after + b"\x00")
        end = mine + bound if bound is not None else _upper_bound(mine)
        cut = len(mine)
        for key in self._open_db().keys(from_key=start):
            assert isinstance(key, bytes)  # raw mode
            if end is not None and key >= end:
                break
            if not key.startswith(_RESERVED, cut):
                found.append(key[cut:])
                if limit is not None and len(found) >= limit:
                    break
        return found

    def commit(self, updates: Mapping[bytes, bytes | None], checkpoint: Checkpoint) -> None:
        batch = WriteBatch(raw_mode=True)
        prefix = self._prefix
        for key, value in updates.items():
            if value is None:
                batch.delete(prefix + key)
            else:
                batch.put(prefix + key, value)
        if checkpoint.input_offset is not None:
            batch.put(self._input_key, _OFFSET.pack(checkpoint.input_offset))
        if checkpoint.changelog_offset is not None:
            batch.put(self._changelog_key, _OFFSET.pack(checkpoint.changelog_offset))
        if checkpoint.topics is not None:
            batch.put(self._topics_key, checkpoint.topics.encode())
        if checkpoint.flushed_offset is not None:
            stored = _offset(self._open_db().get(self._flushed_key))
            flushed = furthest(stored, checkpoint.flushed_offset)
            if flushed != stored:
                batch.put(self._flushed_key, _OFFSET.pack(flushed))
        self._open_db().write(batch, self._database.write_options)

    def checkpoint(self) -> Checkpoint:
        keys: list[str | int | float | bytes | bool] = [
            self._input_key,
            self._changelog_key,
            self._topics_key,
            self._flushed_key,
        ]
        raw_input, raw_changelog, raw_topics, raw_flushed = typing.cast(
            list[bytes | None], self._open_db().get(keys)
        )
        return Checkpoint(
            _offset(raw_input),
            _offset(raw_changelog),
            None if raw_topics is None else raw_topics.decode(),
            _offset(raw_flushed),
        )

    def wipe(self) -> None:
        end = _upper_bound(self._prefix)
        assert end is not None  # a prefix ends with the partition number, never all 0xff
        self._open_db().delete_range(self._prefix, end, self._database.write_options)

    def close(self) -> None:
        if self._db is not None:
            self._db = None
            self._database.release()


class RocksDBBackend(StateBackend):
    """Partition stores in one database under ``<root>/@rocksdb`` (``memory_bytes``: its
    write buffers and block cache), each behind a cache of the values of its keys in use
    (:mod:`state.cache`); they share ``cache_bytes`` (0: no cache)."""

    def __init__(
        self,
        root: str | Path,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
    ) -> None:
        self.root = Path(root)
        self._budget = CacheBudget(cache_bytes) if cache_bytes > 0 else None
        self._database = SharedDatabase(self.root / DATABASE, memory_bytes)

    def open(self, topic: str, partition: int) -> PartitionStore:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", topic):
            raise StateError(f"topic name {topic!r} cannot name a state folder")
        store = RocksDBPartitionStore(self._database, partition_prefix(topic, partition))
        legacy = self.root / topic / str(partition)
        if legacy.is_dir():
            try:
                self._move_legacy(legacy, store)
            except BaseException:
                store.close()
                raise
        return store if self._budget is None else CachedStore(store, self._budget)

    def topics(self) -> set[str]:
        """Read by seeking from one topic's range to the next: a seek a topic."""
        db = self._database.acquire()
        try:
            found: set[str] = set()
            start = b""
            while True:
                key = next(iter(db.keys(from_key=start)), None)
                if key is None:
                    return found
                assert isinstance(key, bytes)  # raw mode
                (length,) = struct.unpack_from(">H", key)
                topic = key[2 : 2 + length].decode()
                found.add(topic)
                after = _upper_bound(topic_prefix(topic))
                if after is None:
                    return found
                start = after
        finally:
            self._database.release()

    def drop(self, topic: str) -> None:
        db = self._database.acquire()
        try:
            start = topic_prefix(topic)
            end = _upper_bound(start)
            assert end is not None  # a prefix starts with the name's length, never all 0xff
            db.delete_range(start, end, self._database.write_options)
        finally:
            self._database.release()

    def _move_legacy(self, legacy: Path, store: RocksDBPartitionStore) -> None:
        """Copy a partition's database of an earlier version into its range, then delete
        it. The copy is flushed first: a crash in between leaves the legacy database,
        copied again on the next open (over a range wiped first)."""
        store.wipe()
        options = Options(raw_mode=True)
        try:
            old = Rdict(str(legacy), options)
        except Exception as exc:  # rocksdict raises plain Exception
            raise StateError(f"cannot open legacy RocksDB state at {legacy}: {exc}") from exc
        try:
            batch: dict[bytes, bytes | None] = {}
            for key, value in old.items():
                assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
                batch[key] = value
                if len(batch) >= _MOVE_BATCH:
                    store.commit(batch, Checkpoint())
                    batch = {}
            store.commit(batch, Checkpoint())
        finally:
            old.close()
        store._open_db().flush()
        # Renamed first (atomic): a crash while deleting leaves no half legacy database to
        # copy again, only a folder under @moved, deleted by the next move.
        moved = self.root / MOVED / f"{legacy.parent.name}.{legacy.name}"
        shutil.rmtree(moved.parent, ignore_errors=True)
        moved.parent.mkdir()
        legacy.rename(moved)
        shutil.rmtree(moved.parent)
        with_topic = legacy.parent
        if not any(with_topic.iterdir()):
            with_topic.rmdir()
