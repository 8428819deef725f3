"""The sink's event decoding into planned rows: JSON with and without schema, Avro; JSON
decoded through the compiled scanner as the splitter alone decodes it."""

from __future__ import annotations

import base64
import decimal
import json
import random
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_sink import events
from spark_sink.errors import SchemaDrift, TableStop
from spark_sink.events import EventDecoder, RowBuilder, specs_of
from spark_sink.reader import Range, split
from spark_sink.schema import Spec
from tests.unit.fuzzing import SCALE
from tests.unit.probe import SCHEMAS, TOPIC, frame, probe_event
from tidemark.core.errors import InputError
from tidemark.core.json_envelope import PAYLOAD_HEAD, SCHEMA_HEAD
from tidemark.core.json_scan import scan_envelope
from tidemark.core.messages import RawMessage
from tidemark.core.schema_registry import MemoryRegistry, SchemaCache

ROW = {
    "id": 1,
    "name": "a",
    "amount": decimal.Decimal("12.34"),
    "at": "2026-11-23T04:58:38.190775Z",
    "u": "5f81ae80-1f21-448e-9ae9-6a3b3ee4cf76",
    "j": '{"x": 1}',
    "d": 20780,
}
PLANNED = [
    Spec("id", "int"),
    Spec("name", "string"),
    Spec("amount", "decimal(10,2)"),
    Spec("at", "timestamp"),
    Spec("u", "string"),
    Spec("j", "string"),
    Spec("d", "date"),
]


def msg(value: bytes | None, key: bytes, offset: int = 3) -> RawMessage:
    return RawMessage(TOPIC, 0, offset, key, value)


@pytest.fixture
def schemas() -> SchemaCache:
    registry = MemoryRegistry()
    registry.register(TOPIC + "-key", json.dumps(SCHEMAS["key"]))
    registry.register(TOPIC + "-value", json.dumps(SCHEMAS["value"]))
    return SchemaCache(registry)


def test_avro_events_decode_into_planned_rows(schemas: SchemaCache) -> None:
    decoder = EventDecoder(schemas)
    key = frame(1, SCHEMAS["key"], {"id": 1})
    decoded = decoder.decode(msg(frame(2, SCHEMAS["value"], probe_event("c", ROW)), key))
    assert specs_of(decoded) == PLANNED
    offset, deleted, _when, *values = RowBuilder(PLANNED, ["id"]).row(3, 1000, decoded)
    assert (offset, deleted) == (3, False)
    assert values[:3] == [1, "a", decimal.Decimal("12.34")]
    assert str(values[6]) == "2026-11-23"
    tombstone = decoder.decode(msg(None, key))
    assert RowBuilder(PLANNED, ["id"]).row(4, 1000, tombstone)[1:2] == (True,)
    assert RowBuilder(PLANNED, ["id"]).row(4, 1000, tombstone)[3:] == (1, *[None] * 6)


def json_event(op: str, after: dict[str, Any] | None, with_schema: bool) -> bytes:
    payload = {"op": op, "before": None, "after": after, "source": {}}
    if not with_schema:
        return orjson.dumps(payload)
    fields = [
        {"field": "id", "type": "int32"},
        {"field": "name", "type": "string", "optional": True},
    ]
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": fields}]}
    return orjson.dumps({"schema": schema, "payload": payload})


def test_json_deletes_carry_the_key_and_the_row_when_upserted() -> None:
    decoder = EventDecoder(None)
    builder = RowBuilder([Spec("id", "int"), Spec("name", "string")], ["id"])
    key = orjson.dumps({"id": 5})
    row = builder.row(1, 0, decoder.decode(msg(json_event("u", {"id": 5, "name": "x"}, True), key)))
    assert row[1:2] == (False,) and row[3:] == (5, "x")
    row = builder.row(2, 0, decoder.decode(msg(json_event("d", None, True), key)))
    assert row[1:2] == (True,) and row[3:] == (5, None)


def test_a_column_outside_the_plan_is_drift_so_the_driver_plans_again() -> None:
    decoder = EventDecoder(None)
    builder = RowBuilder([Spec("id", "int")], ["id"])
    key = orjson.dumps({"id": 5})
    with pytest.raises(SchemaDrift, match="column name is not in the batch's plan"):
        builder.row(1, 0, decoder.decode(msg(json_event("c", {"id": 5, "name": "x"}, True), key)))
    schemaless = RowBuilder([Spec("id", "bigint"), Spec("name", "bigint")], ["id"])
    with pytest.raises(SchemaDrift, match="'x' is not an integer"):
        schemaless.row(
            1, 0, decoder.decode(msg(json_event("c", {"id": 5, "name": "x"}, False), key))
        )
    # a null in a column the plan lacks says nothing of its type: no drift
    assert schemaless.row(
        1, 0, decoder.decode(msg(json_event("c", {"id": 5, "x": None}, False), key))
    )[3:] == (5, None)


def test_undecodable_events_are_input_errors_with_their_coordinates() -> None:
    decoder = EventDecoder(None)
    with pytest.raises(InputError, match=r"probe\[0\]@3: value is not JSON"):
        decoder.decode(msg(b"{nope", b'{"id": 1}'))
    with pytest.raises(InputError, match="no schema registry"):
        decoder.decode(msg(b"\x00\x00\x00\x00\x02xx", b'{"id": 1}'))
    with pytest.raises(TableStop, match="key has no column id"):
        RowBuilder([Spec("id", "int")], ["id"]).row(
            3, 0, decoder.decode(msg(None, b'{"other": 1}'))
        )


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        (  # PostgreSQL's numeric(50,2) becomes decimal(38,2): 40 digits do not fit
            {
                "field": "v",
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "2", "connect.decimal.precision": "50"},
            },
            base64.b64encode((10**42).to_bytes(18, "big", signed=True)).decode(),
            "more than 36 digits before the point",
        ),
        (  # a date past Python's year 9999 (PostgreSQL goes to 5874897)
            {"field": "v", "type": "int32", "name": "io.debezium.time.Date"},
            3_000_000,  # days: the year 10183
            "date value out of range",
        ),
    ],
)
def test_a_value_that_does_not_fit_its_column_stops_the_table_with_its_offset(
    field: dict[str, Any], value: Any, reason: str
) -> None:
    fields = [{"field": "id", "type": "int32"}, {**field, "optional": True}]
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": fields}]}
    payload = {"op": "c", "before": None, "after": {"id": 1, "v": value}, "source": {}}
    decoded = EventDecoder(None).decode(
        msg(orjson.dumps({"schema": schema, "payload": payload}), b'{"id": 1}', offset=9)
    )
    with pytest.raises(TableStop, match=f"offset 9: column v .*{reason}"):
        RowBuilder(specs_of(decoded), ["id"]).row(9, 0, decoded)


def test_ranges_are_cut_evenly_so_every_core_reads() -> None:
    ranges = [Range("t", 0, 0, 53_000), Range("t", 1, 100, 40_100), Range("t", 2, 7, 900)]
    pieces = split(ranges, tasks=4)
    for r in ranges:  # each range covered exactly, in order
        mine = [p for p in pieces if p.partition == r.partition]
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))
    assert [p.end - p.start for p in pieces] == [17_667, 17_667, 17_666, 20_000, 20_000, 893]
    assert split(ranges[2:], tasks=4) == ranges[2:]  # small ranges stay whole


# -- the scanner's path (tidemark.core.json_scan.scan_envelope) against the splitter's ----------

#: ``make fuzz`` runs the differential property this many times longer.


def _output_schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    """A reconciled topic's value schema (the processor's ``output_schema``), ``after``'s
    row of ``fields``."""
    row = {"type": "struct", "optional": True, "fields": fields}
    return {
        "type": "struct",
        "optional": False,
        "fields": [
            dict(row, field="before"),
            dict(row, field="after"),
            {"type": "string", "optional": False, "field": "op"},
            {"type": "struct", "optional": True, "field": "source", "fields": []},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "struct", "optional": True, "field": "tidemark", "fields": []},
        ],
        "name": "probe.Envelope",
    }


VALUE_SCHEMAS = [
    _output_schema([{"field": "id", "type": "int32"}, {"field": "name", "type": "string"}]),
    _output_schema([{"field": "id", "type": "int64"}, {"field": "v", "type": "double"}]),
    {"type": "struct", "fields": [{"field": "op", "type": "string"}]},  # no after: SchemaError
]
KEY_SCHEMA = {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}
TIDEMARK = {
    "topic": "tidemark.public.probe",
    "partition": 0,
    "offset": 7,
    "position": "10,12",
    "envelope": "debezium",
    "reason": "change",
}
UPSERT_TIDEMARK = dict(TIDEMARK, envelope="upsert", position="0,0")
DEBEZIUM_SOURCE = probe_event("c", None)["source"]

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
rows = st.dictionaries(st.sampled_from(["id", "name", "v", "é", 'q"']), values, max_size=4)
#: Reconciled payloads: upsert and Debezium outputs, deletes, and what no processor writes.
payloads = st.fixed_dictionaries(
    {
        "before": rows | st.none(),
        "after": rows | st.none(),
        "op": st.sampled_from(["c", "u", "d", "r"]),
        "source": st.sampled_from([{}, DEBEZIUM_SOURCE]),
        "ts_ms": st.integers(0, 2**41),
        "tidemark": st.just(TIDEMARK),
    }
) | st.fixed_dictionaries(
    {},
    optional={
        "before": rows | st.none(),
        "after": rows | st.none() | st.sampled_from(["x", 1, [{"id": 1}], False]),
        "op": st.sampled_from(["c", "u", "d", "r", "x", "", "dd", 1, None]),
        "source": st.sampled_from([{}, None, DEBEZIUM_SOURCE]),
        "ts_ms": st.integers(0, 2**41),
        "tidemark": st.just(TIDEMARK),
        "schema": st.just({}),
        "payload": rows,
    },
)


def _dump(doc: Any, layout: int) -> bytes:
    if layout == 0:  # compact, as the processor writes (but integers beyond 64 bits too)
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    if layout == 1:
        return json.dumps(doc).encode()  # ASCII escapes, spaces
    return json.dumps(doc, ensure_ascii=False, indent=1).encode()


def _mutated(raw: bytes, seed: int) -> bytes:
    """``raw`` with a byte changed, inserted or deleted, or cut short."""
    rng = random.Random(seed)
    data = bytearray(raw)
    at = rng.randrange(len(data))
    kind = rng.randrange(4)
    if kind == 0:
        data[at] = rng.randrange(256)
    elif kind == 1:
        data[at:at] = bytes([rng.choice(b'{}[]",:\\ \x00\x1f\x80\xc3\xed0e-.')])
    elif kind == 2:
        del data[at]
    else:
        del data[at:]
    return bytes(data)


@st.composite
def reconciled_values(draw: st.DrawFn) -> bytes | None:
    """A reconciled event's value: in a schema envelope (mostly the processor's bytes), bare,
    a tombstone, what no processor writes; its payload's bytes or its own mutated or cut
    short."""
    form = draw(st.sampled_from(["envelope", "envelope", "bare", "tombstone", "spaced", "odd"]))
    if form == "tombstone":
        return None
    schema = VALUE_SCHEMAS[draw(st.sampled_from([0, 0, 0, 1, 1, 2]))]
    if form == "spaced":  # an envelope not written as its schema's prefix
        return _dump({"schema": schema, "payload": draw(payloads)}, draw(st.integers(1, 2)))
    if form == "odd":
        body = draw(
            st.sampled_from(
                [
                    b'{"op":"\\u0064","after":{"id":1}}',
                    b'{"after":{"id":1},"op":"c","after":null}',
                    b'{"op":"d","op":"c","after":{"id":1}}',
                    b'{"\\u0061fter":{"id":1},"op":"c"}',
                    b'{"op":"c","after":{"id":"\xed\xa0\x80"}}',
                    b'{"op":"c","after":{"id":"\x01"}}',
                    b'{"op":"c","after":{"id":1e400}}',
                    b'{"payload":{"after":{"id":2}},"schema":{}}',
                    b'{"schema":1,"payload":{"op":"c","after":{"id":3}},"payload":{"op":"d"}}',
                    b"[]",
                    b"",
                    b"\x00\x00\x00\x00\x02xx",
                ]
            )
        )
    else:
        body = _dump(draw(payloads), draw(st.integers(0, 2)))
    if body and draw(st.integers(0, 2)) == 0:
        body = _mutated(body, draw(st.integers(0, 2**32)))
    raw = body
    if form == "envelope" or draw(st.integers(0, 3)) == 0:
        raw = SCHEMA_HEAD + orjson.dumps(schema) + PAYLOAD_HEAD + body + b"}"
    if raw and draw(st.integers(0, 7)) == 0:
        raw = _mutated(raw, draw(st.integers(0, 2**32)))
    return raw


keys = st.sampled_from(
    [b'{"id":5}', SCHEMA_HEAD + orjson.dumps(KEY_SCHEMA) + PAYLOAD_HEAD + b'{"id":6}}'] * 3
    + [b'{"id": 5}', b"[]", b"{nope", None]
)


def _outcome(decoder: EventDecoder, message: RawMessage, metadata: bool = False) -> Any:
    """What decoding ``message`` gives, or the error it raises (type, message, kind);
    ``metadata``: through :meth:`~EventDecoder.decode_with_metadata`, its event alone."""
    try:
        if metadata:
            (deleted, row, columns), _metadata = decoder.decode_with_metadata(message)
        else:
            deleted, row, columns = decoder.decode(message)
    except Exception as exc:  # noqa: BLE001 - every error is compared
        return type(exc), str(exc), getattr(exc, "kind", None)
    specs = None if columns is None else [c.spec for c in columns]
    return deleted, repr(row), specs  # repr: 1, 1.0 and True differ


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(st.tuples(reconciled_values(), keys), min_size=1, max_size=8))
def test_the_scanner_decodes_as_the_splitter_does(
    batch: list[tuple[bytes | None, bytes | None]],
) -> None:
    """The same :data:`Decoded`, or the same error, message by message through one decoder
    (schema prefixes learned and replaced as they come), with and without the scanner,
    and with the metadata of an append table."""
    scanning, splitting = EventDecoder(None), EventDecoder(None, scan=False)
    whole = EventDecoder(None)
    for offset, (value, key) in enumerate(batch):
        message = RawMessage(TOPIC, 0, offset, key, value)
        expected = _outcome(splitting, message)
        assert _outcome(scanning, message) == expected
        assert _outcome(whole, message, metadata=True) == expected


def test_the_events_the_processor_writes_are_taken_by_the_scanner() -> None:
    """Not declined: after the first message of a schema (which teaches the splitter its
    prefix) every event is read by the scanner, upserts, Debezium's and deletes alike."""
    taken: list[Any] = []

    def spy(buf: bytes, start: int, end: int) -> Any:
        found = scan_envelope(buf, start, end)
        taken.append(found)
        return found

    decoder = EventDecoder(None)
    key = orjson.dumps({"id": 5})
    head = SCHEMA_HEAD + orjson.dumps(VALUE_SCHEMAS[0]) + PAYLOAD_HEAD
    upsert = {"before": None, "source": {}, "ts_ms": 1, "tidemark": UPSERT_TIDEMARK}
    written = [
        {**upsert, "after": {"id": 5, "name": "x"}, "op": "c"},
        {**probe_event("u", {"id": 5, "name": "y"}), "tidemark": TIDEMARK},
        {**probe_event("d", None), "tidemark": TIDEMARK},
        {**upsert, "after": None, "op": "d"},
    ]
    decoder.decode(msg(head + orjson.dumps(written[0]) + b"}", key))  # learns the prefix
    with mock.patch.object(events, "scan_envelope", spy):
        got = [decoder.decode(msg(head + orjson.dumps(p) + b"}", key)) for p in written]
        got += [decoder.decode(msg(orjson.dumps(p), key)) for p in written]
    assert len(taken) == 2 * len(written) and None not in taken
    assert [(deleted, row) for deleted, row, _ in got] == 2 * [
        (False, {"id": 5, "name": "x"}),
        (False, {"id": 5, "name": "y"}),
        (True, {"id": 5}),
        (True, {"id": 5}),
    ]
    assert [c is None for _, _, c in got] == [False, False, True, True, True, True, True, True]
