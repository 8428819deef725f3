"""The reconciler under malformed input (hypothesis): it never crashes and loses nothing.

A valid Debezium stream (JSON with or without schemas, or Avro) is interleaved
with generated bad messages: random bytes, truncated events, JSON that is not
a Debezium event, unknown ops, unreadable positions, missing or mismatched
keys, unknown Avro schema ids, truncated Avro bodies. Fed in batches of random
sizes, every bad message must come out as a dead letter carrying its raw bytes,
and the valid ones must produce exactly the outputs of the clean stream.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.events.change import TOAST_PLACEHOLDER
from processor.reconcile import epochs
from processor.reconcile.asked_again import ASKED
from processor.reconcile.batch import Reconciler
from processor.reconcile.envelopes import ENTRY
from processor.reconcile.versions import FORMAT_BYTE, HEAD, Entry
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.probe import SCHEMAS, TOPIC, frame, probe_event
from tidemark.core.config import Config, KafkaConfig, ProcessorConfig
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import MemoryRegistry, SchemaCache

TP = (TOPIC, 0)
JSON_SCHEMA = {
    "type": "struct",
    "name": "tidemark.public.probe.Envelope",
    "optional": False,
    "fields": [
        {"type": "struct", "field": "before", "optional": True, "fields": []},
        {"type": "struct", "field": "after", "optional": True, "fields": []},
        {"type": "string", "field": "op", "optional": False},
    ],
}
KEY_SCHEMA = {
    "type": "struct",
    "optional": False,
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}


def event(key: int, op: str, name: str | None, position: int) -> dict[str, Any]:
    after = None
    if name is not None:
        after = {
            "id": key,
            "name": name,
            "amount": None,
            "at": None,
            "u": None,
            "j": None,
            "d": None,
        }
    return probe_event(op, after, f'["{position}","{position}"]', txid=position, lsn=position)


def encode(fmt: str, key: int, payload: dict[str, Any] | None) -> tuple[bytes, bytes | None]:
    """Key and value bytes of one event in ``fmt``."""
    if fmt == "avro":
        value = None if payload is None else frame(2, SCHEMAS["value"], payload)
        return frame(1, SCHEMAS["key"], {"id": key}), value
    if fmt == "json":
        wrapped_key = orjson.dumps({"schema": KEY_SCHEMA, "payload": {"id": key}})
        value = (
            None if payload is None else orjson.dumps({"schema": JSON_SCHEMA, "payload": payload})
        )
        return wrapped_key, value
    value = None if payload is None else orjson.dumps(payload)
    return orjson.dumps({"id": key}), value


@st.composite
def valid_streams(draw: st.DrawFn, fmt: str) -> list[tuple[bytes, bytes | None]]:
    """Key/value pairs of a commit-ordered stream, Debezium tombstones after deletes."""
    live: set[int] = set()
    out: list[tuple[bytes, bytes | None]] = []
    position = 100
    for _ in range(draw(st.integers(1, 30))):
        position += draw(st.integers(1, 3))
        key = draw(st.integers(0, 5))
        if key in live and draw(st.booleans()):
            live.discard(key)
            out.append(encode(fmt, key, event(key, "d", None, position)))
            out.append((encode(fmt, key, None)[0], None))
        else:
            name = draw(st.text(max_size=8))
            out.append(encode(fmt, key, event(key, "u" if key in live else "c", name, position)))
            live.add(key)
    return out


BAD_KEYS = [b"[1]", b'"id"', b"{}", b'{"schema":{"fields":3},"payload":{"id":1}}']


def bad_messages(fmt: str) -> st.SearchStrategy[tuple[bytes | None, bytes | None]]:
    good_key, good_value = encode(fmt, 1, event(1, "u", "x", 5))
    assert good_value is not None
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=6,
    )
    broken = [
        st.binary(min_size=1, max_size=40).map(lambda b: (good_key, b)),
        st.integers(1, len(good_value) - 1).map(lambda n: (good_key, good_value[:n])),
        json_values.map(lambda v: (good_key, orjson.dumps(v))),
        st.sampled_from(["x", "U", "", "delete"]).map(
            lambda op: (good_key, orjson.dumps(event(1, op, "x", 5)))
        ),
        st.sampled_from(["[oops", "[]", '["a","b"]']).map(
            lambda seq: (
                good_key,
                orjson.dumps({**event(1, "u", "x", 5), "source": {"sequence": seq}}),
            )
        ),
        st.just((None, good_value)),
        st.sampled_from(
            [b"[1]", b'"id"', b"{}", b'{"schema":{"fields":3},"payload":{"id":1}}']
        ).map(lambda key: (key, good_value)),
        st.just((orjson.dumps({"schema": KEY_SCHEMA, "payload": {"id": "one"}}), good_value)),
        st.integers(3, 1000).map(lambda sid: (good_key, struct.pack(">bI", 0, sid) + b"\x02")),
    ]
    if fmt == "avro":
        broken.append(st.integers(6, len(good_value) - 1).map(lambda n: (good_key, good_value[:n])))
    return st.one_of(broken)


def run(
    reconciler: Reconciler, messages: list[tuple[bytes | None, bytes | None]], batches: list[int]
) -> tuple[list[tuple[bytes | None, bytes | None]], list[int]]:
    """Feed ``messages`` in batches; return the outputs and the dead letters' offsets."""
    store = MemoryPartitionStore()
    raw = [RawMessage(TOPIC, 0, offset, k, v) for offset, (k, v) in enumerate(messages)]
    outputs: list[tuple[bytes | None, bytes | None]] = []
    dead: list[int] = []
    start, sizes = 0, iter(batches)
    while start < len(raw):
        size = next(sizes, 5)
        batch = reconciler.decide({TP: raw[start : start + size]}, {TP: store})
        outputs += [(key, value) for _topic, _p, key, value in batch.records]
        dead += [error.message.offset for error in batch.dead_letters]
        for error in batch.dead_letters:
            assert error.message == raw[error.message.offset]  # the raw message, unchanged
        store.commit(batch.states[TP].updates, Checkpoint(batch.next_offsets[TP]))
        start += size
    return outputs, dead


def comparable(
    registry: MemoryRegistry, outputs: list[tuple[bytes | None, bytes | None]]
) -> list[Any]:
    """Outputs decoded, without the ``tidemark`` block (its offsets differ between runs)."""
    seen: list[Any] = []
    for key, value in outputs:
        if value is None:
            seen.append((key, None))
            continue
        if value[:1] == b"\x00":
            schema_id = struct.unpack(">I", value[1:5])[0]
            schema = fastavro.parse_schema(json.loads(registry.schema(schema_id)), {})
            payload = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
        else:
            doc = orjson.loads(value)
            payload = doc.get("payload", doc)
        assert isinstance(payload, dict)
        seen.append((key, payload["op"], payload["before"], payload["after"]))
    return seen


#: Key 7's bytes in state, per format: a JSON key's payload, an Avro key's body.
ENTRY_KEYS = {"json-schemaless": b'{"id":7}', "json": b'{"id":7}', "avro": b"\x0e"}


def make_reconciler() -> tuple[Reconciler, MemoryRegistry]:
    registry = MemoryRegistry()
    registry.register(TOPIC + "-key", json.dumps(SCHEMAS["key"]))
    registry.register(TOPIC + "-value", json.dumps(SCHEMAS["value"]))
    return Reconciler(Config(processor=ProcessorConfig()), SchemaCache(registry)), registry


@pytest.mark.parametrize("fmt", ["json-schemaless", "json", "avro"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_bad_input_becomes_dead_letters_and_the_rest_flows(fmt: str, data: st.DataObject) -> None:
    valid = data.draw(valid_streams(fmt))
    bad = data.draw(st.lists(bad_messages(fmt), min_size=1, max_size=12))
    mixed: list[tuple[bytes | None, bytes | None]] = list(valid)
    for message in bad:
        at = data.draw(st.integers(0, len(mixed)))
        mixed.insert(at, message)
    bad_ids = {id(m) for m in bad}
    bad_offsets = [i for i, m in enumerate(mixed) if id(m) in bad_ids]
    batches = data.draw(st.lists(st.integers(1, 9), max_size=20))

    clean, clean_registry = make_reconciler()
    fuzzed, registry = make_reconciler()
    clean_outputs, clean_dead = run(clean, valid, [5])
    outputs, dead = run(fuzzed, mixed, batches)
    assert clean_dead == []
    assert dead == bad_offsets
    assert comparable(registry, outputs) == comparable(clean_registry, clean_outputs)
    assert len(clean_outputs) >= len([v for _, v in valid if v is not None])


def test_a_source_that_breaks_the_debezium_envelope_stops_alone() -> None:
    config = Config(processor=ProcessorConfig(envelopes={"public.probe": "debezium"}))
    reconciler = Reconciler(config)
    other = ("tidemark.public.other", 0)
    ok = [
        RawMessage(other[0], 0, i, *encode("json-schemaless", 1, event(1, "c", "x", 10 + i)))
        for i in range(3)
    ]
    no_before = encode("json-schemaless", 1, event(1, "u", "x", 20))
    probe = [
        RawMessage(TOPIC, 0, 0, *encode("json-schemaless", 1, event(1, "c", "x", 10))),
        RawMessage(TOPIC, 0, 1, *no_before),  # an update without 'before'
        RawMessage(TOPIC, 0, 2, *encode("json-schemaless", 1, event(1, "c", "y", 30))),
    ]
    stores = {TP: MemoryPartitionStore(), other: MemoryPartitionStore()}
    batch = reconciler.decide({TP: probe, other: ok}, stores)
    assert "REPLICA IDENTITY FULL" in reconciler.refused[TOPIC]
    assert batch.next_offsets == {TP: 1, other: 3}  # the refused partition stops at the update
    assert batch.rewinds == {TP: 1}
    assert [r[0] for r in batch.records] == ["tidemark.reconciled.public.probe"] + [
        "tidemark.reconciled.public.other"
    ] * 3
    again = reconciler.decide({TP: probe[1:], other: []}, stores)
    assert again.rewinds == {TP: 1} and not again.records  # it stays stopped


def test_a_replay_is_emitted_again_only_above_the_flushed_checkpoint() -> None:
    """A replay of offsets whose outputs were flushed (below the store's checkpoint, as after
    an offsets rewind that kept state) emits nothing; above it (a crash between flush and
    checkpoint) the equal versions are emitted again (I5)."""
    reconciler, _registry = make_reconciler()
    stream = [
        RawMessage(
            TOPIC, 0, i, *encode("json-schemaless", i % 3, event(i % 3, "c", f"v{i}", 10 + i))
        )
        for i in range(6)
    ]
    store = MemoryPartitionStore()
    first = reconciler.decide({TP: stream}, {TP: store})
    assert len(first.records) == 6
    assert first.last_events[TP]["source"]["lsn"] == 15  # the last change's position
    # The state holds the batch, but its checkpoint says only offsets below 4 were flushed.
    store.commit(first.states[TP].updates, Checkpoint(4))
    again = reconciler.decide({TP: stream}, {TP: store})
    emitted_offsets = [orjson.loads(r[3])["tidemark"]["offset"] for r in again.records if r[3]]
    assert emitted_offsets == [4, 5]
    store.commit({}, Checkpoint(6))
    assert reconciler.decide({TP: stream}, {TP: store}).records == []


SOURCE_FIELDS = ["connector", "snapshot", "sequence", "lsn", "txId", "file", "pos", "row", "db"]
#: Anything JSON can hold, integers beyond 64 bits included (Python's json writes them).
ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
POSITIONS = st.one_of(
    ANY_JSON,
    st.integers(-(2**70), 2**70).map(lambda n: f'["{n}","{n}"]'),
    st.integers(-(2**70), 2**70).map(lambda n: f"[{n}, 1]"),
    st.sampled_from(["[1e400, 2]", '["1", null]', "[[1], 2]", "[{}, 2]"]),
)


@st.composite
def random_sources(draw: st.DrawFn) -> Any:
    """A ``source`` block: some fields of Debezium's, each of any JSON type, or not a dict."""
    if draw(st.integers(0, 9)) == 0:
        return draw(ANY_JSON)
    fields = draw(st.lists(st.sampled_from(SOURCE_FIELDS), unique=True, max_size=6))
    source = {"connector": "postgresql", "sequence": '["10","12"]'}
    for name in fields:
        source[name] = draw(POSITIONS if name in ("sequence", "lsn", "pos") else ANY_JSON)
    return source


@st.composite
def poisoned(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """A message whose key or ``source`` block (or op) may be anything JSON holds."""
    key = draw(st.integers(0, 4))
    payload = event(key, draw(st.sampled_from(["c", "u", "d"])), "x", 10)
    if payload["op"] == "d":
        payload["after"] = None
    payload["source"] = draw(random_sources())
    if draw(st.integers(0, 5)) == 0:
        payload["op"] = draw(ANY_JSON)
    raw_key = orjson.dumps({"id": key})
    if draw(st.integers(0, 4)) == 0:
        raw_key = json.dumps(draw(ANY_JSON)).encode()
    elif draw(st.integers(0, 4)) == 0:
        fields = [{"field": draw(ANY_JSON), "type": draw(ANY_JSON), "optional": False}]
        schema = {"type": "struct", "fields": fields}
        raw_key = json.dumps({"schema": schema, "payload": {"id": key}}).encode()
    return raw_key, json.dumps(payload).encode()


@pytest.mark.parametrize("envelope", ["upsert", "debezium-upsert", "debezium"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(poisoned(), min_size=1, max_size=12), size=st.integers(1, 5))
def test_random_source_blocks_and_keys_never_stop_a_partition(
    envelope: str, messages: list[tuple[bytes | None, bytes | None]], size: int
) -> None:
    """Whatever a message's source block or key holds, deciding it does not raise: it is
    applied, dropped as a replay or dead-lettered, and the partition moves past it (the
    ``debezium`` envelope may refuse its source for a string connector it cannot order)."""
    config = Config(processor=ProcessorConfig(envelope=envelope))
    reconciler = Reconciler(config)
    store = MemoryPartitionStore()
    raw = [RawMessage(TOPIC, 0, offset, k, v) for offset, (k, v) in enumerate(messages)]
    for start in range(0, len(raw), size):
        batch = reconciler.decide({TP: raw[start : start + size]}, {TP: store})
        if TOPIC in reconciler.refused:
            assert envelope == "debezium" and TP in batch.rewinds
            return
        assert batch.next_offsets[TP] == min(start + size, len(raw))
        store.commit(batch.states[TP].updates, Checkpoint(batch.next_offsets[TP]))


def contents(store: MemoryPartitionStore) -> dict[bytes, bytes | None]:
    return {key: store.get(key) for key in store.keys(b"")}


@pytest.mark.parametrize("envelope", ["upsert", "debezium-upsert", "debezium"])
def test_a_message_too_large_for_its_output_is_a_dead_letter_reference(envelope: str) -> None:
    """Its output could hold the old row and the new one: an input above half the record
    limit becomes a dead letter that refers to it (the bytes may not fit the dead-letter
    topic either), and the partition goes on. State keeps the row before; under
    ``debezium-upsert`` its entry becomes pending at the lost change's version, and its row
    is asked for (and noted, to be asked for again until it comes)."""
    limit = 64 * 1024
    config = Config(
        kafka=KafkaConfig(max_record_bytes=limit), processor=ProcessorConfig(envelope=envelope)
    )
    reconciler = Reconciler(config)
    store = MemoryPartitionStore()
    fmt = "json-schemaless"
    before = RawMessage(TOPIC, 0, 0, *encode(fmt, 1, event(1, "c", "small", 10)))
    huge = RawMessage(TOPIC, 0, 1, *encode(fmt, 1, event(1, "u", "x" * limit, 11)))
    after = RawMessage(TOPIC, 0, 2, *encode(fmt, 2, event(2, "c", "next", 12)))
    first = reconciler.decide({TP: [before]}, {TP: store})
    store.commit(first.states[TP].updates, Checkpoint(1))
    held = contents(store)
    batch = reconciler.decide({TP: [huge]}, {TP: store})
    assert batch.records == [] and batch.next_offsets == {TP: 2}
    [letter] = batch.dead_letters
    assert letter.kind == "too-large" and letter.message.offset == 1
    reference = orjson.loads(letter.message.value or b"")
    assert reference == {
        "topic": TOPIC,
        "partition": 0,
        "offset": 1,
        "size": len(huge.key or b"") + len(huge.value or b""),
        "reason": letter.reason,
    }
    assert str(limit) in letter.reason
    updates = batch.states[TP].updates if TP in batch.states else {}
    if envelope == "debezium-upsert":
        [(key, entry)] = [(k, v) for k, v in updates.items() if not k.startswith(ASKED)]
        kept = Entry.decode(held[key] or b"")
        assert Entry.decode(entry or b"") == Entry((11, 11), kept.value, 11, pending=True)
        assert batch.read_again == {TP: {key.removeprefix(ENTRY): {"id": 1}}}
        [noted] = [k for k in updates if k.startswith(ASKED)]
        assert noted.endswith(key.removeprefix(ENTRY))
    else:
        assert not updates and not batch.read_again
    store.commit(updates, Checkpoint(2))
    assert {k for k in contents(store) if not k.startswith(ASKED)} == held.keys()
    rest = reconciler.decide({TP: [after]}, {TP: store})
    assert len(rest.records) >= 1 and rest.dead_letters == []


@pytest.mark.parametrize("fmt", ["json-schemaless", "json", "avro"])
def test_an_unfillable_toast_value_asks_for_its_row_not_a_dead_letter(fmt: str) -> None:
    """An update whose unchanged TOAST value has no row to come from (no state for its
    key): no output and no dead letter; the batch asks for the key's row, by its columns."""
    reconciler, _registry = make_reconciler()
    partial = event(7, "u", TOAST_PLACEHOLDER, 40)
    stream = [
        RawMessage(TOPIC, 0, 0, *encode(fmt, 7, partial)),
        RawMessage(TOPIC, 0, 1, *encode(fmt, 8, event(8, "c", "full", 41))),
    ]
    batch = reconciler.decide({TP: stream}, {TP: MemoryPartitionStore()})
    assert batch.dead_letters == []
    assert len([r for r in batch.records if r[3] is not None]) == 1  # key 8's output only
    assert batch.read_again == {TP: {ENTRY_KEYS[fmt]: {"id": 7}}}


@pytest.mark.parametrize("fmt", ["json-schemaless", "json", "avro"])
def test_a_pending_key_is_asked_for_again_until_its_row_comes(fmt: str) -> None:
    """A request to read a key again can be refused or aborted (the coordinator refuses a
    table whose encoding disagrees with its topic, its queue is full): nothing would ask
    again. A pending key is asked for again after ``read_again_retry_s``, then twice as
    long each time, across a restart; once a change replaced the pending entry, its note
    is dropped when due, with no request."""
    registry = make_reconciler()[1]
    now = [1_000.0]
    config = Config(processor=ProcessorConfig(read_again_retry_s=60))
    store = MemoryPartitionStore()
    reconciler = Reconciler(config, SchemaCache(registry), clock=lambda: now[0])
    offset = [0]

    def decide(*changes: dict[str, Any]) -> Any:
        messages = [
            RawMessage(TOPIC, 0, offset[0] + i, *encode(fmt, c["after"]["id"], c))
            for i, c in enumerate(changes)
        ]
        offset[0] += len(messages)
        batch = reconciler.decide({TP: messages} if messages else {}, {TP: store})
        for state in batch.states.values():
            store.commit(state.updates, Checkpoint(offset[0]))
        return batch

    asked = {TP: {ENTRY_KEYS[fmt]: {"id": 7}}}
    assert decide(event(7, "u", TOAST_PLACEHOLDER, 40)).read_again == asked
    now[0] += 59
    assert decide().read_again == {}
    now[0] += 2
    assert decide().read_again == asked  # 60 s after the first request
    reconciler = Reconciler(config, SchemaCache(registry), clock=lambda: now[0])
    now[0] += 119
    assert decide().read_again == {}
    now[0] += 2
    assert decide().read_again == asked  # 120 s after the second: a restart forgets nothing
    decide(event(7, "u", "whole", 41))  # the key's row comes with a change
    now[0] += 3600
    last = decide()
    assert last.read_again == {} and not store.keys(ASKED)


@pytest.mark.parametrize("fmt", ["json-schemaless", "json", "avro"])
@pytest.mark.parametrize("lost", ["too-large", "undecodable"])
def test_a_dead_lettered_change_leaves_its_key_pending_not_at_the_row_before(
    fmt: str, lost: str
) -> None:
    """A change of a key that becomes a dead letter is missing from state: a later update
    whose unchanged TOAST value would be filled from the row before it would emit a row the
    source never had. The key goes pending instead, and that update asks for its row; an
    update that carries its whole row is applied as usual."""
    limit = 64 * 1024
    config = Config(kafka=KafkaConfig(max_record_bytes=limit), processor=ProcessorConfig())
    registry = make_reconciler()[1]
    reconciler = Reconciler(config, SchemaCache(registry))
    key, small = encode(fmt, 7, event(7, "c", "A", 10))
    if lost == "too-large":
        value = encode(fmt, 7, event(7, "u", "x" * limit, 11))[1]
    else:
        value = b"{not json" if fmt != "avro" else b"\x00\x00\x00\x00\x63garbage"
    stream = [
        (key, small),
        (key, value),
        encode(fmt, 7, event(7, "u", TOAST_PLACEHOLDER, 12)),
        encode(fmt, 8, event(8, "c", "other", 13)),
    ]
    store = MemoryPartitionStore()
    raw = [RawMessage(TOPIC, 0, offset, k, v) for offset, (k, v) in enumerate(stream)]
    first = reconciler.decide({TP: raw[:2]}, {TP: store})
    assert [letter.message.offset for letter in first.dead_letters] == [1]
    store.commit(first.states[TP].updates, Checkpoint(2))
    batch = reconciler.decide({TP: raw[2:]}, {TP: store})
    outputs = comparable(registry, [(k, v) for _t, _p, k, v in batch.records])
    assert [output[3]["name"] for output in outputs if output[1] is not None] == ["other"]
    assert batch.read_again == {TP: {ENTRY_KEYS[fmt]: {"id": 7}}}
    at_once = Reconciler(config, SchemaCache(registry)).decide(
        {TP: raw}, {TP: MemoryPartitionStore()}
    )  # the fused paths meet the pending entry in the batch's own state
    assert at_once.read_again == batch.read_again
    assert len(at_once.records) == len(first.records) + len(batch.records)
    store.commit(batch.states[TP].updates, Checkpoint(4))
    whole = reconciler.decide(
        {TP: [RawMessage(TOPIC, 0, 4, *encode(fmt, 7, event(7, "u", "B", 14)))]}, {TP: store}
    )
    [applied] = comparable(registry, [(k, v) for _t, _p, k, v in whole.records])
    assert applied[3]["name"] == "B" and whole.read_again == {}


def key_7_in_two_partitions(
    reconciler: Reconciler, fmt: str
) -> tuple[dict[tuple[str, int], MemoryPartitionStore], bytes]:
    """Stores of partitions 0 and 1 after key 7 was created in each (committed at input
    offset 1), and the key's entry's state key in partition 0."""
    stores = {(TOPIC, 0): MemoryPartitionStore(), (TOPIC, 1): MemoryPartitionStore()}
    first = {
        (TOPIC, p): [RawMessage(TOPIC, p, 0, *encode(fmt, 7, event(7, "c", "A", 10)))]
        for p in (0, 1)
    }
    batch = reconciler.decide(first, stores)
    for tp, store in stores.items():
        store.commit(batch.states[tp].updates, Checkpoint(1))
    [entry_key] = [k for k in stores[(TOPIC, 0)].keys(b"k")]
    return stores, entry_key


@pytest.mark.parametrize("fmt", ["json-schemaless", "avro"])
@pytest.mark.parametrize("envelope", ["upsert", "debezium-upsert"])
@pytest.mark.parametrize("fused", [True, False])
def test_a_state_entry_of_an_unknown_format_stops_its_partition_alone(
    fmt: str, envelope: str, fused: bool
) -> None:
    """An entry whose format byte this release does not know (a newer release wrote it,
    or it is damaged) is never guessed at: its input partition stops at the message that
    meets it, with the reason, and is read again from there; the messages before it and
    the other partitions go on."""
    registry = make_reconciler()[1]
    config = Config(processor=ProcessorConfig(envelope=envelope, fused_paths=fused))
    reconciler = Reconciler(config, SchemaCache(registry))
    stores, entry_key = key_7_in_two_partitions(reconciler, fmt)
    newer = b"\x03" + (stores[(TOPIC, 0)].get(entry_key) or b"")[1:]
    stores[(TOPIC, 0)].commit({entry_key: newer}, Checkpoint())
    later = {
        (TOPIC, p): [
            RawMessage(TOPIC, p, 1, *encode(fmt, 8, event(8, "c", "B", 11))),
            RawMessage(TOPIC, p, 2, *encode(fmt, 7, event(7, "u", "C", 12))),
            RawMessage(TOPIC, p, 3, *encode(fmt, 9, event(9, "c", "D", 13))),
        ]
        for p in (0, 1)
    }
    batch = reconciler.decide(later, stores)
    assert batch.next_offsets == {(TOPIC, 0): 2, (TOPIC, 1): 4}
    assert batch.rewinds == {(TOPIC, 0): 2}
    assert [r[1] for r in batch.records if r[3] is not None] == [0, 1, 1, 1]
    [reason] = reconciler.refused_partitions.values()
    assert "format 3" in reason and list(reconciler.refused_partitions) == [(TOPIC, 0)]
    assert reconciler.refused == {}
    assert stores[(TOPIC, 0)].get(entry_key) == newer  # nothing guessed, nothing rewritten
    again = reconciler.decide({(TOPIC, 0): later[(TOPIC, 0)][1:]}, stores)
    assert again.rewinds == {(TOPIC, 0): 2} and again.records == []


@pytest.mark.parametrize("envelope", ["debezium-upsert", "debezium"])
@pytest.mark.parametrize("fused", [True, False])
def test_a_debezium_resnapshot_after_a_lost_slot_repairs_the_keys_that_changed(
    envelope: str, fused: bool
) -> None:
    """A new connector (after a lost slot) snapshots the table again: its rows carry
    ``sequence: [null, X]`` (real Debezium 3.x), X the position it read at. They are newer
    than every change streamed before X, so the keys that changed while nothing streamed
    are repaired; the changes streamed after the snapshot, and a replay of an old change,
    are ordered as before."""
    config = Config(processor=ProcessorConfig(envelope=envelope, fused_paths=fused))
    reconciler = Reconciler(config)
    store = MemoryPartitionStore()
    fmt = "json-schemaless"

    def change(key: int, op: str, name: str, sequence: str, before: str | None = None) -> Any:
        payload = probe_event(op, {**event(key, op, name, 1)["after"]}, sequence, 5, 5)
        if before is not None:
            payload["before"] = {**event(key, op, before, 1)["after"]}
        if op == "r":
            payload["source"]["snapshot"] = "true"
        return encode(fmt, key, payload)

    streamed = [
        change(1, "c", "a", '["100","100"]'),
        change(1, "u", "b", '["110","110"]', "a"),
    ]
    resnapshot = [
        change(1, "r", "lost", '[null,"200"]'),  # changed while the slot was gone
        change(2, "r", "new", '[null,"200"]'),
        change(1, "u", "after", '["210","210"]', "lost"),
        change(1, "u", "b", '["110","110"]', "a"),  # a replay of an old change
    ]
    raw = [RawMessage(TOPIC, 0, i, k, v) for i, (k, v) in enumerate(streamed + resnapshot)]
    first = reconciler.decide({TP: raw[:2]}, {TP: store})
    store.commit(first.states[TP].updates, Checkpoint(2))
    batch = reconciler.decide({TP: raw[2:]}, {TP: store})
    names = [orjson.loads(r[3])["after"]["name"] for r in batch.records if r[3] is not None]
    assert names == ["lost", "new", "after"]


@pytest.mark.parametrize("restarted", [False, True])
@pytest.mark.parametrize("envelope", ["debezium-upsert", "debezium"])
def test_positions_that_go_back_with_later_commits_stop_the_partition_a_replay_does_not(
    envelope: str, restarted: bool
) -> None:
    """A failover to a replica with a shorter WAL: new commits come at positions below
    those already seen. Decided, each change of a key with state would be dropped as
    older. The partition stops before any of them is decided, with the reason; a replay
    of older changes (same positions, same commit times) and the other partitions go on.
    The newest change seen is state: a processor started in between (``restarted``, or
    another replica given the partition) knows it too."""
    config = Config(processor=ProcessorConfig(envelope=envelope))
    reconciler = Reconciler(config)
    stores = {(TOPIC, 0): MemoryPartitionStore(), (TOPIC, 1): MemoryPartitionStore()}

    def change(key: int, name: str, position: int, committed_ms: int, before: str) -> Any:
        payload = event(key, "u", name, position)
        payload["before"] = {**payload["after"], "name": before}
        payload["source"]["ts_ms"] = committed_ms
        return encode("json-schemaless", key, payload)

    offsets = {0: 0, 1: 0}

    def decide(messages: dict[int, list[Any]]) -> Any:
        groups = {}
        for p, pairs in messages.items():
            groups[(TOPIC, p)] = [
                RawMessage(TOPIC, p, offsets[p] + i, k, v) for i, (k, v) in enumerate(pairs)
            ]
        batch = reconciler.decide(groups, stores)
        for tp, state in batch.states.items():
            stores[tp].commit(state.updates, Checkpoint(batch.next_offsets.get(tp)))
        for tp, end in batch.next_offsets.items():
            offsets[tp[1]] = end
        return batch

    old = {
        p: [change(1, f"v{i}", 100 + i, 50_000 + i, f"v{i - 1}") for i in range(5)] for p in (0, 1)
    }
    decide(old)
    replay = decide({0: old[0][2:]})  # Debezium's at-least-once after a restart
    assert replay.rewinds == {} and reconciler.refused_partitions == {}
    if restarted:
        reconciler = Reconciler(config)
    failover = [change(1, "after failover", 60 + i, 90_000 + i, "v4") for i in range(3)]
    batch = decide({0: failover, 1: [change(1, "v5", 105, 50_005, "v4")]})
    assert batch.rewinds == {(TOPIC, 0): offsets[0]}
    assert [r[1] for r in batch.records if r[3] is not None] == [1]
    [reason] = reconciler.refused_partitions.values()
    assert "positions went back" in reason and "(62, 62)" in reason and "(104, 104)" in reason
    assert list(reconciler.refused_partitions) == [(TOPIC, 0)]


@pytest.mark.parametrize("envelope", ["upsert", "debezium-upsert"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("flags", [2, 4, 8, 16 | 8, 32 | 4])
def test_a_damaged_state_entry_stops_its_partition_alone(
    envelope: str, fused: bool, flags: int
) -> None:
    """Issue 45, item 1: a changelog record is copied into state as it is, so a damaged
    one (the right format, then too few bytes for what its flags say) meets the rules as
    a state entry. It raised ``struct.error``: the batch failed, and the instance read the
    same entry at every start. It now stops its partition with the reason, like an entry
    of an unknown format; the other partition goes on."""
    config = Config(processor=ProcessorConfig(envelope=envelope, fused_paths=fused))
    reconciler = Reconciler(config)
    fmt = "json-schemaless"
    stores, entry_key = key_7_in_two_partitions(reconciler, fmt)
    damaged = HEAD.pack(FORMAT_BYTE[0], 1, 2, flags) + b"\x01"
    stores[(TOPIC, 0)].commit({entry_key: damaged}, Checkpoint())
    later = {
        (TOPIC, p): [RawMessage(TOPIC, p, 1, *encode(fmt, 7, event(7, "u", "B", 11)))]
        for p in (0, 1)
    }
    batch = reconciler.decide(later, stores)
    assert batch.next_offsets == {(TOPIC, 1): 2}  # partition 0 stays at the message
    assert batch.rewinds == {(TOPIC, 0): 1}
    [reason] = reconciler.refused_partitions.values()
    assert list(reconciler.refused_partitions) == [(TOPIC, 0)]
    assert "damaged" in reason or "format" in reason, reason
    assert stores[(TOPIC, 0)].get(entry_key) == damaged  # nothing guessed, nothing rewritten


def test_a_newest_change_stored_in_an_unknown_form_stops_its_partition() -> None:
    reconciler = Reconciler(Config(processor=ProcessorConfig(envelope="debezium-upsert")))
    store = MemoryPartitionStore()
    store.commit({epochs.NEWEST_SEEN: b"\x09" + bytes(24)}, Checkpoint(0))
    change = RawMessage(TOPIC, 0, 0, *encode("json-schemaless", 1, event(1, "c", "a", 10)))
    batch = reconciler.decide({TP: [change]}, {TP: store})
    assert batch.rewinds == {TP: 0} and batch.records == []
    assert "format 09" in reconciler.refused_partitions[TP]


@pytest.mark.parametrize(
    ("fmt", "envelope", "why"),
    [
        ("json-schemaless", "debezium", "debezium envelope"),
        ("json", "debezium", "debezium envelope"),
        ("avro", "debezium", "debezium envelope"),
    ],
)
def test_a_truncate_event_not_applied_is_a_dead_letter_that_says_so(
    fmt: str, envelope: str, why: str
) -> None:
    """Debezium writes a truncate (``op: t``, no key, no rows) when ``skipped.operations``
    lets it. Where Tidemark does not apply it (tests/unit/test_truncate.py has where it
    does) it is a dead letter of its own kind, not a keyless change that would stop a
    ``debezium`` topic, and the partition goes on."""
    registry = make_reconciler()[1]
    config = Config(processor=ProcessorConfig(envelope=envelope))
    reconciler = Reconciler(config, SchemaCache(registry), partition_count=lambda _topic: 1)
    truncate = probe_event("t", None, '["300","300"]', 300, 300)
    key, value = encode(fmt, 1, truncate)
    stream = [
        RawMessage(TOPIC, 0, 0, None, value),
        RawMessage(TOPIC, 0, 1, *encode(fmt, 2, event(2, "c", "after", 301))),
    ]
    batch = reconciler.decide({TP: stream}, {TP: MemoryPartitionStore()})
    [letter] = batch.dead_letters
    assert letter.kind == "truncate" and "TRUNCATE" in letter.reason and why in letter.reason
    assert reconciler.refused == {} and batch.next_offsets == {TP: 2}
    assert len([r for r in batch.records if r[3] is not None]) == 1
