"""Avro in the Confluent wire format: decoding, output with its registered schema, rows in state.

The schemas are the ones Debezium 3.6's AvroConverter registered for a
PostgreSQL table (``data/debezium_avro_schemas.json``); messages are written
with fastavro against them, so these tests need no JVM. The integration tests
feed real AvroConverter bytes through the processor.
"""

from __future__ import annotations

import copy
import decimal
import io
import json
import struct
from typing import Any

import fastavro
import orjson
import pytest

from processor.events.avro_schemas import row_schema
from processor.events.change import TOAST_PLACEHOLDER, Emit, Snapshot
from processor.events.source_codec import SourceCodec
from processor.reconcile.batch import Reconciler
from processor.reconcile.envelopes import debezium_upsert
from processor.reconcile.versions import Entry
from state.batch import BatchState
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.probe import SCHEMAS, TOPIC, frame, probe_event
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.errors import InputError
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import MemoryRegistry, SchemaCache

OUTPUT = "tidemark.reconciled.public.probe"


def unframe(registry: MemoryRegistry, raw: bytes) -> tuple[int, Any]:
    schema_id = struct.unpack(">I", raw[1:5])[0]
    schema = fastavro.parse_schema(json.loads(registry.schema(schema_id)), {})
    return schema_id, fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema, None)


def row(name: str = "a", amount: str = "12.34") -> dict[str, Any]:
    return {
        "id": 1,
        "name": name,
        "amount": decimal.Decimal(amount),
        "at": "2026-11-23T04:58:38.190775Z",
        "u": "5f81ae80-1f21-448e-9ae9-6a3b3ee4cf76",
        "j": '{"x": 1}',
        "d": 20780,
    }


@pytest.fixture
def registry() -> MemoryRegistry:
    registry = MemoryRegistry()
    assert registry.register(TOPIC + "-key", json.dumps(SCHEMAS["key"])) == 1
    assert registry.register(TOPIC + "-value", json.dumps(SCHEMAS["value"])) == 2
    return registry


def message(value: bytes | None, key: bytes | None = None, offset: int = 7) -> RawMessage:
    key = key if key is not None else frame(1, SCHEMAS["key"], {"id": 1})
    return RawMessage(TOPIC, 0, offset, key, value)


def codec(registry: MemoryRegistry | None, envelope_name: str = "debezium-upsert") -> SourceCodec:
    return SourceCodec(envelope_name, OUTPUT, SchemaCache(registry) if registry else None)


def test_decodes_debezium_avro_with_logical_types(registry: MemoryRegistry) -> None:
    source = codec(registry)
    change = source.decode(message(frame(2, SCHEMAS["value"], probe_event("u", row()))))
    assert change.op == "u" and change.version == (10, 12)
    assert change.after == row()  # the decimal is a Decimal, the rest as Debezium typed them
    assert change.snapshot is Snapshot.NONE and change.connector == "postgresql"
    assert change.key == frame(1, SCHEMAS["key"], {"id": 1})[5:]  # no schema id in state keys
    assert not change.toast


def test_output_has_its_schema_registered_and_the_retraction_from_state(
    registry: MemoryRegistry,
) -> None:
    source = codec(registry)
    state = BatchState(MemoryPartitionStore())
    outputs = []
    for name, sequence in (("a", '["8","9"]'), ("b", '["10","12"]')):
        msg = message(frame(2, SCHEMAS["value"], probe_event("u", row(name), sequence)))
        change = source.decode(msg)
        emit = debezium_upsert(change, state, source)
        assert emit is not None
        outputs.append(source.encode(change, emit, msg))
    key, value = outputs[1]
    assert key == message(None).key  # the key schema is the same, so is its id
    schema_id, event = unframe(registry, value)
    assert registry.versions(OUTPUT + "-value") == [schema_id]
    assert registry.versions(OUTPUT + "-key") == [1]
    assert event["before"] == row("a") and event["after"] == row("b")
    assert event["tidemark"] == {
        "topic": TOPIC,
        "partition": 0,
        "offset": 7,
        "position": "10,12",
        "envelope": "debezium-upsert",
        "reason": "applied",
    }
    assert event["source"]["txId"] == 732


def test_a_row_in_state_is_read_into_a_newer_schema(registry: MemoryRegistry) -> None:
    newer = copy.deepcopy(SCHEMAS["value"])
    fields = newer["fields"][0]["type"][1]["fields"]
    fields.append({"name": "note", "type": ["null", "string"], "default": None})
    assert registry.register(TOPIC + "-value", json.dumps(newer)) == 3
    source = codec(registry)
    state = BatchState(MemoryPartitionStore())
    old = message(frame(2, SCHEMAS["value"], probe_event("c", row("a"))))
    first = source.decode(old)
    debezium_upsert(first, state, source)
    msg = message(frame(3, newer, probe_event("u", dict(row("b"), note="hi"), '["20","22"]')))
    change = source.decode(msg)
    emit = debezium_upsert(change, state, source)
    assert emit is not None
    _, event = unframe(registry, source.encode(change, emit, msg)[1])
    assert event["before"] == dict(row("a"), note=None)
    assert event["after"]["note"] == "hi"


@pytest.mark.parametrize("envelope_name", ["debezium-upsert", "upsert"])
def test_a_stored_row_the_newer_schema_cannot_hold_is_retracted_as_null(
    registry: MemoryRegistry, envelope_name: str
) -> None:
    """A column added ``NOT NULL`` without a default: the row stored under the older schema
    cannot be read into the newer one (this failed the batch, on every restart). The
    change is emitted with a null ``before``; the next change retracts the newer row."""
    older, newer = copy.deepcopy(SCHEMAS["value"]), copy.deepcopy(SCHEMAS["value"])
    newer["fields"][0]["type"][1]["fields"].append({"name": "qty", "type": "int"})
    if envelope_name == "upsert":
        older, newer = row_schema(older), row_schema(newer)
    older_id = registry.register(TOPIC + "-value", json.dumps(older))
    newer_id = registry.register(TOPIC + "-value", json.dumps(newer))

    def event(name: str, schema: Any, sequence: str, **added: Any) -> Any:
        datum = dict(row(name), **added)
        return datum if envelope_name == "upsert" else probe_event("u", datum, sequence)

    config = Config(processor=ProcessorConfig(envelopes={"public.probe": envelope_name}))
    reconciler = Reconciler(config, SchemaCache(registry))
    stream = [
        message(frame(older_id, older, event("a", older, '["8","9"]')), offset=0),
        message(frame(newer_id, newer, event("b", newer, '["10","12"]', qty=3)), offset=1),
        message(frame(newer_id, newer, event("c", newer, '["14","16"]', qty=4)), offset=2),
    ]
    batch = reconciler.decide({(TOPIC, 0): stream}, {(TOPIC, 0): MemoryPartitionStore()})
    assert not batch.dead_letters
    events = [unframe(registry, r[3] or b"")[1] for r in batch.records]
    assert [e["after"]["name"] for e in events] == ["a", "b", "c"]
    assert events[1]["before"] is None and events[1]["after"]["qty"] == 3
    assert events[2]["before"] == dict(row("b"), qty=3)


def test_a_stored_avro_row_whose_schema_is_gone_is_retracted_as_null_in_json(
    registry: MemoryRegistry,
) -> None:
    """A JSON key with Avro values, then JSON values, and a registry that lost the stored
    row's schema: the JSON event goes out with a null ``before`` (this failed the batch)."""
    store = MemoryPartitionStore()
    key = b'{"id":1}'
    avro = RawMessage(TOPIC, 0, 0, key, frame(2, SCHEMAS["value"], probe_event("c", row("a"))))
    first = Reconciler(Config(), SchemaCache(registry)).decide(
        {(TOPIC, 0): [avro]}, {(TOPIC, 0): store}
    )
    assert len(first.records) == 1 and not first.dead_letters
    store.commit(first.states[(TOPIC, 0)].updates, Checkpoint(1))
    source = {"sequence": '["20","22"]', "lsn": 22, "txId": 800, "connector": "postgresql"}
    change = {"before": None, "after": {"id": 1, "name": "b"}, "op": "u", "source": source}
    later = RawMessage(TOPIC, 0, 1, key, orjson.dumps(change))
    forgetful = Reconciler(Config(), SchemaCache(MemoryRegistry()))
    batch = forgetful.decide({(TOPIC, 0): [later]}, {(TOPIC, 0): store})
    assert not batch.dead_letters
    [(_, _, _, value)] = batch.records
    event = orjson.loads(value or b"")
    assert event["before"] is None and event["after"] == {"id": 1, "name": "b"}


def test_toast_placeholder_in_avro_is_filled_from_state(registry: MemoryRegistry) -> None:
    source = codec(registry)
    state = BatchState(MemoryPartitionStore())
    debezium_upsert(
        source.decode(message(frame(2, SCHEMAS["value"], probe_event("c", row())))), state, source
    )
    unchanged = dict(row("b"), j=TOAST_PLACEHOLDER)
    msg = message(frame(2, SCHEMAS["value"], probe_event("u", unchanged, '["20","22"]')))
    change = source.decode(msg)
    assert change.toast
    emit = debezium_upsert(change, state, source)
    assert emit is not None and emit.after is not None
    assert emit.after["j"] == '{"x": 1}' and emit.after["name"] == "b"


def test_a_toast_placeholder_over_an_unreadable_stored_row_asks_for_the_row(
    registry: MemoryRegistry,
) -> None:
    """The stored row's schema is gone from the registry: nothing fills the placeholder,
    so the key's row is read again from the source (this failed the batch)."""
    store = MemoryPartitionStore()
    gone = struct.pack(">bI", 0, 99) + b"\x02"  # a row under schema 99, never registered
    store.commit({b"k" + message(None).key[5:]: Entry((8, 9), gone).encode()}, Checkpoint())
    unchanged = dict(row("b"), j=TOAST_PLACEHOLDER)
    msg = message(frame(2, SCHEMAS["value"], probe_event("u", unchanged, '["20","22"]')))
    batch = Reconciler(Config(), SchemaCache(registry)).decide(
        {(TOPIC, 0): [msg]}, {(TOPIC, 0): store}
    )
    assert not batch.records and not batch.dead_letters
    assert list(batch.read_again[(TOPIC, 0)].values()) == [{"id": 1}]


def test_upsert_envelope_wraps_a_flat_avro_row(registry: MemoryRegistry) -> None:
    flat = row_schema(SCHEMAS["value"])
    value_id = registry.register("flat-value", json.dumps(flat))
    source = codec(registry, "upsert")
    msg = message(frame(value_id, flat, row()))
    change = source.decode(msg)
    assert change.after == row() and change.version == (0, 7)
    _, event = unframe(
        registry, source.encode(change, Emit("c", None, change.after, "applied"), msg)[1]
    )
    assert event["after"] == row() and event["op"] == "c" and event["before"] is None
    deleted = source.decode(message(None))
    assert deleted.op == "d" and deleted.after is None


def test_a_null_value_deletes_an_upsert_key_with_the_stored_row_as_before(
    registry: MemoryRegistry,
) -> None:
    """A null value of an Avro ``upsert`` topic names no schema: the output takes the schema
    of the row stored for the key (this crashed the batch, before). With no schema met
    yet, the tombstone alone deletes the key; a row stored in JSON is written in the last
    schema met."""
    flat = row_schema(SCHEMAS["value"])
    value_id = registry.register(TOPIC + "-value", json.dumps(flat))
    config = Config(processor=ProcessorConfig(envelopes={"public.probe": "upsert"}))
    reconciler = Reconciler(config, SchemaCache(registry))
    other_key = frame(1, SCHEMAS["key"], {"id": 2})
    store = MemoryPartitionStore()
    json_row = Entry((0, 0), b'{"id":2,"name":"j"}').encode()
    store.commit({b"k" + other_key[5:]: json_row}, Checkpoint())
    first = reconciler.decide({(TOPIC, 0): [message(None, offset=0)]}, {(TOPIC, 0): store})
    assert first.records == [(OUTPUT, 0, message(None).key, None)]  # the tombstone alone
    stream = [
        message(frame(value_id, flat, row("a")), offset=1),
        message(None, offset=2),
        message(None, other_key, offset=3),  # its row stored in JSON
    ]
    batch = reconciler.decide({(TOPIC, 0): stream}, {(TOPIC, 0): store})
    assert not batch.dead_letters
    values = [(r[2], r[3]) for r in batch.records]
    assert len(values) == 5
    assert unframe(registry, values[0][1] or b"")[1]["op"] == "c"
    _, deleted = unframe(registry, values[1][1] or b"")
    assert deleted["op"] == "d" and deleted["before"] == row("a") and deleted["after"] is None
    assert deleted["tidemark"]["offset"] == 2 and values[2] == (stream[1].key, None)
    _, other = unframe(registry, values[3][1] or b"")
    assert other["op"] == "d" and other["before"]["name"] == "j" and other["after"] is None
    assert values[4] == (other_key, None)


@pytest.mark.parametrize(
    ("value", "reason", "kind"),
    [
        (b"\x00\x00\x00\x00\x63" + b"\x00" * 8, "schema id 99 is not registered", "schema"),
        (b"\x00\x00\x00", "not in the Confluent Avro wire format", "malformed"),
        (b"\x01\x00\x00\x00\x02abc", "value is not JSON", "malformed"),  # no magic byte
        (None, "null value where a Debezium event", "not-debezium"),
    ],
)
def test_bad_avro_is_an_input_error(
    registry: MemoryRegistry, value: bytes | None, reason: str, kind: str
) -> None:
    with pytest.raises(InputError, match=reason) as info:
        codec(registry).decode(message(value))
    assert info.value.kind == kind and info.value.message.value == value


def test_a_truncated_or_padded_body_is_refused(registry: MemoryRegistry) -> None:
    good = frame(2, SCHEMAS["value"], probe_event("u", row()))
    for bad, reason in ((good[:-9], "not valid Avro"), (good + b"\x00", "1 bytes after")):
        with pytest.raises(InputError, match=reason) as info:
            codec(registry).decode(message(bad))
        assert info.value.kind == "malformed"


def test_avro_without_a_registry_is_a_dead_letter_not_a_crash() -> None:
    with pytest.raises(InputError, match="no schema registry is configured") as info:
        codec(None).decode(message(frame(2, SCHEMAS["value"], probe_event("u", row()))))
    assert info.value.kind == "schema"


def test_an_avro_key_that_is_not_a_struct_is_refused(registry: MemoryRegistry) -> None:
    key_id = registry.register("k", '"string"')
    key = frame(key_id, "string", "one")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="not a struct of primary-key columns"):
        codec(registry).decode(message(frame(2, SCHEMAS["value"], probe_event("u", row())), key))
