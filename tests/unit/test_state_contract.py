"""One contract suite for every state backend (memory and RocksDB)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from state.batch import BatchState
from state.errors import StateError
from state.memory import MemoryBackend
from state.rocksdb import RocksDBBackend
from state.store import Checkpoint, StateBackend, from_other_topics, topics_identity


@pytest.fixture(params=["memory", "rocksdb", "rocksdb-uncached"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateBackend]:
    if request.param == "memory":
        yield MemoryBackend()
    else:  # with its cache of recent values (the default), and without
        yield RocksDBBackend(tmp_path, 0 if request.param == "rocksdb-uncached" else 1 << 20)


def test_new_store_is_empty(backend: StateBackend) -> None:
    store = backend.open("t", 0)
    assert store.checkpoint() == Checkpoint(None, None)
    assert store.get_many([b"a", b"b"]) == [None, None]
    assert store.get_many([]) == []


def test_commit_applies_updates_deletes_and_checkpoint(backend: StateBackend) -> None:
    store = backend.open("t", 0)
    store.commit({b"a": b"1", b"b": b"2"}, Checkpoint(10, 4))
    store.commit({b"a": None, b"c": b"3"}, Checkpoint(12, None))
    assert store.get_many([b"a", b"b", b"c"]) == [None, b"2", b"3"]
    assert store.get(b"b") == b"2"
    assert store.checkpoint() == Checkpoint(12, 4)  # an unknown field keeps the stored one
    store.commit({}, Checkpoint(None, 9))
    assert store.checkpoint() == Checkpoint(12, 9)


def test_a_commit_never_moves_the_flushed_offset_back(backend: StateBackend) -> None:
    """A rewind that kept state reads again offsets whose outputs are in Kafka: the input
    offset follows the reads, the flushed offset keeps the furthest, until a wipe."""
    store = backend.open("t", 0)
    store.commit({}, Checkpoint.after_batch(10, 4))
    store.commit({b"a": b"1"}, Checkpoint.after_batch(3, 5))
    assert store.checkpoint() == Checkpoint(3, 5, None, 10)
    store.commit({}, Checkpoint(None, 6))
    store.commit({}, Checkpoint.after_batch(11, None))
    assert store.checkpoint() == Checkpoint(11, 6, None, 11)
    store.wipe()
    store.commit({}, Checkpoint.after_batch(2, 1))
    assert store.checkpoint() == Checkpoint(2, 1, None, 2)


def test_keys_by_prefix_and_wipe(backend: StateBackend) -> None:
    store = backend.open("t", 0)
    store.commit({b"sa": b"", b"sb": b"", b"s\xff": b"", b"t": b"", b"ka": b"1"}, Checkpoint(1, 1))
    assert store.keys(b"s") == [b"sa", b"sb", b"s\xff"]
    assert store.keys(b"t") == [b"t"]
    store.wipe()
    assert store.keys(b"") == []
    assert store.checkpoint() == Checkpoint(None, None)


def test_the_topics_identity_is_kept_with_the_checkpoint_and_wiped(
    backend: StateBackend,
) -> None:
    store = backend.open("t", 0)
    store.commit({b"a": b"1"}, Checkpoint(3, 2, "in/log"))
    store.commit({b"b": b"2"}, Checkpoint(4, 3))  # no identity given: the stored one stays
    assert store.checkpoint() == Checkpoint(4, 3, "in/log")
    store.wipe()
    assert store.checkpoint() == Checkpoint()


def test_a_topics_state_is_listed_and_dropped_whole(backend: StateBackend) -> None:
    assert backend.topics() == set()
    names = ["orders", "orders.items", "a" * 249, "ordersx"]  # 249: Kafka's longest
    for name in names:
        for partition in (0, 7):
            store = backend.open(name, partition)
            store.commit({b"k": name.encode()}, Checkpoint(1, 1, "in/log"))
            store.close()
    assert backend.topics() == set(names)
    backend.drop("orders")
    assert backend.topics() == set(names) - {"orders"}
    for name in names:
        store = backend.open(name, 7)
        expected = None if name == "orders" else name.encode()
        assert store.get(b"k") == expected
        assert (store.checkpoint() == Checkpoint()) is (name == "orders")
        store.close()


def test_state_of_topics_made_again_is_told_apart() -> None:
    ours = topics_identity("in", "log")
    assert ours == "in/log"
    assert topics_identity("in", None) is None and topics_identity("", "log") is None
    assert from_other_topics(Checkpoint(1, 1, "in/old-log"), ours)
    assert from_other_topics(Checkpoint(1, 1, "old-in/log"), ours)
    assert not from_other_topics(Checkpoint(1, 1, ours), ours)
    # an earlier version recorded none; an unknown identity proves nothing
    assert not from_other_topics(Checkpoint(1, 1), ours)
    assert not from_other_topics(Checkpoint(1, 1, "in/old-log"), None)


KEYS = st.lists(st.sampled_from(b"ab\xff"), max_size=3).map(bytes)  # few: prefixes overlap


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    stored=st.sets(KEYS, max_size=20),
    updates=st.dictionaries(KEYS, st.sampled_from([None, b"v"]), max_size=10),
    prefix=st.sampled_from([b"", b"a", b"ab", b"\xff"]),
    after=st.none() | KEYS,
    before=st.none() | KEYS,
    limit=st.none() | st.integers(1, 5),
)
def test_keys_pages_as_the_batch_sees_them(
    backend: StateBackend,
    stored: set[bytes],
    updates: dict[bytes, bytes | None],
    prefix: bytes,
    after: bytes | None,
    before: bytes | None,
    limit: int | None,
) -> None:
    """Store and batch give the keys in order, in bounds, the first ``limit`` of them."""
    store = backend.open("t", 0)
    store.wipe()
    store.commit({k: b"" for k in stored}, Checkpoint(1, 1))
    state = BatchState(store)
    for key, value in updates.items():
        state.put(key, value)
    present = (stored | {k for k, v in updates.items() if v}) - {
        k for k, v in updates.items() if not v
    }

    def expected(keys: set[bytes]) -> list[bytes]:
        found = sorted(
            k
            for k in keys
            if k.startswith(prefix)
            and (after is None or k > after)
            and (before is None or k < before)
        )
        return found if limit is None else found[:limit]

    page = dict(after=after, before=before, limit=limit)
    assert store.keys(prefix, **page) == expected(stored)  # type: ignore[arg-type]
    assert state.keys(prefix, **page) == expected(present)  # type: ignore[arg-type]


def test_a_page_of_the_batch_skips_its_deletes_and_defers_its_later_puts(
    backend: StateBackend,
) -> None:
    store = backend.open("t", 0)
    store.commit({b"a": b"", b"b": b"", b"c": b"", b"d": b""}, Checkpoint(1, 1))
    state = BatchState(store)
    state.put(b"b", None)
    state.put(b"z", b"")
    assert state.keys(b"", limit=2) == [b"a", b"c"]
    assert state.keys(b"", after=b"c", limit=2) == [b"d", b"z"]
    assert state.keys(b"", after=b"d", limit=2) == [b"z"]  # fewer: no more


def test_batch_state_buffers_until_commit(backend: StateBackend) -> None:
    store = backend.open("t", 0)
    store.commit({b"s1": b"", b"s2": b"", b"k": b"v"}, Checkpoint(1, 1))
    state = BatchState(store)
    state.prefetch([b"k", b"missing"])
    state.put(b"s3", b"")
    for key in state.keys(b"s"):
        state.put(key, None)
    state.put(b"k", b"w")
    assert store.get(b"k") == b"v"  # nothing written yet
    assert state.get(b"k") == b"w" and state.get(b"s1") is None and state.get(b"s3") is None
    store.commit(state.updates, Checkpoint(2, 2))
    assert store.keys(b"s") == [] and store.get(b"k") == b"w"


def test_partitions_are_separate(backend: StateBackend) -> None:
    first, second = backend.open("t", 0), backend.open("t", 1)
    first.commit({b"k": b"0"}, Checkpoint(1))
    second.commit({b"k": b"1"}, Checkpoint(5))
    assert (first.get(b"k"), second.get(b"k")) == (b"0", b"1")
    assert (first.checkpoint().input_offset, second.checkpoint().input_offset) == (1, 5)


def test_rocksdb_state_survives_reopening(tmp_path: Path) -> None:
    store = RocksDBBackend(tmp_path).open("orders", 2)
    store.commit({b"k": b"v"}, Checkpoint(42, 7, "in/log"))
    store.close()
    again = RocksDBBackend(tmp_path).open("orders", 2)
    assert again.get(b"k") == b"v"
    assert again.checkpoint() == Checkpoint(42, 7, "in/log")
    again.close()


_WRITER = """
import sys
from state.rocksdb import RocksDBBackend
from state.store import Checkpoint
store = RocksDBBackend(sys.argv[1]).open("orders", 0)
commit = 0
while True:
    commit += 1
    row = commit.to_bytes(4, "big") * 25_000  # 100 kB: the memtable fills every ~600 commits
    store.commit({b"k%d" % key: row for key in range(10)}, Checkpoint(commit, commit))
    if commit == 1500:
        print("flushed some", flush=True)
"""


def test_rocksdb_state_after_a_kill_is_one_earlier_commit_whole(tmp_path: Path) -> None:
    """Commits skip the write-ahead log: a killed writer loses its last commits, all
    together, and the store reopens at an earlier commit with that commit's checkpoint."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == b"flushed some\n"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    store = RocksDBBackend(tmp_path).open("orders", 0)
    commit = store.checkpoint().input_offset
    assert commit is not None and commit >= 500
    assert store.checkpoint().changelog_offset == commit
    rows = store.get_many([b"k%d" % key for key in range(10)])
    assert rows == [commit.to_bytes(4, "big") * 25_000] * 10
    store.close()


def test_rocksdb_refuses_a_topic_that_cannot_name_a_folder(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="cannot name a state folder"):
        RocksDBBackend(tmp_path).open("../escape", 0)


def test_partitions_wiped_and_listed_stay_in_their_own_range(tmp_path: Path) -> None:
    """Every partition shares one database: a partition's keys, listing and wipe never
    reach a neighbour's, even one whose topic name starts the same."""
    backend = RocksDBBackend(tmp_path, 0)
    stores = [backend.open(t, p) for t, p in (("t", 1), ("t", 2), ("t.x", 1), ("tt", 0))]
    for i, store in enumerate(stores):
        store.commit({b"k1": b"%d" % i, b"k2": b"%d" % i}, Checkpoint(i, i))
    stores[1].wipe()
    assert stores[1].get_many([b"k1", b"k2"]) == [None, None]
    assert stores[1].checkpoint() == Checkpoint(None, None)
    for i in (0, 2, 3):
        assert stores[i].keys(b"k") == [b"k1", b"k2"]
        assert stores[i].checkpoint() == Checkpoint(i, i)
    assert stores[0].keys(b"", after=b"k1") == [b"k2"]
    for store in stores:
        store.close()
    assert [p.name for p in tmp_path.iterdir()] == ["@rocksdb"]


def test_state_of_a_database_per_partition_is_moved_into_the_shared_one(
    tmp_path: Path,
) -> None:
    """State an earlier version kept in ``<root>/<topic>/<partition>`` is moved on first
    open, with its checkpoint: an upgrade restores nothing from the changelog."""
    from rocksdict import Options, Rdict

    legacy = tmp_path / "orders" / "2"
    legacy.parent.mkdir()
    old = Rdict(str(legacy), Options(raw_mode=True))
    for key in range(25_000):
        old[b"k%06d" % key] = b"v%d" % key
    old[b"\x00\x00checkpoint:input"] = (42).to_bytes(8, "big")
    old[b"\x00\x00checkpoint:changelog"] = (7).to_bytes(8, "big")
    old.close()
    store = RocksDBBackend(tmp_path).open("orders", 2)
    assert store.checkpoint() == Checkpoint(42, 7)
    assert store.get_many([b"k000000", b"k024999"]) == [b"v0", b"v24999"]
    assert len(store.keys(b"k")) == 25_000
    assert not (tmp_path / "orders").exists()
    store.close()
    again = RocksDBBackend(tmp_path).open("orders", 2)
    assert again.checkpoint() == Checkpoint(42, 7)
    again.close()
