"""RocksDB state (rocksdict), one database per input topic-partition.

One database per partition keeps a partition's state movable as a unit: when a
partition is revoked its database is closed, when it is assigned it is opened
again. The input offset lives in the same database under a reserved key, and
every :meth:`commit` is one RocksDB write batch, so state and offset are
atomic together.
"""

from __future__ import annotations

import re
import struct
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from state.store import PartitionStore, StateBackend, StateError

# Reserved key: user keys are Kafka message keys, which never start with a NUL byte
# followed by this text (JSON and Avro-framed keys start with '{' or magic 0 + id).
_OFFSET_KEY = b"\x00tidemark:offset"
_OFFSET = struct.Struct(">q")


class RocksDBPartitionStore(PartitionStore):
    """A partition's state in its own RocksDB database."""

    def __init__(self, path: Path) -> None:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            self._db = Rdict(str(path), options)
        except Exception as exc:  # rocksdict raises plain Exception
            raise StateError(f"cannot open RocksDB state at {path}: {exc}") from exc
        self.path = path

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        return typing.cast(list[bytes | None], self._db.get(list(keys)))

    def commit(self, updates: Mapping[bytes, bytes | None], offset: int) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in updates.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        batch.put(_OFFSET_KEY, _OFFSET.pack(offset))
        self._db.write(batch)

    def offset(self) -> int | None:
        raw = self._db.get(_OFFSET_KEY)
        return None if raw is None else int(_OFFSET.unpack(raw)[0])

    def close(self) -> None:
        self._db.close()


class RocksDBBackend(StateBackend):
    """Partition stores under ``<root>/<topic>/<partition>``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def open(self, topic: str, partition: int) -> PartitionStore:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", topic):
            raise StateError(f"topic name {topic!r} cannot name a state folder")
        path = self.root / topic / str(partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        return RocksDBPartitionStore(path)
