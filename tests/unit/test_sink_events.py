"""The sink's event decoding into planned rows: JSON with and without schema, Avro."""

from __future__ import annotations

import base64
import decimal
import json
from typing import Any

import orjson
import pytest

from spark_sink.errors import SchemaDrift, TableStop
from spark_sink.events import EventDecoder, RowBuilder, specs_of
from spark_sink.reader import Range, split
from spark_sink.schema import Spec
from tests.unit.probe import SCHEMAS, TOPIC, frame, probe_event
from tidemark.errors import InputError
from tidemark.messages import RawMessage
from tidemark.schema_registry import MemoryRegistry, SchemaCache

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
