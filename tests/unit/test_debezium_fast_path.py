"""The fast paths of ``debezium-upsert`` and ``debezium`` against the general path: the
same outputs, dead letters, state, refusals and source positions, byte for byte.

Random batches mix what the fast paths take (Debezium events, bare or in a known schema
envelope, creates, updates, deletes and their tombstones, replays of earlier offsets,
keys whose state holds a chunk row of a backfill) with what they leave to the general
path (a first schema, TOASTed values, malformed bytes, events without a position, Avro
bytes, a missing key, snapshot rows, another connector, an update without ``before``).
One reconciler runs with the fast paths, one without.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.events.change import TOAST_PLACEHOLDER
from processor.events.chunk_tag import ChunkTag
from processor.events.json_codec import JsonCodec
from processor.events.visibility import PgSnapshot, Window
from processor.reconcile.batch import Batch, Reconciler
from processor.reconcile.envelopes import ENTRY
from processor.reconcile.versions import Entry
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.fuzzing import SCALE
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import MemoryRegistry, SchemaCache
from tidemark.core.topics import backfill_topic

#: The wall clock the reconciler reads (when keys are asked for again): fixed, so that
#: runs compare and write the same bytes.
NOW = 1_800_000_000.0

#: ``make fuzz`` runs these properties and the byte fuzzing this many times longer.

TOPIC = "tidemark.public.items"
TP = (TOPIC, 0)
BACKFILL = backfill_topic("tidemark", TOPIC)
ROW = {
    "type": "struct",
    "optional": True,
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "name"},
    ],
}
VALUE_SCHEMA = {
    "type": "struct",
    "optional": False,
    "name": "tidemark.public.items.Envelope",
    "fields": [
        dict(ROW, field="before"),
        dict(ROW, field="after"),
        {"type": "struct", "optional": False, "field": "source", "fields": []},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ],
}
KEY_SCHEMA = {
    "type": "struct",
    "optional": False,
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}

names = st.one_of(
    st.text(max_size=6), st.none(), st.just(TOAST_PLACEHOLDER), st.just("é\U0001f600")
)


@st.composite
def events(draw: st.DrawFn, key: int) -> dict[str, Any]:
    op = draw(st.sampled_from("cudr"))
    row = {"id": key, "name": draw(names)}
    lsn = draw(st.integers(1, 40))
    source: dict[str, Any] = {
        "connector": draw(st.sampled_from(["postgresql"] * 30 + ["mysql", "mongodb"])),
        "snapshot": draw(st.sampled_from(["false"] * 8 + ["true", "last", "incremental"])),
        "lsn": lsn * 8,
    }
    if draw(st.booleans()):
        # PostgreSQL's [last commit, this event]: events of one transaction share the first
        commit = lsn * 8 - 4 if draw(st.booleans()) else draw(st.integers(1, 5)) * 8
        source["sequence"] = orjson.dumps([str(commit), str(lsn * 8)]).decode()
    if draw(st.booleans()):
        source["txId"] = draw(st.integers(90, 110))
    if draw(st.integers(0, 20)) == 0:
        del source["lsn"]  # no position: a dead letter, on the general path
    before = draw(st.sampled_from([None] + [{"id": key, "name": "old"}] * 30))
    return {
        "before": before if op != "c" else None,
        "after": None if op == "d" else row,
        "source": source,
        "op": op,
        "ts_ms": 1700000000000 + lsn,
    }


#: How a topic's messages are written: bare JSON, in the schema envelope, or indented.
STYLES = ("bare", "schema", "indented")


@st.composite
def messages(draw: st.DrawFn, style: str) -> tuple[bytes | None, bytes | None]:
    """A message of a topic written in ``style``, now and then in another or malformed."""
    key = draw(st.integers(0, 3))
    kind = draw(st.integers(0, 15))
    bare_key = orjson.dumps({"id": key})
    if kind == 0:
        return bare_key, None  # a tombstone
    if kind == 1:
        return draw(
            st.sampled_from(
                [
                    (bare_key, b"{not json"),
                    (bare_key, b"[1]"),
                    (None, orjson.dumps(draw(events(key)))),
                    (b"\x00\x00\x00\x00\x63\x02", b"\x00\x00\x00\x00\x63\x02"),
                    (b"{}", orjson.dumps(draw(events(key)))),
                ]
            )
        )
    if kind == 2:
        style = draw(st.sampled_from(STYLES))
    event = draw(events(key))
    if style == "schema":
        value = orjson.dumps({"schema": VALUE_SCHEMA, "payload": event})
        return orjson.dumps({"schema": KEY_SCHEMA, "payload": {"id": key}}), value
    if style == "indented":
        return bare_key, b" " + orjson.dumps(event, option=orjson.OPT_INDENT_2)
    return bare_key, orjson.dumps(event)


def chunk_row(
    key: int, number: int, seen: PgSnapshot | Window, style: str = "bare", name: Any = None
) -> RawMessage:
    """A chunk row of a backfill of ``key`` (chunk ``number``, read in ``seen``), written in
    ``style`` as Tidemark's chunk reader writes a topic's rows."""
    payload = {
        "before": None,
        "after": {"id": key, "name": f"chunk {number}" if name is None else name},
        "source": {"connector": "postgresql", "snapshot": "incremental", "txId": None},
        "op": "r",
        "ts_ms": 1,
    }
    tag = ChunkTag(number, seen, "load")
    key_bytes, value = orjson.dumps({"id": key}), orjson.dumps(payload)
    if style == "schema":
        value = orjson.dumps({"schema": VALUE_SCHEMA, "payload": payload})
        key_bytes = orjson.dumps({"schema": KEY_SCHEMA, "payload": {"id": key}})
    return RawMessage(BACKFILL, 0, number, key_bytes, value, tag)


@st.composite
def chunks(draw: st.DrawFn, style: str, number: int) -> list[RawMessage]:
    """The rows of one or two chunks, now and then one the fused path does not take (a
    TOASTed or malformed row, one whose row is not JSON, a signal-table window's, a row in
    another style)."""
    xmin = draw(st.integers(90, 111))
    seen_in: PgSnapshot | Window = PgSnapshot(xmin, xmin)
    if draw(st.integers(0, 5)) == 0:
        seen_in = Window((0, 0), (8, 8), (0,), PgSnapshot(xmin, xmin))
    rows = []
    for key in draw(st.lists(st.integers(0, 5), min_size=1, max_size=8)):
        kind = draw(st.integers(0, 12))
        if kind == 0:
            rows.append(chunk_row(key, number, seen_in, style, TOAST_PLACEHOLDER))
        elif kind == 1:
            row = chunk_row(key, number, seen_in, style)
            rows.append(row._replace(value=(row.value or b"")[:-3] + b"]}}"))
        elif kind == 2:
            rows.append(chunk_row(key, number, seen_in, draw(st.sampled_from(STYLES[:2]))))
        elif kind == 3:
            rows.append(chunk_row(key, number + 1, seen_in, style))  # the next chunk's
        elif kind == 4:  # in its envelope, but its row is not one JSON object
            row = chunk_row(key, number, seen_in, style)
            rows.append(row._replace(value=(row.value or b"").replace(b'"after":{', b'"after":{{')))
        else:
            rows.append(chunk_row(key, number, seen_in, style, draw(names)))
    offset = 100 * number
    return [row._replace(offset=offset + i) for i, row in enumerate(rows)]


def make_reconciler(envelope: str = "debezium-upsert", fused: bool = True) -> Reconciler:
    processor = ProcessorConfig(envelopes={"public.items": envelope}, fused_paths=fused)
    config = Config(processor=processor)
    return Reconciler(config, SchemaCache(MemoryRegistry()), clock=lambda: NOW)


def seen(batch: Batch) -> dict[str, Any]:
    return {
        "records": batch.records,
        "dead": [(e.message.offset, e.kind) for e in batch.dead_letters],
        "updates": {tp: dict(state.updates) for tp, state in batch.states.items()},
        "next": batch.next_offsets,
        "rewinds": batch.rewinds,
        "produced": batch.produced,
        "last": batch.last_events,
        "read_again": batch.read_again,
    }


@pytest.mark.fuzz
@pytest.mark.parametrize("envelope", ["debezium-upsert", "debezium"])
@settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_fast_path_decides_as_the_general_path(envelope: str, data: st.DataObject) -> None:
    style = data.draw(st.sampled_from(STYLES))
    drawn = data.draw(st.lists(messages(style), min_size=1, max_size=40))
    stream = [RawMessage(TOPIC, 0, offset, k, v) for offset, (k, v) in enumerate(drawn)]
    fast, general = make_reconciler(envelope), make_reconciler(envelope, fused=False)
    fast_store, general_store = MemoryPartitionStore(), MemoryPartitionStore()
    start = number = 0
    while start < len(stream):
        size = data.draw(st.integers(1, 12))
        if data.draw(st.booleans()) and start:  # a rewind: replay some earlier offsets
            start = data.draw(st.integers(0, start - 1))
        groups: dict[tuple[str, int], list[RawMessage]] = {TP: stream[start : start + size]}
        if data.draw(st.integers(0, 2)) == 0:  # chunk rows of a backfill, after the changes
            number += 2
            groups[(BACKFILL, 0)] = data.draw(chunks(style, number))
        decided = fast.decide(groups, {TP: fast_store}, reached=lambda _tp: 1000)
        expected = general.decide(groups, {TP: general_store}, reached=lambda _tp: 1000)
        assert seen(decided) == seen(expected)
        assert fast.refused == general.refused
        if fast.refused:
            break  # the topic stays stopped: nothing more to decide
        flushed = decided.next_offsets[TP] if data.draw(st.booleans()) else None
        fast_store.commit(decided.states[TP].updates, Checkpoint(flushed))
        general_store.commit(expected.states[TP].updates, Checkpoint(flushed))
        start += size


def test_most_messages_take_the_fast_path() -> None:
    """Not a path that declines everything: a plain stream is decided without decoding."""
    key = orjson.dumps({"id": 1})
    events_ = [
        {
            "before": None,
            "after": {"id": 1, "name": f"v{i}"},
            "source": {"connector": "postgresql", "lsn": 100 + i, "txId": 7 + i},
            "op": "c" if i == 0 else "u",
            "ts_ms": i,
        }
        for i in range(50)
    ]
    stream = [RawMessage(TOPIC, 0, i, key, orjson.dumps(e)) for i, e in enumerate(events_)]
    with mock.patch("processor.events.json_codec.JsonCodec.decode") as decode:
        batch = make_reconciler().decide({TP: stream}, {TP: MemoryPartitionStore()})
    assert decode.call_count == 1  # the group's last change, for processor/reconcile/epochs.py
    assert len(batch.records) == 50
    last = orjson.loads(batch.records[-1][3] or b"")
    assert last["before"] == {"id": 1, "name": "v48"} and last["after"]["name"] == "v49"
    assert batch.last_events[TP]["source"]["lsn"] == 149


def test_integers_beyond_64_bits_pass_exactly() -> None:
    """The output is spliced from the input's bytes: a numeric(30) value stays exact
    (orjson would have read it as a double)."""
    key = orjson.dumps({"id": 1})
    big = b"123456789012345678901234567890"
    value = (
        b'{"before":null,"after":{"id":1,"amount":' + big + b'},"source":{"connector":'
        b'"postgresql","lsn":8},"op":"c","ts_ms":1}'
    )
    for fast in (True, False):
        reconciler = make_reconciler(fused=fast)
        stream = [RawMessage(TOPIC, 0, 0, key, value)]
        batch = reconciler.decide({TP: stream}, {TP: MemoryPartitionStore()})
        output = batch.records[0][3] or b""
        assert b'"after":{"id":1,"amount":' + big + b"}" in output, fast
        assert batch.states[TP].updates[b"k" + key].endswith(big + b"}")


def test_a_change_after_a_snapshot_group_ends_the_group() -> None:
    """``debezium``: the keys the group remembered are pruned once a change passes it."""
    key = orjson.dumps({"id": 1})

    def event(lsn: int, snapshot: str) -> bytes:
        source = {"connector": "postgresql", "snapshot": snapshot, "lsn": lsn}
        op = "c" if snapshot == "false" else "r"
        return orjson.dumps(
            {"before": None, "after": {"id": 1}, "source": source, "op": op, "ts_ms": 1}
        )

    outcomes = []
    for fast in (True, False):
        reconciler, store = make_reconciler("debezium", fused=fast), MemoryPartitionStore()
        for offset, (lsn, snapshot) in enumerate([(8, "true"), (16, "false")]):
            message = RawMessage(TOPIC, 0, offset, key, event(lsn, snapshot))
            batch = reconciler.decide({TP: [message]}, {TP: store})
            store.commit(batch.states[TP].updates, Checkpoint(None))
        outcomes.append(seen(batch))
        assert store.keys(b"s") == []  # the group's keys are gone
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("style", ["bare", "schema"])
def test_a_chunks_rows_after_its_first_take_the_fused_path(style: str) -> None:
    """Only a chunk's first row is decoded (the codec learns its envelope from it); the
    rest are decided without parsing, into the same outputs and state as decoded ones.
    Two chunks in a batch: each one's first row is decoded."""
    seen_in = PgSnapshot(100, 100)
    rows = [chunk_row(key, 3, seen_in, style)._replace(offset=key) for key in range(30)]
    later = [chunk_row(key, 4, seen_in, style)._replace(offset=key) for key in range(30, 50)]
    rows = [row._replace(chunk=rows[0].chunk) for row in rows]  # one tag per chunk, as parsed
    rows += [row._replace(chunk=later[0].chunk) for row in later]
    outcomes = []
    decode = JsonCodec.decode
    for fast in (True, False):
        decoded: list[int] = []

        def counted(
            codec: JsonCodec, msg: RawMessage, key: bytes, decoded: list[int] = decoded
        ) -> Any:
            decoded.append(msg.offset)
            return decode(codec, msg, key)

        reconciler = make_reconciler(fused=fast)
        with mock.patch.object(JsonCodec, "decode", counted):
            batch = reconciler.decide({(BACKFILL, 0): rows}, {TP: MemoryPartitionStore()})
        outcomes.append(seen(batch))
        assert decoded == ([0, 30] if fast else list(range(50)))
    assert outcomes[0] == outcomes[1]
    event = orjson.loads(outcomes[0]["records"][-1][3])
    payload = event["payload"] if style == "schema" else event
    assert payload["after"] == {"id": 49, "name": "chunk 4"} and payload["before"] is None
    assert payload["tidemark"]["reason"] == "snapshot"


def test_a_chunk_row_older_than_a_pending_change_asks_again() -> None:
    """A key whose change waits for its row to be read again (TOASTed, no earlier row):
    a chunk row read before that change is no answer, and the key is asked for again."""
    pending = Entry((40, 40), None, 105, pending=True).encode()
    # the first row (another key's) teaches the codec the chunk's envelope
    rows = [chunk_row(k, 3, PgSnapshot(100, 100))._replace(offset=k) for k in (0, 1)]
    outcomes = []
    for fast in (True, False):
        store = MemoryPartitionStore()
        store.commit({ENTRY + orjson.dumps({"id": 1}): pending}, Checkpoint(None))
        batch = make_reconciler(fused=fast).decide({(BACKFILL, 0): rows}, {TP: store})
        outcomes.append(seen(batch))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0]["read_again"] == {TP: {b'{"id":1}': {"id": 1}}}
    assert [orjson.loads(r[2] or b"") for r in outcomes[0]["records"]] == [{"id": 0}]


def test_an_avro_message_of_a_schema_never_registered_is_a_dead_letter() -> None:
    """The Avro loop once took its output key header from any key of the group, before
    deciding anything, and a key of a schema id the registry does not know raised (found
    by the property above)."""
    unknown = b"\x00\x00\x00\x00\x63\x02"
    msg = RawMessage(TP[0], TP[1], 0, unknown, unknown, None)
    batch = make_reconciler().decide({TP: [msg]}, {TP: MemoryPartitionStore()})
    assert [e.message.offset for e in batch.dead_letters] == [0]
