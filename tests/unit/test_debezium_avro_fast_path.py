"""The Avro fast paths of ``debezium-upsert`` and ``debezium`` against the general path: the
same outputs, dead letters, state, refusals and source positions, byte for byte.

Random batches of Debezium Avro events (Debezium 3.6's own schemas for the probe table)
mix what the fast paths take (creates, updates, deletes and their tombstones, replays of
earlier offsets) with what they leave to the general path: a schema met for the first
time, a newer schema whose rows meet rows stored under the older one, TOASTed values,
truncated or padded bodies, a bad union branch, an unknown schema id, events without a
position or with an unreadable one, snapshot events, another connector, an update
without ``before``, a delete with a row, JSON events and keys between Avro ones, and a
missing key. One reconciler runs with the fast paths, one without.
"""

from __future__ import annotations

import copy
import decimal
import json
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.dataplane.positions import source_position
from processor.errors import RegistryRefusedSourceError
from processor.events.avro_codec import AvroCodec
from processor.events.change import TOAST_PLACEHOLDER
from processor.reconcile.batch import Batch, Reconciler
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.fast_path_runs import decide_alike
from tests.unit.fuzzing import SCALE
from tests.unit.probe import SCHEMAS, TOPIC, frame, probe_event
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.errors import RegistryRefusedError
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import MemoryRegistry, SchemaCache

#: The wall clock the reconciler reads (when keys are asked for again): fixed, so that
#: runs compare and write the same bytes.
NOW = 1_800_000_000.0

#: ``make fuzz`` runs these properties this many times longer.

TP = (TOPIC, 0)
KEY_ID, VALUE_ID, NEWER_ID = 1, 2, 3


def newer_schema() -> dict[str, Any]:
    """The value schema after ``ALTER TABLE probe ADD COLUMN extra text``."""
    schema = copy.deepcopy(SCHEMAS["value"])
    row = schema["fields"][0]["type"][1]
    row["fields"].append({"default": None, "name": "extra", "type": ["null", "string"]})
    return schema


NEWER = newer_schema()


def registry() -> MemoryRegistry:
    registry = MemoryRegistry()
    assert registry.register(TOPIC + "-key", json.dumps(SCHEMAS["key"])) == KEY_ID
    assert registry.register(TOPIC + "-value", json.dumps(SCHEMAS["value"])) == VALUE_ID
    assert registry.register(TOPIC + "-value", json.dumps(NEWER)) == NEWER_ID
    return registry


names = st.one_of(
    st.text(max_size=6),
    st.sampled_from([None, "é\U0001f600", "a", "b", "c", "d", "e", "f", "g", TOAST_PLACEHOLDER]),
)


@st.composite
def rows(draw: st.DrawFn, key: int, newer: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": key,
        "name": draw(names),
        "amount": draw(st.sampled_from([None, decimal.Decimal("12.34"), decimal.Decimal("-1")])),
        "at": None,
        "u": None,
        "j": '{"x": 1}',
        "d": draw(st.sampled_from([None, 20780])),
    }
    if newer:
        row["extra"] = draw(st.sampled_from([None, "x"]))
    return row


@st.composite
def events(draw: st.DrawFn, key: int, newer: bool) -> dict[str, Any]:
    op = draw(st.sampled_from("cudr"))
    lsn = draw(st.integers(1, 40))
    after = None if op == "d" else draw(rows(key, newer))
    if draw(st.integers(0, 30)) == 0:
        after = draw(rows(key, newer)) if op == "d" else None  # refused by the general path
    event = probe_event(op, after, f'["{lsn * 8 - 4}","{lsn * 8}"]', draw(st.integers(90, 110)))
    source = event["source"]
    source["lsn"] = lsn * 8
    if draw(st.integers(0, 3)) == 0:
        source["sequence"] = None  # the LSN alone
    if draw(st.booleans()):
        source["txId"] = None
    if draw(st.integers(0, 20)) == 0:
        source["sequence"] = source["lsn"] = None  # no position
    if draw(st.integers(0, 20)) == 0:
        source["sequence"] = "[not a pair"
    source["connector"] = draw(st.sampled_from(["postgresql"] * 30 + ["mysql", "mongodb"]))
    source["snapshot"] = draw(st.sampled_from(["false"] * 20 + ["true", "last", "incremental"]))
    if op != "c" and draw(st.integers(0, 5)):
        event["before"] = draw(rows(key, newer))
    return event


@st.composite
def messages(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """A Debezium Avro message of the probe table, now and then one of another kind."""
    key = draw(st.integers(0, 3))
    avro_key = frame(KEY_ID, SCHEMAS["key"], {"id": key})
    kind = draw(st.integers(0, 40))
    if kind == 0:
        return avro_key, None  # a tombstone
    if kind == 1:  # JSON between Avro: its rows in state meet Avro changes
        event = {
            "before": None,
            "after": {"id": key, "name": "json"},
            "source": {"connector": "postgresql", "lsn": draw(st.integers(1, 320))},
            "op": "u",
            "ts_ms": 1,
        }
        return orjson.dumps({"id": key}), orjson.dumps(event)
    newer = draw(st.integers(0, 8)) == 0
    value = frame(
        NEWER_ID if newer else VALUE_ID,
        NEWER if newer else SCHEMAS["value"],
        draw(events(key, newer)),
    )
    if kind == 2:
        value = draw(
            st.sampled_from(
                [
                    value[: draw(st.integers(0, len(value) - 1))],  # cut short
                    value + b"\x00",  # padded
                    value[:5] + b"\x04" + value[6:],  # a union branch out of range
                    b"\x00\x00\x00\x00\x63" + value[5:],  # an unknown schema id
                ]
            )
        )
    if kind == 3:
        return None, value
    return avro_key, value


def make_reconciler(schemas: MemoryRegistry, envelope: str, fused: bool = True) -> Reconciler:
    processor = ProcessorConfig(envelopes={"public.probe": envelope}, fused_paths=fused)
    config = Config(processor=processor)
    return Reconciler(config, SchemaCache(schemas), clock=lambda: NOW)


def seen(batch: Batch) -> dict[str, Any]:
    return {
        "records": batch.records,
        "dead": [(e.message.offset, e.kind, str(e)) for e in batch.dead_letters],
        "updates": {tp: dict(state.updates) for tp, state in batch.states.items()},
        "next": batch.next_offsets,
        "rewinds": batch.rewinds,
        "produced": batch.produced,
        # the fast path keeps the fields after ``after``, the general path the whole event:
        # the commit protocol records the position ``source`` gives
        "positions": {tp: source_position(e) for tp, e in batch.last_events.items()},
        "read_again": batch.read_again,
    }


@pytest.mark.fuzz
@pytest.mark.parametrize("envelope", ["debezium-upsert", "debezium"])
@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_avro_fast_path_decides_as_the_general_path(envelope: str, data: st.DataObject) -> None:
    drawn = data.draw(st.lists(messages(), min_size=8, max_size=40))
    stream = [RawMessage(TOPIC, 0, offset, k, v) for offset, (k, v) in enumerate(drawn)]
    schemas = registry()
    fast, general = make_reconciler(schemas, envelope), make_reconciler(schemas, envelope, False)
    decide_alike(data, stream, (fast, general), seen)


@pytest.mark.parametrize("envelope", ["debezium-upsert", "debezium"])
def test_most_avro_messages_take_the_fast_path(envelope: str) -> None:
    """Not a path that declines everything: once the first batch has met the schemas, a
    plain stream is decided without decoding a row."""
    key = frame(KEY_ID, SCHEMAS["key"], {"id": 1})

    def event(i: int) -> bytes:
        after = {"id": 1, "name": f"v{i}", "amount": None, "at": None, "u": None}
        row = dict(after, j=None, d=None)
        payload = probe_event("c" if i == 0 else "u", row, f'["{8 * i}","{8 * i + 4}"]', 700 + i)
        payload["before"] = None if i == 0 else dict(row, name=f"v{i - 1}")
        return frame(VALUE_ID, SCHEMAS["value"], payload)

    stream = [RawMessage(TOPIC, 0, i, key, event(i)) for i in range(50)]
    reconciler, store = make_reconciler(registry(), envelope), MemoryPartitionStore()
    first = reconciler.decide({TP: stream[:1]}, {TP: store})
    store.commit(first.states[TP].updates, Checkpoint(None))
    with mock.patch.object(AvroCodec, "decode") as decode:
        batch = reconciler.decide({TP: stream[1:]}, {TP: store})
    assert decode.call_count == 1  # the group's last change, for processor/reconcile/epochs.py
    assert len(batch.records) == 49
    output = batch.records[-1][3] or b""
    assert b"v48" in output and b"v49" in output
    assert source_position(batch.last_events[TP]) == {
        "postgresql": {"lsn": 12, "txId": 749, "lsn_commit": 392, "ts_usec": 1000}
    }


class Refusing(MemoryRegistry):
    """A registry that answers 403 for every schema (a subject the processor may not
    read): :class:`~tidemark.core.schema_registry.HttpRegistry` raises this."""

    def schema(self, schema_id: int) -> str:
        raise RegistryRefusedError(f"schema registry refused (HTTP 403) id {schema_id}")


@pytest.mark.parametrize("fused", [True, False])
def test_a_schema_the_registry_refuses_stops_its_topic_and_drops_the_batch(fused: bool) -> None:
    """Neither a dead letter (the data is valid) nor the process's end: the batch raises,
    naming the topic, so that the data plane drops it before anything is durable and
    stops that topic alone (:mod:`processor.dataplane.loop`)."""
    key = frame(KEY_ID, SCHEMAS["key"], {"id": 1})
    payload = probe_event("c", dict(id=1, name="a", amount=None, at=None, u=None, j=None, d=None))
    stream = [RawMessage(TOPIC, 0, 0, key, frame(VALUE_ID, SCHEMAS["value"], payload))]
    reconciler = make_reconciler(Refusing(), "debezium-upsert", fused)
    with pytest.raises(RegistryRefusedSourceError) as raised:
        reconciler.decide({TP: stream}, {TP: MemoryPartitionStore()})
    assert raised.value.topic == TOPIC and "HTTP 403" in raised.value.reason
