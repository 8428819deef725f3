"""Restoring a store from its changelog on the embedded broker, whose last stable offset a
transaction it never closes can hold at 0."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from state.changelog import Restorer
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tidemark.core.config import Config
from tidemark.core.kafka import (
    TRANSACTION_TIMEOUT,
    client_config,
    consumer_config,
    ensure_topics,
    producer_config,
)
from tidemark.devstack.stack import DevStack


def test_a_changelog_whose_stable_offset_is_held_back_is_restored_not_wiped(
    stack: DevStack,
) -> None:
    """The long lifetime run: after processors were killed inside transactions, an
    instance that took partitions over found their changelogs' last stable offset at 0
    ("state at 69999, log 0..0"), took the log for one that does not continue the local
    state, wiped six stores and restored nothing into them. At a restore, the writer of
    the partition has just fenced the last one, so on Kafka nothing can hold the stable
    offset back; on the embedded broker a transaction it never closes can. The store is
    kept and restored to the partition's last record."""
    config: Config = stack.config
    topic = "tidemark-tests.changelog.held"
    ensure_topics(AdminClient(client_config(config.kafka)), {topic: 1}, 1)
    plain = Producer(producer_config(config.kafka))
    for i in range(10):
        plain.produce(topic, f"v{i}".encode(), f"k{i}".encode(), 0)
    assert plain.flush(30) == 0
    store = MemoryPartitionStore()  # restored to offset 5 earlier
    store.commit({f"k{i}".encode(): f"v{i}".encode() for i in range(5)}, Checkpoint(None, 5))
    dead = Producer(producer_config(config.kafka, **{"transactional.id": "tests-held-changelog"}))
    dead.init_transactions(TRANSACTION_TIMEOUT)
    dead.begin_transaction()
    admin = AdminClient(client_config(config.kafka))
    restorer = Restorer(consumer_config(config.kafka, "tests-restore"), admin)
    try:
        dead.produce(topic, b"v10", b"k10", 0)  # a writer that died inside its transaction
        assert dead.flush(30) == 0
        plain.produce(topic, b"v11", b"k11", 0)
        assert plain.flush(30) == 0
        assert restorer.add({(topic, 0): store}) == {(topic, 0)}
        deadline = time.monotonic() + 60
        while restorer.busy and time.monotonic() < deadline:
            restorer.step()
        assert not restorer.busy
        restored = {k.decode(): store.get(k) for k in store.keys(b"k")}
        assert restored == {f"k{i}": f"v{i}".encode() for i in range(12)}
        assert store.checkpoint().changelog_offset == 12
    finally:
        restorer.close()
        dead.abort_transaction(TRANSACTION_TIMEOUT)
