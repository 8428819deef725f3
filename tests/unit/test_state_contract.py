"""One contract suite for every state backend (memory and RocksDB)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from state.rocksdb import RocksDBBackend
from state.store import MemoryBackend, StateBackend, StateError


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateBackend]:
    yield MemoryBackend() if request.param == "memory" else RocksDBBackend(tmp_path)


def test_new_store_is_empty(backend: StateBackend) -> None:
    store = backend.open("t", 0)
    assert store.offset() is None
    assert store.get_many([b"a", b"b"]) == [None, None]
    assert store.get_many([]) == []


def test_commit_applies_updates_deletes_and_offset(backend: StateBackend) -> None:
    store = backend.open("t", 0)
    store.commit({b"a": b"1", b"b": b"2"}, 10)
    store.commit({b"a": None, b"c": b"3"}, 12)
    assert store.get_many([b"a", b"b", b"c"]) == [None, b"2", b"3"]
    assert store.get(b"b") == b"2"
    assert store.offset() == 12


def test_partitions_are_separate(backend: StateBackend) -> None:
    first, second = backend.open("t", 0), backend.open("t", 1)
    first.commit({b"k": b"0"}, 1)
    second.commit({b"k": b"1"}, 5)
    assert (first.get(b"k"), second.get(b"k")) == (b"0", b"1")
    assert (first.offset(), second.offset()) == (1, 5)


def test_rocksdb_state_survives_reopening(tmp_path: Path) -> None:
    store = RocksDBBackend(tmp_path).open("orders", 2)
    store.commit({b"k": b"v"}, 42)
    store.close()
    again = RocksDBBackend(tmp_path).open("orders", 2)
    assert again.get(b"k") == b"v"
    assert again.offset() == 42
    again.close()


def test_rocksdb_refuses_a_topic_that_cannot_name_a_folder(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="cannot name a state folder"):
        RocksDBBackend(tmp_path).open("../escape", 0)
