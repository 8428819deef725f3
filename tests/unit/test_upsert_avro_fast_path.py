"""The Avro fast path of ``upsert`` against the general path: the same outputs, dead
letters, state and refusals, byte for byte.

Random batches of flat Avro rows mix what the fast path takes (rows of a plain schema,
rows flattened by ``ExtractNewRecordState`` with ``__txId`` and ``__deleted``, replays
of earlier offsets) with what it leaves to the general path: a schema met for the first
time, a newer schema whose rows meet rows stored under the older one, null values,
truncated or padded bodies, an unknown schema id, JSON rows and keys between Avro
ones, and a missing key. One reconciler runs with the fast
path, one without.
"""

from __future__ import annotations

import json
import re
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.dataplane.positions import source_position
from processor.events.avro_codec import AvroCodec
from processor.reconcile.batch import Batch, Reconciler
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.fast_path_runs import decide_alike
from tests.unit.fuzzing import SCALE
from tests.unit.probe import frame
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import MemoryRegistry, SchemaCache

#: ``make fuzz`` runs this property this many times longer.

TOPIC = "tidemark.public.rows"
TP = (TOPIC, 0)
KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
ROW_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
]
ROW = {"type": "record", "name": "Value", "fields": ROW_FIELDS}
#: A row flattened by ExtractNewRecordState with ``add.fields=txId`` and ``rewrite``.
FLAT = {
    "type": "record",
    "name": "Value",
    "fields": [
        *ROW_FIELDS,
        {"name": "__deleted", "type": ["null", "string"], "default": None},
        {"name": "__txId", "type": ["null", "long"], "default": None},
    ],
}
NEWER = {
    "type": "record",
    "name": "Value",
    "fields": [*ROW_FIELDS, {"name": "extra", "type": ["null", "string"], "default": None}],
}
SCHEMAS = {"row": ROW, "flat": FLAT, "newer": NEWER}
IDS = {"key": 1, "row": 2, "flat": 3, "newer": 4}


def registry() -> MemoryRegistry:
    registry = MemoryRegistry()
    assert registry.register(TOPIC + "-key", json.dumps(KEY)) == IDS["key"]
    for kind in ("row", "flat", "newer"):
        assert registry.register(TOPIC + "-value", json.dumps(SCHEMAS[kind])) == IDS[kind]
    return registry


@st.composite
def rows(draw: st.DrawFn, key: int, kind: str) -> dict[str, Any]:
    row: dict[str, Any] = {"id": key, "name": draw(st.none() | st.text(max_size=4))}
    if kind == "flat":
        row["__deleted"] = draw(st.sampled_from([None, "false", "true", "true", "yes"]))
        row["__txId"] = draw(st.sampled_from([None, 90, 91, 2**63 - 1, -(2**63)]))
    if kind == "newer":
        row["extra"] = draw(st.none() | st.just("x"))
    return row


@st.composite
def messages(draw: st.DrawFn, kind: str) -> tuple[bytes | None, bytes | None]:
    """A row of a topic of ``kind``'s schema, now and then one of another kind."""
    key = draw(st.integers(0, 3))
    avro_key = frame(IDS["key"], KEY, {"id": key})
    special = draw(st.integers(0, 30))
    if special == 0:
        return avro_key, None  # a delete
    if special == 1:
        return orjson.dumps({"id": key}), orjson.dumps({"id": key, "name": "json"})
    if special == 2:
        kind = draw(st.sampled_from(["row", "flat", "newer"]))
    value = frame(IDS[kind], SCHEMAS[kind], draw(rows(key, kind)))
    if special == 3:
        value = draw(
            st.sampled_from(
                [
                    value[: draw(st.integers(0, len(value) - 1))],  # cut short
                    value + b"\x00",  # padded
                    b"\x00\x00\x00\x00\x63" + value[5:],  # an unknown schema id
                ]
            )
        )
    if special == 4:
        return None, value
    return avro_key, value


def make_reconciler(schemas: MemoryRegistry, fused: bool = True) -> Reconciler:
    config = Config(
        processor=ProcessorConfig(envelopes={"public.rows": "upsert"}, fused_paths=fused)
    )
    return Reconciler(config, SchemaCache(schemas))


def seen(batch: Batch) -> dict[str, Any]:
    """What a batch decided, with the processing time of JSON outputs blanked out."""
    return {
        "records": [
            (topic, partition, key, _blank_ts(value))
            for topic, partition, key, value in batch.records
        ],
        "dead": [(e.message.offset, e.kind, str(e)) for e in batch.dead_letters],
        "updates": {tp: dict(state.updates) for tp, state in batch.states.items()},
        "next": batch.next_offsets,
        "rewinds": batch.rewinds,
        "produced": batch.produced,
        # what the commit protocol records of the last events (flat rows have none)
        "positions": {
            tp: found
            for tp, event in batch.last_events.items()
            if (found := source_position(event)) is not None
        },
    }


def _blank_ts(value: bytes | None) -> bytes | None:
    if value is None or value[:1] != b"{":
        return value  # Avro outputs carry a null ts_ms
    return re.sub(rb'"ts_ms":\d+', b'"ts_ms":0', value)


@pytest.mark.fuzz
@pytest.mark.parametrize("kind", ["row", "flat"])
@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_avro_fast_path_decides_as_the_general_path(kind: str, data: st.DataObject) -> None:
    drawn = data.draw(st.lists(messages(kind), min_size=8, max_size=40))
    stream = [RawMessage(TOPIC, 0, offset, k, v) for offset, (k, v) in enumerate(drawn)]
    schemas = registry()
    fast, general = make_reconciler(schemas), make_reconciler(schemas, fused=False)
    decide_alike(data, stream, (fast, general), seen)
    assert fast.refused == {}  # upsert refuses no source


@pytest.mark.parametrize("kind", ["row", "flat"])
def test_most_avro_rows_take_the_fast_path(kind: str) -> None:
    """Not a path that declines everything: once the first batch has met the schemas, a
    plain stream is decided without decoding a row."""
    key = frame(IDS["key"], KEY, {"id": 1})
    drawn = [{"id": 1, "name": f"v{i}"} for i in range(50)]
    if kind == "flat":
        drawn = [dict(row, __deleted="false", __txId=700 + i) for i, row in enumerate(drawn)]
    stream = [
        RawMessage(TOPIC, 0, i, key, frame(IDS[kind], SCHEMAS[kind], row))
        for i, row in enumerate(drawn)
    ]
    reconciler, store = make_reconciler(registry()), MemoryPartitionStore()
    first = reconciler.decide({TP: stream[:1]}, {TP: store})
    store.commit(first.states[TP].updates, Checkpoint(None))
    with mock.patch.object(AvroCodec, "decode") as decode:
        batch = reconciler.decide({TP: stream[1:]}, {TP: store})
    assert not decode.called
    assert len(batch.records) == 49
    output = batch.records[-1][3] or b""
    assert b"v48" in output and b"v49" in output


def test_the_fast_path_goes_on_after_a_message_it_declines() -> None:
    """A delete (a null value) in a run of rows goes to the general path alone: the rows
    after it are taken by the fast path again, not decoded."""
    key = frame(IDS["key"], KEY, {"id": 1})
    stream = [
        RawMessage(TOPIC, 0, i, key, frame(IDS["row"], ROW, {"id": 1, "name": f"v{i}"}))
        for i in range(40)
    ]
    stream[20] = RawMessage(TOPIC, 0, 20, key, None)
    reconciler, store = make_reconciler(registry()), MemoryPartitionStore()
    first = reconciler.decide({TP: stream[:1]}, {TP: store})
    store.commit(first.states[TP].updates, Checkpoint(None))
    with mock.patch.object(
        AvroCodec, "decode", wraps=reconciler.topic(TOPIC).codec.avro.decode
    ) as decode:
        batch = reconciler.decide({TP: stream[1:]}, {TP: store})
    assert [call.args[0].offset for call in decode.call_args_list] == [20]
    assert len(batch.records) == 19 + 2 + 19  # the delete: its event and its tombstone


def test_a_delete_of_a_key_without_a_row_is_written_in_the_schema_met_before_it() -> None:
    """Not in one met after it in the same batch: the delete's event is the same bytes
    however the input is cut into batches."""
    row, newer = frame(IDS["row"], ROW, {"id": 0}), frame(IDS["newer"], NEWER, {"id": 2})
    stream = [
        RawMessage(TOPIC, 0, 0, frame(IDS["key"], KEY, {"id": 0}), row),
        RawMessage(TOPIC, 0, 1, frame(IDS["key"], KEY, {"id": 1}), None),  # nothing stored
        RawMessage(TOPIC, 0, 2, frame(IDS["key"], KEY, {"id": 2}), newer),
    ]
    events = []
    for cuts in ([stream], [stream[:2], stream[2:]]):
        reconciler, store = make_reconciler(registry(), fused=False), MemoryPartitionStore()
        records = []
        for group in cuts:
            batch = reconciler.decide({TP: group}, {TP: store})
            store.commit(batch.states[TP].updates, Checkpoint(None))
            records += batch.records
        events.append([value for _t, _p, _k, value in records])
    assert events[0] == events[1]
    row_output, delete = events[0][0], events[0][1]
    assert delete is not None and delete[:5] == row_output[:5]  # the row's output schema
