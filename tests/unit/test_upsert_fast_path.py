"""The flat-upsert fast path against the general path: the same outputs, dead letters and state.

Random batches mix what the fast path takes (bare JSON rows, rows in a known
schema envelope, deletes, flattened Debezium rows with a transaction id or a delete
marker, replays of earlier offsets) with what it leaves to the
general path (a first schema, malformed bytes, JSON that is not an object, a
missing key, Avro bytes with an unknown schema id). One reconciler runs with
the fast path, one without; every batch must decide the same, byte for byte
but for ``ts_ms`` (the processing time).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.events.chunk_tag import ChunkTag
from processor.events.visibility import PgSnapshot
from processor.reconcile.batch import Batch, Reconciler
from processor.reconcile.versions import Entry
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.fast_path_runs import decide_alike
from tests.unit.fuzzing import SCALE
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import MemoryRegistry, SchemaCache
from tidemark.core.topics import backfill_topic

TOPIC = "tidemark.public.items"
TP = (TOPIC, 0)
ROW_SCHEMA = {
    "type": "struct",
    "name": "tidemark.public.items.Value",
    "optional": False,
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "name"},
    ],
}
#: A row in the schema envelope, with the row's bytes at ``"@"``.
ENVELOPED = orjson.dumps({"schema": ROW_SCHEMA, "payload": "@"})

rows = st.fixed_dictionaries(
    {"id": st.integers(0, 3)},
    optional={
        "name": st.text(max_size=8) | st.none(),
        # Debezium's ExtractNewRecordState fields: a transaction id (sometimes beyond 64
        # bits, or not a number; orjson writes up to 2**64 - 1), and the delete marker of its
        # rewrite mode
        "__txId": st.integers(-(2**63), 2**64 - 1) | st.none() | st.just("7") | st.just(True),
        "__deleted": st.sampled_from(["true", "false", True, None]),
    },
)
values = st.one_of(
    rows.map(orjson.dumps),
    rows.map(lambda row: b" " + orjson.dumps(row, option=orjson.OPT_INDENT_2) + b"\n"),
    rows.map(lambda row: orjson.dumps({"schema": ROW_SCHEMA, "payload": row})),
    rows.map(lambda row: ENVELOPED.replace(b'"@"', orjson.dumps(row, option=orjson.OPT_INDENT_2))),
    st.none(),
    st.sampled_from(
        [
            b"{not json",
            b"[1, 2]",
            b'"text"',
            orjson.dumps({"schema": ROW_SCHEMA, "payload": [1]}),
            b"\x00\x00\x00\x00\x63\x02",  # Avro framing, an id no registry knows
        ]
    ),
)
keys = st.one_of(
    st.integers(0, 3).map(lambda k: orjson.dumps({"id": k})),
    st.sampled_from([None, b"\x00\x00\x00\x00\x63\x02"]),
)


def make_reconciler(fused: bool = True) -> Reconciler:
    config = Config(
        processor=ProcessorConfig(envelopes={"public.items": "upsert"}, fused_paths=fused)
    )
    return Reconciler(config, SchemaCache(MemoryRegistry()))


def seen(batch: Batch) -> dict[str, Any]:
    """What a batch decided, with the processing time blanked out."""
    return {
        "records": [
            (topic, partition, key, re.sub(rb'"ts_ms":\d+', b'"ts_ms":0', value or b"") or None)
            for topic, partition, key, value in batch.records
        ],
        "dead": [(e.message.offset, e.kind) for e in batch.dead_letters],
        "updates": {tp: dict(state.updates) for tp, state in batch.states.items()},
        "next": batch.next_offsets,
        "rewinds": batch.rewinds,
        "produced": batch.produced,
    }


@pytest.mark.fuzz
@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_fast_path_decides_as_the_general_path(data: st.DataObject) -> None:
    messages = data.draw(st.lists(st.tuples(keys, values), min_size=1, max_size=40))
    stream = [RawMessage(TOPIC, 0, offset, k, v) for offset, (k, v) in enumerate(messages)]
    # The checkpoint decide_alike draws says the outputs were flushed, or not yet (a crash
    # between flush and checkpoint, whose replay is emitted again).
    decide_alike(data, stream, (make_reconciler(), make_reconciler(fused=False)), seen)


def test_rows_go_to_state_and_output_as_the_input_bytes() -> None:
    """A row in a known schema envelope is stored and emitted as its own payload bytes."""
    reconciler, store = make_reconciler(), MemoryPartitionStore()
    key = orjson.dumps({"id": 1})
    payload = b'{"id":1, "name":"a"}'
    enveloped = ENVELOPED.replace(b'"@"', payload)
    stream = [RawMessage(TOPIC, 0, offset, key, enveloped) for offset in range(3)]
    batch = reconciler.decide({TP: stream}, {TP: store})
    events = [orjson.loads(value or b"")["payload"] for _t, _p, _k, value in batch.records]
    assert [e["op"] for e in events] == ["c", "u", "u"]
    assert [e["before"] for e in events] == [None, {"id": 1, "name": "a"}, {"id": 1, "name": "a"}]
    assert payload in (batch.records[2][3] or b"")  # the input's bytes, spacing kept
    assert batch.states[TP].updates[b"k" + key].endswith(payload)


@pytest.mark.parametrize("fused", [True, False])
def test_a_rewind_that_kept_state_emits_nothing_again_batch_after_batch(fused: bool) -> None:
    """An offsets rewind to the beginning that keeps state reads again, in batches as small
    as the batch limit makes them, changes whose outputs are in Kafka: none is emitted
    again, in the first batch of the replay or in a later one."""
    reconciler, store = make_reconciler(fused), MemoryPartitionStore()
    stream = [
        RawMessage(TOPIC, 0, offset, orjson.dumps({"id": offset % 3}), orjson.dumps({"n": offset}))
        for offset in range(9)
    ]
    first = reconciler.decide({TP: stream}, {TP: store})
    assert len(first.records) == 9
    store.commit(first.states[TP].updates, Checkpoint.after_batch(first.next_offsets[TP], 1))
    for cut in range(0, 9, 3):  # the replay, three records a batch
        batch = reconciler.decide({TP: stream[cut : cut + 3]}, {TP: store})
        assert batch.records == [], cut
        store.commit(batch.states[TP].updates, Checkpoint.after_batch(cut + 3, 1))


def test_a_flattened_delete_keeps_its_transaction_id_until_a_stale_chunk_row_comes() -> None:
    """ExtractNewRecordState's rewrite mode: ``__deleted`` ``"true"`` deletes with the
    transaction id, the tombstone after it changes nothing, and a chunk row read before
    the delete committed is dropped, not resurrected; one read after it is applied."""
    reconciler, store = make_reconciler(), MemoryPartitionStore()
    key = orjson.dumps({"id": 1})
    row = {"id": 1, "name": "a", "__op": "c", "__txId": 100, "__deleted": "false"}
    deleted = dict(row, __op="d", __txId=101, __deleted="true")
    stream = [
        RawMessage(TOPIC, 0, 0, key, orjson.dumps(row)),
        RawMessage(TOPIC, 0, 1, key, orjson.dumps(deleted)),
        RawMessage(TOPIC, 0, 2, key, None),
    ]
    batch = reconciler.decide({TP: stream}, {TP: store})
    ops = [orjson.loads(v)["op"] if v else None for _t, _p, _k, v in batch.records]
    assert ops == ["c", "d", None]  # the tombstone after the delete emits nothing more
    assert Entry.decode(batch.states[TP].updates[b"k" + key]).txid == 101
    store.commit(batch.states[TP].updates, Checkpoint(3))
    backfill = backfill_topic("tidemark", TOPIC)
    chunk_row = orjson.dumps(dict(row, __op="r", __txId=None))
    for number, seen, emitted in ((1, PgSnapshot(100, 101), []), (2, PgSnapshot(102, 102), ["r"])):
        tag = ChunkTag(number, seen, "load")
        message = RawMessage(backfill, 0, number, key, chunk_row, tag)
        batch = reconciler.decide({(backfill, 0): [message]}, {TP: store})
        events = [orjson.loads(v) for _t, _p, _k, v in batch.records if v]
        assert [e["op"] for e in events] == emitted, seen
        assert all(e["tidemark"]["reason"] == "snapshot" for e in events)
        store.commit(batch.states[TP].updates, Checkpoint(3))
